"""The queue gate in the simulator (`migctl/sim/gate.py`, the rule of `migctl/core/queue_gate.py`): a gated pod binds
only when a reconcile releases it, a pod a change is for binds when the change ends, and pods of several GPUs
are released too. kube-scheduler and the device plugin are simulated at their interface only: which pods are
bound, where, and when."""

from __future__ import annotations

import pytest

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.settings import PlannerSettings
from migctl.reconcile.step import Outcome
from migctl.sim.controller import Controller, InPlaceController, snapshot
from migctl.sim.mig import Sim
from migctl.sim.run import simulate
from migctl.sim.timing import InPlaceTime
from migctl.sim.workloads import Job

A100 = load_catalog().model("a100-40gb")
GIB = 1024
ALL_1G = (("1g.5gb", 7),)


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("gate", [False, True])
def test_a_gated_pod_binds_at_the_reconcile_its_arrival_triggers(in_place: bool, gate: bool) -> None:
    # a 1g.5gb is free when the pod arrives: ungated, kube-scheduler binds it at once; gated, the reconcile its
    # arrival triggers (debounce_s later) releases it onto that instance
    settings = ControllerSettings(queue_gate=gate, debounce_s=3.0)
    policy = InPlaceController(controller=settings) if in_place else Controller(controller=settings)
    res = simulate([Job("a", 3 * GIB, arrival=10.0, duration=100.0)], [1], A100, policy, initial=ALL_1G)
    assert res.placed == 1
    assert res.wait_s[0] == pytest.approx(3.0 if gate else 0.0)


def test_the_in_place_policy_runs_gated_unless_the_config_says_otherwise() -> None:
    assert InPlaceController().gate and not Controller().gate
    assert not InPlaceController(controller=ControllerSettings(queue_gate=False)).gate
    assert Controller(controller=ControllerSettings(queue_gate=True)).gate


@pytest.mark.parametrize("gate", [False, True])
def test_a_pod_a_change_is_for_binds_when_the_change_ends(gate: bool) -> None:
    # A (15 GiB) needs a 3g.20gb cut in place: released when the change starts, it binds when the window closes
    # (the node's taint kept it off until then), as without the gate
    def inplace() -> InPlaceController:
        return InPlaceController(PlannerSettings(preshape=False), ControllerSettings(queue_gate=gate),
                                 timing=InPlaceTime(5.0, 0.0))  # fmt: skip

    res = simulate([Job("a", 15 * GIB, arrival=0.0, duration=5000.0)], [1], A100, inplace(), initial=ALL_1G)
    [(_, _, end)] = res.window_log
    assert res.placed == 1 and res.wait_s[0] == pytest.approx(end)


def test_a_gated_pod_of_several_gpus_is_released_and_bound() -> None:
    # whole-GPU pods ask for the full profile by name: gated like the rest, released onto two free 7g.40gb
    jobs = [Job("pair", 30 * GIB, num_gpu=2, whole=True, arrival=0.0, duration=100.0)]
    res = simulate(jobs, [2], A100, InPlaceController(), initial=(("7g.40gb", 1),))
    assert res.placed == 1 and res.wait_s[0] == pytest.approx(ControllerSettings().debounce_s)


@pytest.mark.parametrize("stopped", [{"dry_run": True}, {"paused": True}])
def test_a_dry_run_or_paused_controller_holds_nobody(stopped: dict[str, bool]) -> None:
    # every 1g.5gb is taken until the busy pods leave; the pod arriving at 10 is released at the reconcile its
    # arrival triggers (not kept for the plan), so it binds the moment an instance frees, not a reconcile later
    busy = [Job(f"b{i}", 3 * GIB, arrival=0.0, duration=100.0) for i in range(7)]
    late = Job("late", 3 * GIB, arrival=10.0, duration=100.0)
    policy = InPlaceController(controller=ControllerSettings(queue_gate=True, **stopped))  # type: ignore[arg-type]
    res = simulate([*busy, late], [1], A100, policy, initial=ALL_1G)
    freed = res.wait_s[0] + 100.0  # the busy pods started a reconcile after arriving at 0, and ran 100 s
    assert res.placed == 8 and res.wait_s[7] == pytest.approx(freed - late.arrival)


class _Checked(InPlaceController):
    """The in-place controller, checking at each reconcile with claims that the snapshot the plan is made on
    (`queue_claims.claimed`) is the one the simulator reads once the claimed pods are bound."""

    checked = 0

    def _bind_claims(self, sim: Sim, out: Outcome) -> None:
        super()._bind_claims(sim, out)
        if out.claims.claims:
            fresh = snapshot(sim, self.planner.reconfigure_taint, True, self.lifted)
            assert _state(out.whole) == _state(fresh)
            _Checked.checked += len(out.claims.claims)


def _state(snap: Snapshot) -> tuple[object, ...]:
    pods = {p.key: (p.node, p.phase, p.gpu_index, p.gated, p.pending) for p in snap.pods}
    nodes = {
        n.name: (
            {p: c for p, c in n.mig_free.items() if c},
            [(g.config, {p: c for p, c in (g.used or {}).items() if c}, g.instances) for g in n.gpus],
            sorted(n.gpu_pods, key=str),
        )
        for n in snap.nodes
    }
    return pods, nodes


def test_the_plan_sees_the_claimed_pods_as_the_simulator_binds_them() -> None:
    # small and large pods coming and going on two A100s: the queue claims free instances before each plan, and
    # the simulator binds them where its device plugin stand-in does; the two views must agree
    sizes = [3, 7, 15, 3, 3, 7, 15, 3, 7, 3, 15, 3]
    jobs = [Job(f"j{i}", s * GIB, arrival=20.0 * i, duration=90.0 + 40 * (i % 3)) for i, s in enumerate(sizes * 3)]
    _Checked.checked = 0
    res = simulate(jobs, [2], A100, _Checked(timing=InPlaceTime(5.0, 0.0)), initial=ALL_1G)
    assert res.placed == len(jobs)
    assert _Checked.checked >= 5
