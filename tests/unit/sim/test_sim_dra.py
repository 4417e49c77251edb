"""The simulator's DRA policies (docs/simulation.md, "DRA clusters"): NVIDIA's DynamicMIG placed by migctl's own
first-fit predictor, migctl's fences steering it through the live reconcile step, and the static-MIG DRA path's
window, which fences only the GPUs a change re-cuts. kube-scheduler's allocator and NVIDIA's driver are simulated
at their interface only: the pool as the driver publishes it (`core/dra/pools.py`), first fit over it."""

from __future__ import annotations

import numpy as np
import pytest

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import Placement as Spot
from migctl.core.model.settings import PlannerSettings
from migctl.sim.controller import InPlaceController
from migctl.sim.dra import DraTime
from migctl.sim.mig import Policy, Sim
from migctl.sim.names import ALL_POLICIES, DEFAULT_POLICIES, DRA_POLICIES
from migctl.sim.policies import REGISTRY, make_policy
from migctl.sim.policies.dra import DraController, DraStaticController, DynamicMig
from migctl.sim.run import simulate
from migctl.sim.state import Cluster, Placement
from migctl.sim.timing import InPlaceTime, ReconfigTime
from migctl.sim.workloads import Job

A100 = load_catalog().model("a100-40gb")
GIB = 1024
ALL_1G = (("1g.5gb", 7),)


def _names(cl: Cluster, job: int) -> list[tuple[int, str, int]]:
    """(GPU, profile, start) of the partitions `job` holds."""
    return sorted(
        (gid, s.profile, s.start) for gid, g in enumerate(cl.gpus) for s, j in (g.spots or {}).items() if j == job
    )


def test_first_fit_strands_a_7g_after_a_1g_burst_on_a100() -> None:
    # one node, two A100-40GB, DynamicMIG: a burst of eight 1g pods; seven leave at t = 100 and one stays on GPU 1.
    # At t = 200 three 1g pods and a 7g arrive together: first fit walks GPU 0 first and puts the 1g pods at its
    # slices 0-2 (gpu-0-mig-1g5gb-19-0, ...), so neither GPU can make the 7g until those three leave
    burst = [Job(f"b{i}", 3 * GIB, arrival=0.0, duration=100.0 if i < 7 else 10_000.0) for i in range(8)]
    late = [Job(f"s{i}", 3 * GIB, arrival=200.0, duration=5_000.0) for i in range(3)]
    big = Job("big", 39 * GIB, arrival=200.0, duration=100.0)
    res = simulate([*burst, *late, big], [2], A100, DynamicMig())
    assert res.placed == 12
    assert res.wait_s[11] >= 5_000.0  # the 7g waited for the 1g pods on GPU 0 to leave
    assert all(w <= A100_CREATE_S for w in res.wait_s[8:11])  # the 1g pods started at once


A100_CREATE_S = 2.0  # Sim.create_s: NVML makes the partition at NodePrepareResources


def _burst_state(policy: Policy) -> tuple[Sim, Cluster]:
    """The moment of the test above as one packing round: a 1g pod runs on GPU 1 at slice 0, GPU 0 is idle, and
    three 1g pods and a 7g are pending (the 7g last)."""
    jobs = [Job("kept", 3 * GIB), *(Job(f"s{i}", 3 * GIB) for i in range(3)), Job("big", 39 * GIB)]
    cl = Cluster([2], A100, track=True)
    sim = Sim(jobs, cl, ReconfigTime(), np.random.default_rng(0), packing=True)
    cl.make(1, Spot("1g.5gb", 0, 1), 0)
    sim._started(Placement(0, [(1, "1g.5gb")]), 0.0)
    sim.pending = [1, 2, 3, 4]
    policy.step(sim)
    return sim, cl


def test_dynamicmig_alone_puts_the_1g_pods_on_the_idle_gpu_and_strands_the_7g() -> None:
    sim, cl = _burst_state(DynamicMig())
    assert [_names(cl, j) for j in (1, 2, 3)] == [[(0, "1g.5gb", 0)], [(0, "1g.5gb", 1)], [(0, "1g.5gb", 2)]]
    assert sim.pending == [4]


def test_migctls_fences_steer_first_fit_so_the_7g_is_placed() -> None:
    # the plan keeps GPU 0 whole for the 7g and the 1g pods beside the one on GPU 1; first fit would put them at
    # GPU 0's slices 0-2, so the step fences GPU 0's 1g devices (DeviceTaintRules) and first fit takes GPU 1
    policy = DraController(PlannerSettings(), ControllerSettings(), DraTime(fence_s=1.0))
    sim, cl = _burst_state(policy)
    assert sim.pending == []
    assert _names(cl, 4) == [(0, "7g.40gb", 0)]
    assert {gid for j in (1, 2, 3) for gid, _, _ in _names(cl, j)} == {1}
    fenced = policy.written["n00000"]
    assert fenced and all(name.startswith("gpu-0-mig-1g5gb-19-") for name in fenced)
    assert len(fenced) <= ControllerSettings().dra_max_fences_per_node


