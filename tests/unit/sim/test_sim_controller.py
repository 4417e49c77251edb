"""The simulator behaves like the controller: node-wide windows, drawn reconfiguration times, batching and guard
rails from `ControllerSettings`, and a snapshot with running pods and creation times."""

from __future__ import annotations

import numpy as np
import pytest

from migctl.adapters.objects import pod_from_object
from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Pod
from migctl.core.model.settings import PlannerSettings
from migctl.sim.controller import Controller, created, snapshot
from migctl.sim.mig import Sim
from migctl.sim.run import simulate
from migctl.sim.state import Cluster, Placement
from migctl.sim.timing import ReconfigTime
from migctl.sim.workloads import Job

H100 = load_catalog().model("h100-80gb")
GIB = 1024
TWO_3G = (("3g.40gb", 2),)


def _ctl(**kw: float) -> Controller:
    return Controller(controller=ControllerSettings.model_validate(kw))


def test_a_pod_arriving_during_a_reconfiguration_waits_for_the_whole_node() -> None:
    # A (70 GiB) needs a GPU re-cut to 7g; B (30 GiB) arrives during that relabel and fits a free 3g.40gb of
    # the *other* GPU. On one node with both GPUs, B waits for the window; on two nodes it starts at once.
    # (Without pre-shaping: after A alone the forecast would re-cut the idle GPU for more pods like A.)
    jobs = [Job("a", 70 * GIB, arrival=0.0, duration=5000.0), Job("b", 30 * GIB, arrival=20.0, duration=5000.0)]
    timing = ReconfigTime(100.0, 0.0)
    ctl = Controller(PlannerSettings(preshape=False), ControllerSettings())
    one = simulate(jobs, [2], H100, ctl, reconfig=timing, initial=TWO_3G)
    [(_, start, end)] = one.window_log
    assert start < 20.0 < end
    assert one.wait_s[1] == pytest.approx(end - 20.0)  # B landed only when the node's window closed
    apart = simulate(jobs, [1, 1], H100, Controller(PlannerSettings(preshape=False)), reconfig=timing, initial=TWO_3G)
    assert apart.wait_s[1] == 0.0  # B's node is not reconfiguring


def test_reconfiguration_time_is_drawn_from_the_distribution() -> None:
    rng = np.random.default_rng(1)
    t = ReconfigTime(60.0, 0.7)
    draws = np.array([t.draw(rng) for _ in range(4000)])
    assert np.median(draws) == pytest.approx(60.0, rel=0.06)
    assert np.quantile(draws, 0.95) == pytest.approx(t.quantile(0.95), rel=0.1)
    assert t.quantile(0.99) > 240.0  # a tail to several minutes
    assert ReconfigTime(45.0, 0.0).draw(rng) == 45.0
    with pytest.raises(ValueError):
        ReconfigTime(-1.0)


def test_the_median_parameter_moves_pending_time_by_the_difference() -> None:
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=10.0)]
    fast = simulate(jobs, [1], H100, "migctl", reconfig=ReconfigTime(10.0, 0.0))
    slow = simulate(jobs, [1], H100, "migctl", reconfig=ReconfigTime(100.0, 0.0))
    assert slow.wait_s[0] - fast.wait_s[0] == pytest.approx(90.0)


def test_batch_window_waits_for_stable_demand_up_to_batch_max() -> None:
    # a pod every 5 s (faster than batch_stable_s) keeps demand moving: the first change starts batch_max_s after
    # demand first appeared (first reconcile = debounce_s after the first arrival). 9 GiB fill a 1g.10gb, so the
    # burst rule (which holds pods that would leave much of their instance unused) does not apply
    s = ControllerSettings(batch_stable_s=10.0, batch_max_s=40.0)
    jobs = [Job(f"p{i}", 9 * GIB, arrival=5.0 * i, duration=1000.0) for i in range(20)]
    res = simulate(jobs, [1], H100, Controller(controller=s), reconfig_s=30.0)
    first = min(start for _, start, _ in res.window_log)
    assert first == pytest.approx(s.debounce_s + s.batch_max_s, abs=0.1)
    quick = ControllerSettings(batch_stable_s=10.0, batch_max_s=200.0)
    one = simulate(jobs[:1], [1], H100, Controller(controller=quick), reconfig_s=30.0)
    assert one.window_log[0][1] == pytest.approx(quick.debounce_s + quick.batch_stable_s, abs=0.1)


def test_max_concurrent_nodes_serialises_node_changes() -> None:
    jobs = [Job("a", 70 * GIB, arrival=0.0, duration=1000.0), Job("b", 70 * GIB, arrival=0.0, duration=1000.0)]
    serial = simulate(jobs, [1, 1], H100, _ctl(max_concurrent_nodes=1), reconfig_s=50.0)
    (_, s1, e1), (_, s2, _) = sorted(serial.window_log, key=lambda w: w[1])
    assert s2 >= e1  # the second node waits for the first to finish
    both = simulate(jobs, [1, 1], H100, _ctl(max_concurrent_nodes=2), reconfig_s=50.0)
    assert [w[1] for w in both.window_log] == [s1, s1]


