"""The queue gate's rule (`migctl.core.queue_gate`): which gated pods the plan releases, pinned where, and which
it keeps. Plans come from the real planner on small snapshots."""

from __future__ import annotations

import dataclasses

from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan
from migctl.core.queue_gate import LEFTOVER, OVERDUE, SERVED, STARTED, gated, lifts, release_all
from tests.unit.builders import mig, node

NOW = 1_800_000_000.0  # seconds since the epoch: 2027-01-15T08:00:00Z
RECENT = "2027-01-15T07:59:00Z"  # a minute before NOW
HOLD = 900.0
ALL_1G = {"1g.5gb": 7}


def _gated(name: str, profile: str, created: str = RECENT, **kw: object) -> Pod:
    return dataclasses.replace(mig(name, profile, **kw), gated=True, created=created)  # type: ignore[arg-type]


def test_a_pod_the_plan_serves_with_a_free_instance_is_released_and_pinned_to_the_planned_node() -> None:
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G]),), (_gated("a", "1g.5gb"),))
    assert [(x.pod, x.node, x.reason) for x in lifts(snap, plan(snap), (), NOW, HOLD)] == [("ns/a", "n1", SERVED)]


def test_a_pod_served_by_a_change_is_released_only_when_its_nodes_change_starts() -> None:
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G]),), (_gated("a", "3g.20gb"),))
    result = plan(snap)
    assert any(n.changed for n in result.nodes)
    assert lifts(snap, result, (), NOW, HOLD) == []  # the batching window or a guard rail holds the change
    [lift] = lifts(snap, result, ("n1",), NOW, HOLD)
    assert (lift.node, lift.reason) == ("n1", STARTED)


def test_a_pod_left_out_of_the_plan_takes_an_instance_the_plan_leaves_unused_in_queue_order() -> None:
    # the burst rule held b and c out of planning: what the plan does not hand out serves them as kube-scheduler
    # would, the older first; only one 1g.5gb is left after a's
    n1 = node("n1", "a100-40gb", [ALL_1G], [{"1g.5gb": 5}])
    a = _gated("a", "1g.5gb", created="2027-01-15T07:58:00Z")
    b = _gated("b", "1g.5gb", created="2027-01-15T07:58:30Z")
    c = _gated("c", "1g.5gb", created="2027-01-15T07:58:10Z")
    held_out = Snapshot((n1,), (a,))
    got = lifts(Snapshot((n1,), (a, b, c)), plan(held_out), (), NOW, HOLD)
    assert [(x.pod, x.node, x.reason) for x in got] == [("ns/a", "n1", SERVED), ("ns/c", None, LEFTOVER)]


def test_instances_of_a_gpu_the_plan_re_cuts_are_not_left_over() -> None:
    # a needs a 3g.20gb: the plan re-cuts the GPU's free 1g.5gb instances; b, held out of planning, wants one of
    # them and stays gated (the change would lose its instances to b)
    n1 = node("n1", "a100-40gb", [ALL_1G])
    a, b = _gated("a", "3g.20gb"), _gated("b", "1g.5gb")
    result = plan(Snapshot((n1,), (a,)))
    assert lifts(Snapshot((n1,), (a, b)), result, (), NOW, HOLD) == []


def test_a_left_over_instance_serves_only_a_pod_the_node_admits() -> None:
    n1 = node("n1", "a100-40gb", [ALL_1G], labels={"pool": "a"})
    b = dataclasses.replace(_gated("b", "1g.5gb"), node_selector=(("pool", "b"),))
    assert lifts(Snapshot((n1,), (b,)), plan(Snapshot((n1,), ())), (), NOW, HOLD) == []


def test_a_pod_held_past_the_bound_is_released_without_a_pin_whatever_the_plan_says() -> None:
    snap_pods = (_gated("old", "3g.20gb", created="2027-01-15T07:44:00Z"), _gated("bad", "3g.20gb", created="?"))
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G], [{"1g.5gb": 7}]),), snap_pods)
    result = plan(snap)
    assert not result.assignments  # nothing serves a 3g.20gb on a full GPU
    got = lifts(snap, result, (), NOW, HOLD)
    assert [(x.pod, x.node, x.reason) for x in got] == [("ns/old", None, OVERDUE), ("ns/bad", None, OVERDUE)]
    assert [x.pod for x in lifts(snap, result, (), NOW, 1e6)] == ["ns/bad"]  # an unreadable creation: released


def test_only_pending_pods_that_carry_the_gate_are_considered_and_in_kube_schedulers_order() -> None:
    running = dataclasses.replace(_gated("r", "1g.5gb"), node="n1", phase="Running")
    free = mig("f", "1g.5gb")
    low = _gated("low", "1g.5gb", created="2027-01-15T07:00:00Z")
    high = _gated("high", "1g.5gb", priority=10)
    assert [p.name for p in gated((running, free, low, high))] == ["high", "low"]
    assert [x.pod for x in release_all((running, free, low, high), "paused")] == ["ns/high", "ns/low"]


def test_a_plan_with_the_forecast_off_releases_the_same_pods() -> None:
    # the rule reads the plan's assignments and changes, not how the planner chose them
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G]),), (_gated("a", "1g.5gb"), _gated("b", "1g.5gb")))
    off = plan(snap, PlannerSettings(preshape=False))
    assert [x.pod for x in lifts(snap, off, (), NOW, HOLD)] == ["ns/a", "ns/b"]
