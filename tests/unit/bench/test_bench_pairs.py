"""bench.pairs: the sub-problem of a group of nodes, the gain an exact re-solve of it finds, and a results file it
cannot use."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from bench.pairs import best_gain, group_snapshot, main
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Gpu, GpuDemand, Node, Pod, Resources, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.planner import plan

CATALOG = load_catalog()


def _h100(name: str) -> Node:
    return Node(name=name, model=CATALOG.model("h100-80gb"), gpus=(Gpu(0, GpuConfig.mig({"1g.10gb": 7}), {}, False),))


def _pod(name: str, priority: int) -> Pod:
    demand = (GpuDemand("vram", vram_mib=35 * 1024),)
    return Pod("ns", name, priority, requests=Resources(1000, 2**30, 1), gpu=demand)


def _two_nodes() -> Snapshot:
    """Two idle H100s, one per node, and four 35 GiB pods of each of two priorities: a GPU holds two, so the top
    tier fills both GPUs and the lower tier is left out."""
    pods = [_pod(f"hi-{i}", 100) for i in range(4)] + [_pod(f"lo-{i}", 0) for i in range(4)]
    return Snapshot((_h100("a"), _h100("b")), tuple(pods))


def test_group_snapshot_has_the_pods_placed_there_and_the_pods_left_out() -> None:
    snap = _two_nodes()
    result = plan(snap)
    where = {a.pod: a.node for a in result.assignments}
    assert len(where) == 4  # two per GPU: the planner fills both
    sub = group_snapshot(snap, result, {"a"})
    assert [n.name for n in sub.nodes] == ["a"]
    expected = {p.key for p in snap.pending if where.get(p.key) in (None, "a")}
    assert {p.key for p in sub.pending} == expected
    assert not any(where.get(p.key) == "b" for p in sub.pending)


def test_an_optimal_plan_gains_nothing() -> None:
    # the planner places the four high-priority pods, the optimum: a group's pods placed now must be counted as
    # its baseline, or solving it again would show them as a gain
    snap = _two_nodes()
    result = plan(snap)
    assert sorted(a.pod.split("/")[1][:2] for a in result.assignments) == ["hi"] * 4
    gain = best_gain(snap, result)
    assert gain.delta == (0, 0)
    assert gain.groups == 3 and gain.unproven == 0


def test_a_plan_that_leaves_everything_out_gains_a_node_of_high_priority_pods() -> None:
    snap = _two_nodes()
    empty = replace(plan(snap), assignments=())
    gain = best_gain(snap, empty)
    assert gain.delta == (4, 0)  # the pair of nodes holds two pods each, all of the top tier
    assert gain.nodes == ("a", "b")


def test_a_results_file_without_a_quality_run_is_refused_by_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "scale-only.json"
    bad.write_text(json.dumps({"scale": {}}))
    assert main(["--results", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "quality.records" in err and "KeyError" in err
    assert main(["--results", str(tmp_path / "missing.json")]) == 2
    assert "FileNotFoundError" in capsys.readouterr().err
