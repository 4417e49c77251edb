"""The queue gate's rule (`migctl.core.queue_gate`): which gated pods are released, pinned where, and which stay.
Plans come from the real planner on small snapshots."""

from __future__ import annotations

import dataclasses

from migctl.core.model.cluster import Pod, Resources, Snapshot
from migctl.core.planner import plan
from migctl.core.queue_gate import FREE, OVERDUE, STARTED, gated, lifts, release_all
from tests.unit.builders import mig, node

NOW = 1_800_000_000.0  # seconds since the epoch: 2027-01-15T08:00:00Z
RECENT = "2027-01-15T07:59:00Z"  # a minute before NOW
HOLD = 900.0
ALL_1G = {"1g.5gb": 7}


def _gated(name: str, profile: str, created: str = RECENT, **kw: object) -> Pod:
    return dataclasses.replace(mig(name, profile, **kw), gated=True, created=created)  # type: ignore[arg-type]


def _got(snap: Snapshot, starting: tuple[str, ...] = (), hold: float = HOLD) -> list[tuple[str, str | None, str]]:
    return [(x.pod, x.node, x.why) for x in lifts(snap, plan(snap), starting, NOW, hold)]


def test_a_pod_whose_profile_is_free_is_released_and_pinned_to_that_node() -> None:
    full = node("n1", "a100-40gb", [ALL_1G], [ALL_1G])
    snap = Snapshot((full, node("n2", "a100-40gb", [ALL_1G])), (_gated("a", "1g.5gb"),))
    assert _got(snap) == [("ns/a", "n2", FREE)]


def test_a_pod_served_by_a_change_is_released_only_when_its_nodes_change_starts() -> None:
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G]),), (_gated("a", "3g.20gb"),))
    assert any(n.changed for n in plan(snap).nodes)
    assert _got(snap) == []  # the batching window or a guard rail holds the change: nothing serves it yet
    assert _got(snap, ("n1",)) == [("ns/a", "n1", STARTED)]


def test_free_instances_go_in_kube_schedulers_queue_order_and_ungated_pods_take_theirs_first() -> None:
    # two 1g.5gb free: the ungated pod (already released, or never gated) is ahead in the queue and takes one;
    # of the gated, priority first, then the older
    n1 = node("n1", "a100-40gb", [ALL_1G], [{"1g.5gb": 5}])
    ahead = dataclasses.replace(mig("ahead", "1g.5gb"), created="2027-01-15T07:00:00Z")
    old = _gated("old", "1g.5gb", created="2027-01-15T07:50:00Z")
    high = _gated("high", "1g.5gb", priority=10)
    young = _gated("young", "1g.5gb")
    got = lifts(Snapshot((n1,), (young, old, ahead, high)), plan(Snapshot((n1,), ())), (), NOW, HOLD)
    assert [x.pod for x in got] == ["ns/high"]  # high (priority 10) before ahead (priority 0): old gets none


def test_the_free_instances_of_a_gpu_the_plan_re_cuts_are_kept_for_the_change() -> None:
    # a needs a 3g.20gb: the plan re-cuts an idle GPU's free 1g.5gb instances. b, younger, asks for a 1g.5gb: it
    # does not take one of those (the change would lose them), but the other GPU's
    one = node("n1", "a100-40gb", [ALL_1G])
    a, b = _gated("a", "3g.20gb", created="2027-01-15T07:58:00Z"), _gated("b", "1g.5gb")
    assert _got(Snapshot((one,), (a, b))) == []
    two = node("n1", "a100-40gb", [ALL_1G, ALL_1G], [{}, {"1g.5gb": 1}])
    result = plan(Snapshot((two,), (a,)))
    [gpu] = [g for n in result.nodes for g in n.gpus if g.changed]
    assert gpu.index == 0  # the idle GPU is re-cut; GPU 1 keeps six free 1g.5gb
    assert [(x.pod, x.why) for x in lifts(Snapshot((two,), (a, b)), result, (), NOW, HOLD)] == [("ns/b", FREE)]


