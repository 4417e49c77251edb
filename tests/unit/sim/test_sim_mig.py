"""MIG simulator engine: event ordering, layouts stay valid under every policy, metrics on a hand-checkable case."""

from __future__ import annotations

import pytest

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import canonical, geometry
from migctl.sim.mig import MIG_POLICIES
from migctl.sim.run import simulate
from migctl.sim.scenario import summarize
from migctl.sim.state import Cluster, Placement
from migctl.sim.workloads import Job

H100 = load_catalog().model("h100-80gb")
GIB = 1024
CTL = ControllerSettings()


def _mixed_jobs(n: int = 40) -> list[Job]:
    sizes = [5, 9, 15, 19, 30, 39, 60, 79]
    return [Job(f"j{i}", sizes[i % len(sizes)] * GIB, 1, False, float(i * 10), 200.0 + 37 * (i % 5)) for i in range(n)]


def test_departure_frees_the_instance_before_the_next_arrival_is_planned() -> None:
    # one GPU; job 1 needs the whole card and arrives exactly when job 0 leaves: departures come first
    jobs = [Job("a", 70 * GIB, 1, False, 0.0, 100.0), Job("b", 70 * GIB, 1, False, 100.0, 50.0)]
    res = simulate(jobs, [1], H100, "first-fit", reconfig_s=0.0, create_s=0.0)
    assert res.placed == 2
    assert sorted(res.wait_s) == [0.0, 0.0]


def test_queued_pod_waits_for_capacity() -> None:
    jobs = [Job("a", 70 * GIB, 1, False, 0.0, 100.0), Job("b", 70 * GIB, 1, False, 50.0, 10.0)]
    res = simulate(jobs, [1], H100, "migctl", reconfig_s=0.0)
    assert res.placed == 2
    [(_, start, end)] = res.window_log  # one reconfiguration: b reuses a's instance
    assert start == pytest.approx(CTL.debounce_s + CTL.batch_stable_s, abs=0.1)  # trigger, then the batch window
    assert res.wait_s[0] == pytest.approx(end)
    assert res.wait_s[1] == pytest.approx(end + 100.0 - 50.0)  # b takes a's 7g instance the moment a leaves


@pytest.mark.parametrize("policy", MIG_POLICIES)
def test_every_policy_keeps_layouts_valid_and_never_double_books(policy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    geo = geometry(H100)
    real_apply = Cluster.apply

    def checked(cl: Cluster, pl: Placement, relayout: bool = True) -> None:
        real_apply(cl, pl, relayout)
        for g in cl.gpus:
            assert not g.layout or geo.is_valid(canonical(g.layout))
            assert not (g.used - g.layout), "more instances in use than the layout has"

    monkeypatch.setattr(Cluster, "apply", checked)
    res = simulate(_mixed_jobs(), [2, 2], H100, policy, reconfig_s=5.0)
    assert res.placed <= res.jobs
    if policy != "static-all-1g":
        assert res.placed > 0


def test_apply_refuses_a_missing_instance() -> None:
    cl = Cluster([1], H100, (("3g.40gb", 2),))
    cl.apply(Placement(0, [(0, "3g.40gb")]))
    cl.apply(Placement(1, [(0, "3g.40gb")]))
    with pytest.raises(AssertionError):
        cl.apply(Placement(2, [(0, "3g.40gb")]))


def test_metrics_on_a_hand_checkable_case() -> None:
    # one H100, static all-balanced (2×1g.10gb + 2g.20gb + 3g.40gb); three pods, no departures
    jobs = [Job("a", 30 * GIB, arrival=0.0), Job("b", 8 * GIB, arrival=1.0), Job("c", 50 * GIB, arrival=2.0)]
    res = simulate(jobs, [1], H100, "static-balanced", departures=False, drop_unplaced=True, batch=1)
    mem = {p.name: p.memory_mib for p in H100.base_profiles}
    full = H100.full_profile.memory_mib
    assert res.placed == 2  # c (50 GiB) fits no instance of the balanced layout
    assert res.placed_mib == 38 * GIB
    assert res.internal_mib == (mem["3g.40gb"] - 30 * GIB) + (mem["1g.10gb"] - 8 * GIB)
    balanced_mib = 2 * mem["1g.10gb"] + mem["2g.20gb"] + mem["3g.40gb"]
    assert res.unusable_mib == full - balanced_mib
    m = summarize(res)
    assert m["placed_pods_pct"] == pytest.approx(200 / 3)
    assert m["placed_vram_pct"] == pytest.approx(100 * 38 / 88)
    assert m["alloc_pct"] == pytest.approx(100 * 38 * GIB / full)
    assert m["internal_pct"] == pytest.approx(100 * res.internal_mib / full)
    assert m["reconfigs_per_1k"] == 0.0


def test_migctl_uses_the_real_planner_and_recuts_only_idle_gpus() -> None:
    jobs = [Job("a", 30 * GIB, arrival=0.0, duration=5000.0), Job("b", 60 * GIB, arrival=10.0, duration=10.0)]
    res = simulate(jobs, [1], H100, "migctl", reconfig_s=0.0)
    # a's GPU keeps a 3g.40gb-based layout while a runs, so b (needs 7g) waits for a to leave
    assert res.placed == 2
    a_start = res.wait_s[0]
    assert res.wait_s[1] >= a_start + 5000.0 - 10.0


def test_static_layouts_serve_whole_gpu_pods_from_free_full_instances() -> None:
    # one node with a 2×3g GPU and a 7g GPU: a whole-GPU pod must take the 7g, never re-cut (static)
    jobs = [Job("w", H100.full_profile.memory_mib, 1, True, 0.0)]
    res = simulate(jobs, [2], H100, "static-best-mix", departures=False, drop_unplaced=True)
    assert res.placed == 1
    assert res.reconfigs == 0
