"""Continuous (non-MIG) BestFit and FGD against the FGD paper's published allocation (reduced run).

The full check (10 seeds, 1,213 nodes / 6,212 GPUs, the paper's protocol) is `python -m bench.simulate validate`
and must land within ±0.5 points of 93.08% (BestFit) and 95.39% (FGD) at 130% arrived load. This test runs the
same protocol on the full cluster with one seed: the per-seed spread of the paper's own runs is ≤ 0.13 (BestFit)
and 0.08 (FGD) points std, and our 10-seed std is of the same order, so one seed is held to ±1.0 point — it
proves the implementation is the paper's algorithm on the paper's data, not that the 10-seed mean is within 0.5.
"""

from __future__ import annotations

import pytest

from migctl.sim.continuous import run_protocol, typical_pods
from migctl.sim.workloads import OPENB, data_dir, load_openb_nodes, load_openb_pods

DATA = data_dir(OPENB)
needs_data = pytest.mark.skipif(not (DATA / "openb_pod_list_default.csv").exists(), reason="shared openb data absent")


@needs_data
def test_typical_pods_cover_95_percent() -> None:
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    tp = typical_pods(pods)
    assert tp.prob.sum() == pytest.approx(1.0)
    assert len(tp.prob) == 35  # most popular (cpu, gpu_milli, num_gpu) shapes covering >= 95% of 8,152 pods


@needs_data
def test_bestfit_matches_the_paper_on_one_seed() -> None:
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    nodes = load_openb_nodes(DATA / "openb_node_list_gpu_node.csv")
    assert int(nodes.gpus.sum()) == 6212
    curve = run_protocol(pods, nodes, "bestfit", 42)
    assert curve.alloc_pct_at(130) == pytest.approx(93.08, abs=1.0)


@needs_data
def test_fgd_matches_the_paper_on_one_seed_of_a_quarter_cluster() -> None:
    # FGD is ~15 s on the full cluster; every 4th node (≈1,550 GPUs) keeps the test fast. The paper's number is
    # for the full cluster, so the tolerance is wider (±1.5): this guards the algorithm, the bench the figure.
    pods = load_openb_pods(DATA / "openb_pod_list_default.csv")
    nodes = load_openb_nodes(DATA / "openb_node_list_gpu_node.csv")
    import numpy as np

    from migctl.sim.scenario import _subset

    quarter = _subset(nodes, np.arange(0, len(nodes), 4))
    fgd = run_protocol(pods, quarter, "fgd", 42, typical=typical_pods(pods)).alloc_pct_at(130)
    bf = run_protocol(pods, quarter, "bestfit", 42).alloc_pct_at(130)
    assert fgd == pytest.approx(95.39, abs=1.5)
    assert fgd > bf  # the paper's ordering
