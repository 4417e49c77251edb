"""The simulator runs the in-place path as the product does: the agent's NVML operations and the re-advertise
window hold the node (no new pod lands there meanwhile), and instances in use never move. The agent, NVML and
the device plugin are simulated at their interface only: instances where they sit (`GpuState.spots`), a drawn
time per operation and a drawn re-advertise window (`InPlaceTime`)."""

from __future__ import annotations

import numpy as np
import pytest

from migctl.config import ControllerSettings
from migctl.core.forecast.estimate import BURST_QUIET_S
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.settings import PlannerSettings
from migctl.sim.controller import InPlaceController
from migctl.sim.run import simulate
from migctl.sim.timing import InPlaceTime
from migctl.sim.workloads import Job

A100 = load_catalog().model("a100-40gb")
GIB = 1024
ALL_1G = (("1g.5gb", 7),)


def _inplace(readvertise_s: float) -> InPlaceController:
    return InPlaceController(controller=ControllerSettings(), timing=InPlaceTime(readvertise_s, 0.0))


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("readvertise_s", [5.0, 30.0])
def test_a_pod_arriving_during_the_re_advertise_window_waits_for_it(readvertise_s: float, gate: bool) -> None:
    # one node, two GPUs cut all-1g. A (15 GiB) needs a 3g.20gb cut in place on one of them; B (3 GiB) arrives
    # while the node is held and asks for a 1g.5gb, which the other GPU has free before, during and after the
    # change: B lands only when the window closes (no pre-shaping, so the other GPU stays as it is). With the
    # queue gate, B is released by the reconcile the window's end triggers, debounce_s later
    settings = ControllerSettings(queue_gate=gate)

    def inplace() -> InPlaceController:
        return InPlaceController(PlannerSettings(preshape=False), settings, timing=InPlaceTime(readvertise_s, 0.0))

    a = Job("a", 15 * GIB, arrival=0.0, duration=5000.0)
    alone = simulate([a], [2], A100, inplace(), initial=ALL_1G)
    [(_, start, end)] = alone.window_log
    assert end - start >= readvertise_s  # NVML operations, then the re-advertise window
    b = Job("b", 3 * GIB, arrival=start + 1.0, duration=5000.0)
    both = simulate([a, b], [2], A100, inplace(), initial=ALL_1G)
    assert both.window_log == alone.window_log  # B needed no change of its own
    assert both.placed == 2
    lift = settings.debounce_s if gate else 0.0
    assert both.wait_s[1] == pytest.approx(end - b.arrival + lift)  # B started when the window closed, not on arrival


def test_in_place_timing_counts_two_operations_per_instance_and_the_window() -> None:
    t = InPlaceTime(5.0, 0.0, op_min_s=0.1, op_max_s=0.1)
    assert t.draw(0, np.random.default_rng(0)) == pytest.approx(5.0)
    assert t.draw(3, np.random.default_rng(0)) == pytest.approx(5.0 + 6 * 0.1)  # GI + CI per instance
    with pytest.raises(ValueError, match="op_min_s <= op_max_s"):
        InPlaceTime(op_min_s=0.3, op_max_s=0.1)


def test_a_busy_gpu_is_re_cut_in_place_and_its_pod_keeps_its_instance() -> None:
    # A holds a 1g.5gb; B needs a 3g.20gb. The stock path cannot touch the busy GPU; in place, B is served
    # beside A, whose instance stays where it was
    jobs = [Job("a", 3 * GIB, arrival=0.0, duration=5000.0), Job("b", 15 * GIB, arrival=100.0, duration=5000.0)]
    res = simulate(jobs, [1], A100, "migctl-inplace", seed=1)
    assert res.placed == 2
    assert res.wait_s[1] < 60.0  # no relabel: operations and a 5 s median window
    stock = simulate(jobs, [1], A100, "migctl", seed=1)
    assert stock.wait_s[1] > 4000.0  # the stock path re-cuts the GPU only once A has left it


@pytest.mark.parametrize("policy", ["migctl", "migctl-inplace"])
def test_a_bursts_wasteful_pod_is_planned_once_the_burst_has_landed(policy: str) -> None:
    # 10 small pods 2 s apart and, once 8 of them have shown the burst, one of 21 GiB, which only a 7g.40gb
    # serves (47% of it unused): the small ones are served as they come, the large one once the burst has landed
    # (core/forecast/estimate.burst_hold). Relabels take 5 s here, so both paths serve the small ones within the burst
    jobs = [Job(f"s{i}", 4 * GIB, arrival=2.0 * i, duration=5000.0) for i in range(10)]
    jobs.append(Job("big", 21 * GIB, arrival=15.0, duration=5000.0))
    res = simulate(jobs, [2, 2], A100, policy, seed=3, reconfig_s=5.0)
    assert res.placed == 11
    big = sorted(jobs, key=lambda j: j.arrival).index(jobs[-1])
    assert res.wait_s[big] >= 18.0 + BURST_QUIET_S - 15.0
    assert min(w for i, w in enumerate(res.wait_s) if i != big) < 18.0 + BURST_QUIET_S - 15.0


def test_a_pod_binds_only_to_its_own_profile_and_a_static_layout_serves_it_with_no_other() -> None:
    # a 3 GiB pod asks for its smallest profile, 1g.5gb (the webhook's rewrite, or its user's choice); the only
    # free instances are 3g.20gb: kube-scheduler does not bind it there, nor does a static layout's policy
    from migctl.sim.mig import Sim
    from migctl.sim.scheduler import bind_free
    from migctl.sim.state import Cluster
    from migctl.sim.timing import ReconfigTime

    cl = Cluster([1], A100, (("3g.20gb", 2),))
    sim = Sim([Job("p", 3 * GIB, duration=100.0)], cl, ReconfigTime(), np.random.default_rng(0), packing=False)
    sim.pending.append(0)
    bind_free(sim)
    assert 0 not in sim.running
    static = simulate([Job("p", 3 * GIB, duration=100.0)], [1], A100, "static-balanced")
    assert static.placed == 1  # static-balanced has a free 1g.5gb
    assert simulate([Job("p", 3 * GIB, duration=100.0)], [1], A100, "first-fit").placed == 1


def test_the_simulator_decides_with_the_controllers_reconcile_and_its_per_path_limits() -> None:
    # three idle nodes each need a change for their pod. migctl-inplace's nodes are on the in-place path, so
    # `controller/reconcile.decide` limits them by in_place_max_concurrent_nodes, not by the stock
    # max_concurrent_nodes, and their batching window is the in-place one
    jobs = [Job(f"p{i}", 35 * GIB, arrival=0.0, duration=5000.0) for i in range(3)]  # a 7g.40gb each

    def starts(**kw: float) -> list[float]:
        s = ControllerSettings.model_validate({"in_place_batch_stable_s": 0, "in_place_batch_max_s": 0, **kw})
        res = simulate(jobs, [1, 1, 1], A100, InPlaceController(controller=s), initial=ALL_1G)
        return sorted(start for _, start, _ in res.window_log)

    one_at_a_time = starts(max_concurrent_nodes=3, in_place_max_concurrent_nodes=1)
    assert len(one_at_a_time) == 3 and len(set(one_at_a_time)) == 3
    together = starts(max_concurrent_nodes=1, in_place_max_concurrent_nodes=3)
    assert len(together) == 3 and len(set(together)) == 1
    windowed = starts(in_place_max_concurrent_nodes=3, in_place_batch_stable_s=40, in_place_batch_max_s=60)
    assert windowed[0] >= together[0] + 40 - 0.1  # the in-place batching window, not the stock 10 s
