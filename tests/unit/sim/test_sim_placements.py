"""The competitors that re-cut the free part of a busy GPU (nos, first-fit, best-fit, fgd-mig) obey the placement
rule too: NVML creates an instance only where its placement is free, so a re-cut that fits by instance counts but
not beside the instances in use is not offered. Only the GPU is simulated: instances where they sit
(`Cluster(track=True)`), as the in-place path's runs have them."""

from __future__ import annotations

from migctl.core.hardware.catalog import load_catalog
from migctl.sim.run import simulate
from migctl.sim.scheduler import option
from migctl.sim.shapes import Shapes
from migctl.sim.state import Cluster, Placement
from migctl.sim.workloads import Job

A100 = load_catalog().model("a100-40gb")
GIB = 1024


def _busy_at(starts: set[int], track: bool) -> Cluster:
    """One A100 cut 7 x 1g.5gb, with the instances at `starts` in use (a pod takes the lowest free start)."""
    cl = Cluster([1], A100, (("1g.5gb", 7),), track=track)
    for job in range(7):
        cl.apply(Placement(job, [(0, "1g.5gb")]), relayout=False)
    for job in set(range(7)) - starts:
        cl.release([(0, "1g.5gb")], job=job)
    return cl


def test_a_re_cut_that_fits_by_counts_but_not_beside_the_instances_in_use_is_not_offered() -> None:
    # in use at slices 1 and 5: five slices are free, but a 3g.20gb sits at 0-3 or 4-7 and a 4g.20gb at 0-3
    fits = Shapes(A100).fitting(15 * GIB)
    assert option(_busy_at({1, 5}, track=False), 0, fits, "free-slices")[1] is not None  # counts alone: yes
    assert option(_busy_at({1, 5}, track=True), 0, fits, "free-slices") == (None, None)
    # in use at 0 and 1: slices 4-7 are free, so a 3g.20gb at 4 is offered on the tracked GPU too
    p, lay = option(_busy_at({0, 1}, track=True), 0, fits, "free-slices")
    assert p == "3g.20gb" and lay is not None


def test_the_count_based_competitors_run_on_tracked_gpus() -> None:
    jobs = [Job(f"s{i}", 3 * GIB, arrival=float(i), duration=50.0 + 400.0 * (i % 2)) for i in range(7)]
    jobs.append(Job("big", 15 * GIB, arrival=100.0, duration=100.0))
    for policy in ("nos", "first-fit", "best-fit", "fgd-mig"):
        res = simulate(jobs, [1], A100, policy, seed=1)
        assert res.placed == len(jobs), policy  # every re-cut it made was reachable (the cluster asserts it)