def test_minimum_dwell_holds_a_node_after_its_change() -> None:
    # a small pod cuts the GPU; after it leaves, a 70 GiB pod needs a re-cut: dwell decides when
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=50.0), Job("b", 70 * GIB, arrival=200.0, duration=50.0)]
    held = simulate(jobs, [1], H100, _ctl(min_dwell_s=900.0, cooldown_s=0.0), reconfig_s=10.0)
    (_, _, e1), (_, s2, _) = held.window_log
    assert s2 >= e1 + 900.0
    free = simulate(jobs, [1], H100, _ctl(min_dwell_s=0.0, cooldown_s=0.0), reconfig_s=10.0)
    assert free.window_log[1][1] < e1 + 900.0
    assert free.wait_s[1] < held.wait_s[1]


def test_snapshot_has_running_pods_with_node_gpu_and_creation_time() -> None:
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=1e6), Job("b", 30 * GIB, arrival=3661.5, duration=1e6)]
    cl = Cluster([2], H100, TWO_3G)
    sim = Sim(jobs, cl, ReconfigTime(), np.random.default_rng(0), packing=False)
    sim.pending = [0, 1]
    sim.start(Placement(0, [(1, "3g.40gb")]))
    snap = snapshot(sim, "migctl.io/reconfiguring")
    running = [p for p in snap.pods if p.node]
    assert [(p.key, p.node, p.gpu_index, p.phase) for p in running] == [("sim/j0000000", "n00000", 1, "Running")]
    assert running[0].created == "2026-01-01T00:00:00Z"
    [pending] = snap.pending
    assert pending.created == created(3661.5) == "2026-01-01T01:01:01Z"
    assert snap.nodes[0].gpu_pods == (("sim/j0000000", 0, 1),)
    assert dict(snap.nodes[0].gpus[1].used or {}) == {"3g.40gb": 1}


def _as_object(pod: Pod) -> dict[str, object]:
    """The Kubernetes object a live pod with this request would be (migctl.io/vram request, or full MIG
    instances for a whole-GPU pod; the webhook's need annotation; the fallback's GPU index annotation)."""
    (d,) = pod.gpu
    resource = "migctl.io/vram" if d.kind == "vram" else f"nvidia.com/mig-{d.profile}"
    amount = f"{d.vram_mib}Mi" if d.kind == "vram" else str(d.count)
    annotations = {"migctl.io/vram": f"{pod.need_mib}Mi"}
    if pod.gpu_index is not None:
        annotations["migctl.io/gpu-index"] = str(pod.gpu_index)
    status: dict[str, object] = {"phase": pod.phase}
    if pod.unschedulable:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    spec: dict[str, object] = {
        "priority": pod.priority,
        "containers": [{"name": "main", "resources": {"limits": {resource: amount}, "requests": {resource: amount}}}],
    }
    if pod.node:
        spec["nodeName"] = pod.node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "creationTimestamp": pod.created,
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }


def test_the_simulators_pods_are_what_the_adapter_reads_from_the_same_live_pods() -> None:
    jobs = [
        Job("small", 5 * GIB, arrival=0.0, duration=1e6, priority=5),
        Job("whole", H100.full_profile.memory_mib, 2, True, arrival=12.75, duration=1e6),
        Job("waits", 30 * GIB, arrival=86_400.2, duration=1e6),
    ]
    cl = Cluster([2, 2], H100, (("7g.80gb", 1),))
    sim = Sim(jobs, cl, ReconfigTime(), np.random.default_rng(0), packing=False)
    sim.pending = [0, 1, 2]
    sim.start(Placement(0, [(1, "7g.80gb")]))
    sim.start(Placement(1, [(2, "7g.80gb"), (3, "7g.80gb")]))
    snap = snapshot(sim, PlannerSettings().reconfigure_taint)
    assert len(snap.pods) == 3
    for pod in snap.pods:
        assert pod_from_object(_as_object(pod), PlannerSettings()) == pod


def test_oracle_start_begins_from_the_static_oracles_layouts_without_a_window() -> None:
    # `migctl-oracle-start` (an analysis variant) is migctl with its cold start solved by an oracle: GPUs start
    # with static-best-mix's layouts, so pods that those layouts serve start at once, where plain migctl first
    # pays a node-wide window to cut its idle GPUs.
    jobs = [Job(f"j{i}", 9 * GIB, arrival=float(i), duration=500.0) for i in range(6)]
    timing = ReconfigTime(100.0, 0.0)
    cold = simulate(jobs, [2], H100, "migctl", reconfig=timing)
    warm = simulate(jobs, [2], H100, "migctl-oracle-start", reconfig=timing)
    assert min(cold.wait_s) >= 100.0 and cold.windows >= 1
    assert warm.wait_s == [0.0] * len(jobs) and warm.windows == 0