def test_a_node_whose_change_starts_gives_the_queue_nothing() -> None:
    # the node is being tainted: even a GPU the change leaves alone is not handed out now
    two = node("n1", "a100-40gb", [ALL_1G, ALL_1G], [{}, {"1g.5gb": 1}])
    a, b = _gated("a", "3g.20gb", created="2027-01-15T07:58:00Z"), _gated("b", "1g.5gb")
    result = plan(Snapshot((two,), (a, b)))
    got = lifts(Snapshot((two,), (a, b)), result, ("n1",), NOW, HOLD)
    assert [(x.pod, x.why) for x in got] == [("ns/a", STARTED)]


def test_a_free_instance_serves_only_a_pod_the_node_admits_and_all_of_its_demand_on_one_node() -> None:
    picky = dataclasses.replace(_gated("picky", "1g.5gb"), node_selector=(("pool", "b"),))
    pair = _gated("pair", "1g.5gb", count=2)
    n1 = node("n1", "a100-40gb", [ALL_1G], [{"1g.5gb": 6}], labels={"pool": "a"})
    n2 = node("n2", "a100-40gb", [ALL_1G], [{"1g.5gb": 6}], labels={"pool": "a"})
    assert _got(Snapshot((n1, n2), (picky, pair))) == []  # one free on each node: neither serves two
    n3 = node("n3", "a100-40gb", [ALL_1G], [{"1g.5gb": 5}], labels={"pool": "a"})
    assert _got(Snapshot((n1, n3), (picky, pair))) == [("ns/pair", "n3", FREE)]


def test_a_pod_held_past_the_bound_is_released_without_a_pin_whatever_the_plan_says() -> None:
    pods = (_gated("old", "3g.20gb", created="2027-01-15T07:44:00Z"), _gated("bad", "3g.20gb", created="?"))
    snap = Snapshot((node("n1", "a100-40gb", [ALL_1G], [ALL_1G]),), pods)
    assert not plan(snap).assignments  # nothing serves a 3g.20gb on a full GPU
    assert _got(snap) == [("ns/old", None, OVERDUE), ("ns/bad", None, OVERDUE)]
    assert [p for p, _, _ in _got(snap, hold=1e6)] == ["ns/bad"]  # an unreadable creation: released


def test_only_pending_pods_that_carry_the_gate_are_released_and_in_queue_order() -> None:
    running = dataclasses.replace(_gated("r", "1g.5gb"), node="n1", phase="Running")
    free = mig("f", "1g.5gb")
    low = _gated("low", "1g.5gb", created="2027-01-15T07:00:00Z")
    high = _gated("high", "1g.5gb", priority=10)
    assert [p.name for p in gated((running, free, low, high))] == ["high", "low"]
    assert [x.pod for x in release_all((running, free, low, high))] == ["ns/high", "ns/low"]


def test_a_free_instance_goes_only_to_a_pod_whose_cpu_the_node_has_room_for() -> None:
    # n1 is first and has the free 1g.5gb, but not the 8 CPUs "heavy" asks for: kube-scheduler would never bind it
    # there, so it is pinned to n2; a small pod behind it takes n1's
    n1 = node("n1", "a100-40gb", [ALL_1G], [{"1g.5gb": 6}], cpu_m=4_000)
    n2 = node("n2", "a100-40gb", [ALL_1G], [{"1g.5gb": 6}])
    heavy = dataclasses.replace(_gated("heavy", "1g.5gb", created="2027-01-15T07:58:00Z"),
                                requests=Resources(cpu_m=8_000, pods=1))  # fmt: skip
    snap = Snapshot((n1, n2), (heavy, _gated("small", "1g.5gb")))
    assert _got(snap) == [("ns/heavy", "n2", FREE), ("ns/small", "n1", FREE)]