def test_fences_are_honoured_only_after_the_fence_latency() -> None:
    # the same burst on a timeline: the reconcile comes debounce_s after the arrivals, and first fit honours its
    # fences fence_s after that; until then (and here: before any fence, the scheduler being first) the 1g pods
    # take what first fit gives them
    policy = DraController(PlannerSettings(), ControllerSettings(), DraTime(fence_s=7.0))
    burst = [Job(f"b{i}", 3 * GIB, arrival=0.0, duration=100.0 if i < 7 else 10_000.0) for i in range(8)]
    res = simulate([*burst, Job("s", 3 * GIB, arrival=200.0, duration=50.0)], [2], A100, policy)
    assert res.placed == 9
    assert policy.due == []  # every write was honoured by the end
    with pytest.raises(ValueError, match="non-negative"):
        DraTime(fence_s=-1.0)


def _static(restart_s: float, gate: bool = False) -> DraStaticController:
    return DraStaticController(
        PlannerSettings(preshape=False),
        ControllerSettings(queue_gate=gate),
        InPlaceTime(op_min_s=0.1, op_max_s=0.1),
        DraTime(fence_s=1.0, restart_s=restart_s, restart_sigma=0.0),
    )


@pytest.mark.parametrize("gate", [False, True])
@pytest.mark.parametrize("restart_s", [5.0, 30.0])
def test_the_static_dra_window_fences_only_the_changed_gpu_until_the_plugin_restarts(
    restart_s: float, gate: bool
) -> None:
    # one node, two GPUs cut all-1g. A (15 GiB) needs a 3g.20gb, cut on one GPU in place. B (3 GiB) arrives while
    # that GPU is fenced and the plugin not yet restarting: it lands on the other GPU at once (with the queue gate:
    # at the next reconcile, claimed there, never on the fenced GPU's free devices). C arrives during the plugin's
    # restart: no new pod of the node starts until the plugin is back (kubelet prepares claims through it)
    a = Job("a", 15 * GIB, arrival=0.0, duration=5_000.0)
    alone = simulate([a], [2], A100, _static(restart_s, gate), initial=ALL_1G)
    [(_, start, end)] = alone.window_log
    fenced = end - start - restart_s
    assert fenced >= 1.0 + ControllerSettings().dra_fence_settle_s  # fence latency + settle + NVML operations
    b = Job("b", 3 * GIB, arrival=start + 1.0, duration=5_000.0)
    c = Job("c", 3 * GIB, arrival=start + fenced + 1.0, duration=5_000.0)
    both = simulate([a, b, c], [2], A100, _static(restart_s, gate), initial=ALL_1G)
    assert both.window_log == alone.window_log
    assert both.placed == 3
    lift = ControllerSettings().debounce_s if gate else 0.0  # at most until the reconcile that releases it
    assert both.wait_s[1] <= lift < fenced - 1.0  # B: the other GPU kept serving
    assert end - c.arrival <= both.wait_s[2] <= end - c.arrival + lift  # C: held by the restart
    assert both.paused_s == pytest.approx(restart_s)  # the node as a whole was held for the restart only


def test_the_in_place_path_holds_the_whole_node_where_the_dra_path_fences_one_gpu() -> None:
    # the contrast: the device-plugin in-place path taints the node, so B waits for the window's end
    a = Job("a", 15 * GIB, arrival=0.0, duration=5_000.0)

    def inplace() -> InPlaceController:
        timing = InPlaceTime(5.0, 0.0, op_min_s=0.1, op_max_s=0.1)
        return InPlaceController(PlannerSettings(preshape=False), ControllerSettings(queue_gate=False), timing)

    [(_, start, end)] = simulate([a], [2], A100, inplace(), initial=ALL_1G).window_log
    b = Job("b", 3 * GIB, arrival=start + 1.0, duration=5_000.0)
    res = simulate([a, b], [2], A100, inplace(), initial=ALL_1G)
    assert res.wait_s[1] == pytest.approx(end - b.arrival)


def test_the_registry_lists_the_dra_policies() -> None:
    assert DRA_POLICIES == ("dra-dynamicmig", "migctl-dra", "migctl-dra-static")
    assert set(DRA_POLICIES) <= set(ALL_POLICIES) and not set(DRA_POLICIES) & set(DEFAULT_POLICIES)
    kinds = {"dra-dynamicmig": DynamicMig, "migctl-dra": DraController, "migctl-dra-static": DraStaticController}
    for name, kind in kinds.items():
        assert name in REGISTRY
        cl, pol = make_policy(name, [], [2], A100, dra=DraTime(restart_s=30.0))
        assert type(pol) is kind and pol.name == name
        assert all(g.spots == {} for g in cl.gpus)  # MIG on, no partition, placements tracked
        if isinstance(pol, DraStaticController | DraController):
            assert (pol.dra if isinstance(pol, DraStaticController) else pol.timing).restart_s == 30.0
