"""The queue's claims before the plan (`migctl.core.queue_claims`): who takes which free instance as it is, which
older pod holds a GPU for its re-cut, the snapshot the plan is made on, and the changes that wait for the claimed
pods. Plans come from the real planner; the in-place nodes carry the agent's inventory (`Gpu.instances`) at its
real interface."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

from migctl.core.model.cluster import Gpu, Instance, Node, Pod, Resources, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.planner import plan
from migctl.core.queue_claims import Claim, claim, claimed, collisions
from tests.unit.builders import CATALOG, mig, node

OLD, YOUNG = "2027-01-15T07:00:00Z", "2027-01-15T07:59:00Z"


def gated(name: str, profile: str, created: str = YOUNG, **kw: object) -> Pod:
    return dataclasses.replace(mig(name, profile, **kw), gated=True, created=created)  # type: ignore[arg-type]


def in_place(name: str, model: str, gpus: Sequence[Sequence[tuple[str, int, bool]]]) -> Node:
    """An in-place node whose GPU i has instances (profile, start, in use), sizes from the catalog."""
    m = CATALOG.model(model)
    layouts, used, built = [], [], []
    for i, instances in enumerate(gpus):
        held = tuple(Instance(p, s, dict(m.profile(p).placements)[s], u) for p, s, u in instances)
        layout, busy = Counter(x.profile for x in held), Counter(x.profile for x in held if x.in_use)
        layouts.append(dict(layout))
        used.append(dict(busy))
        built.append(Gpu(i, GpuConfig.mig(dict(layout)), dict(busy), None, held))
    return dataclasses.replace(node(name, model, layouts, used), gpus=tuple(built), in_place=True)


def test_free_instances_are_claimed_in_queue_order_on_the_first_gpu_with_one() -> None:
    # two 1g.5gb free on GPU 1: the higher priority first, then the older (gated or not), the youngest gets none
    n1 = node("n1", "a100-40gb", [{"1g.5gb": 7}, {"1g.5gb": 7}], [{"1g.5gb": 7}, {"1g.5gb": 5}])
    ahead = dataclasses.replace(mig("ahead", "1g.5gb"), created=OLD)
    high, young = gated("high", "1g.5gb", priority=10), gated("young", "1g.5gb")
    got = claim(Snapshot((n1,), (young, ahead, high)))
    assert got.claims == (
        Claim("ns/high", "n1", ((1, "1g.5gb"),), True),
        Claim("ns/ahead", "n1", ((1, "1g.5gb"),), False),
    )


def test_a_pod_asking_for_anything_but_mig_profiles_claims_nothing() -> None:
    n1 = node("n1", "a100-40gb", [{"1g.5gb": 7}])
    vram = dataclasses.replace(mig("v", "1g.5gb"), gpu=())
    assert claim(Snapshot((n1,), (vram,))).claims == ()


def test_the_plan_keeps_a_free_instance_an_older_pod_takes_as_it_is() -> None:
    # a free 3g.20gb beside three busy 1g.5gb. Left to the plan (pods placed first), it becomes four 1g.5gb for the
    # younger small pods; claimed, the older 3g.20gb pod gets it and the plan leaves it be
    gpu = [("3g.20gb", 0, False), ("1g.5gb", 4, True), ("1g.5gb", 5, True), ("1g.5gb", 6, True)]
    n1 = in_place("n1", "a100-40gb", [gpu])
    small = [gated(f"s{i}", "1g.5gb") for i in range(4)]
    snap = Snapshot((n1,), (gated("big", "3g.20gb", created=OLD), *small))
    alone = plan(snap)
    assert "3g.20gb" not in dict(alone.nodes[0].gpus[0].target.layout)  # what the claims prevent
    claims = claim(snap)
    assert [(c.pod, c.units) for c in claims.claims] == [("ns/big", ((0, "3g.20gb"),))]
    after = plan(claimed(snap, claims))
    assert dict(after.nodes[0].gpus[0].target.layout).get("3g.20gb") == 1
    assert "ns/big" not in {a.pod for a in after.assignments}  # bound already, not planned again


def test_claimed_pods_are_bound_as_the_device_plugin_would_bind_them() -> None:
    gpu = [("1g.5gb", 0, True), ("1g.5gb", 1, False), ("1g.5gb", 2, False), ("1g.5gb", 3, True)]
    n1 = in_place("n1", "a100-40gb", [gpu])
    snap = Snapshot((n1,), (gated("a", "1g.5gb"),))
    view = claimed(snap, claim(snap))
    (pod,) = view.pods
    assert (pod.node, pod.phase, pod.gpu_index, pod.gated, pod.pending) == ("n1", "Running", 0, False, False)
    (n,) = view.nodes
    assert n.mig_free["1g.5gb"] == 1
    assert n.gpus[0].used == {"1g.5gb": 3}
    assert [(i.start, i.in_use) for i in n.gpus[0].instances or ()] == [(0, True), (1, True), (2, False), (3, True)]
    assert n.gpu_pods[-1] == ("ns/a", 0, 0)
    assert n.used.pods == n1.used.pods + 1


# H100-80GB: 1g.20gb sits at 0, 2, 4 or 6 and spans two memory slices; 1g.10gb spans one
BUSY_BUT_4 = [("1g.10gb", s, s != 4) for s in (0, 1, 2, 3, 4, 6)]  # 1g.10gb at 4 free, slice 5 empty


def test_an_older_pod_whose_re_cut_merges_smaller_free_instances_holds_that_node_for_its_profile() -> None:
    # the free 1g.10gb at 4 and the empty slice 5 make the 1g.20gb the older pod waits for. The younger 1g.10gb pod
    # may not take that instance, nor any 1g.10gb of the same node (the device plugin picks the GPU): it takes n2's
    full_but_0 = [("1g.10gb", s, s != 0) for s in range(7)]  # no room for a 1g.20gb
    n1 = in_place("n1", "h100-80gb", [BUSY_BUT_4, full_but_0])
    n2 = in_place("n2", "h100-80gb", [full_but_0])
    old, young = gated("old", "1g.20gb", created=OLD), gated("young", "1g.10gb")
    snap = Snapshot((n1, n2), (young, old))
    got = claim(snap)
    assert got.holds == (("n1", 0, "ns/old"),)
    assert [(c.pod, c.node) for c in got.claims] == [("ns/young", "n2")]
    # and the plan made on it re-cuts GPU 0 for the older pod
    result = plan(claimed(snap, got))
    assert [(a.pod, a.node, a.gpu) for a in result.assignments] == [("ns/old", "n1", 0)]


def test_a_hold_keeps_from_younger_pods_only_the_profiles_its_re_cut_destroys() -> None:
    # A100-40GB: the older 3g.20gb pod's re-cut at 4 merges the three free 1g.5gb; the free 1g.10gb at 0 stays. A
    # younger 1g.10gb pod takes it; a younger 1g.5gb pod takes n2's, not one of those the re-cut needs
    gpu = [("1g.10gb", 0, False), ("2g.10gb", 2, True), ("1g.5gb", 4, False), ("1g.5gb", 5, False),
           ("1g.5gb", 6, False)]  # fmt: skip
    n1 = in_place("n1", "a100-40gb", [gpu])
    n2 = in_place("n2", "a100-40gb", [[("1g.5gb", s, s != 0) for s in range(7)]])
    pods = (gated("old", "3g.20gb", created=OLD), gated("ten", "1g.10gb"), gated("five", "1g.5gb"))
    got = claim(Snapshot((n1, n2), pods))
    assert got.holds == (("n1", 0, "ns/old"),)
    assert [(c.pod, c.node) for c in got.claims] == [("ns/five", "n2"), ("ns/ten", "n1")]


def test_no_pod_is_held_back_when_some_gpu_makes_the_older_pods_profile_without_destroying_anything() -> None:
    # GPU 1 has room for a 1g.20gb beside its one free 1g.10gb: the plan serves the older pod there, and the
    # younger pod takes a free 1g.10gb of the same node
    room = [("1g.10gb", 0, False)]
    n1 = in_place("n1", "h100-80gb", [BUSY_BUT_4, room])
    got = claim(Snapshot((n1,), (gated("young", "1g.10gb"), gated("old", "1g.20gb", created=OLD))))
    assert got.holds == ()
    assert [(c.pod, c.node) for c in got.claims] == [("ns/young", "n1")]


def test_a_re_cut_that_splits_a_larger_free_instance_holds_nothing() -> None:
    # A100-40GB: the only way to a 1g.5gb is to destroy the free 1g.10gb, which the younger pod can take as it is
    gpu = [("1g.5gb", s, True) for s in (0, 1, 2, 3, 6)] + [("1g.10gb", 4, False)]
    n1 = in_place("n1", "a100-40gb", [gpu])
    old, young = gated("old", "1g.5gb", created=OLD), gated("young", "1g.10gb")
    got = claim(Snapshot((n1,), (old, young)))
    assert got.holds == ()
    assert [(c.pod, c.node) for c in got.claims] == [("ns/young", "n1")]


def test_a_stock_node_or_one_a_guard_rail_holds_is_never_held() -> None:
    # mig-manager cannot re-cut a busy GPU, and no change starts on a frozen node: no hold, the younger pod takes
    # the free instance
    busy = in_place("n1", "h100-80gb", [BUSY_BUT_4])
    for n1 in (dataclasses.replace(busy, in_place=False), dataclasses.replace(busy, frozen_reason="cooldown")):
        got = claim(Snapshot((n1,), (gated("old", "1g.20gb", created=OLD), gated("young", "1g.10gb"))))
        assert got.holds == ()
        assert [c.pod for c in got.claims] == ["ns/young"]


def test_a_change_that_could_destroy_a_claimed_instance_waits_and_one_that_cannot_starts() -> None:
    # the higher-priority pod claims a free instance on GPU 0; the plan re-cuts idle GPU 1 for a 3g.40gb. When
    # GPU 1's free instances are of the claimed profile, the device plugin may hand the claimed pod one of them:
    # the change waits. When they are of another profile, it starts.
    busy = [("1g.10gb", s, s != 6) for s in range(7)]
    for idle_profile, waits in (("1g.10gb", True), ("1g.20gb", False)):
        idle = [(idle_profile, s, False) for s in ((0, 1, 2, 3, 4, 5, 6) if idle_profile == "1g.10gb" else (0, 2))]
        n1 = in_place("n1", "h100-80gb", [busy, idle])
        first = gated("first", "1g.10gb", priority=10)
        snap = Snapshot((n1,), (first, gated("big", "3g.40gb", created=OLD)))
        claims = claim(snap)
        assert [c.pod for c in claims.claims] == ["ns/first"]
        view = claimed(snap, claims)
        result = plan(view)
        assert [g.index for n in result.nodes for g in n.gpus if g.changed] == [1]
        assert collisions(view, result, claims) == ({"n1"} if waits else set()), idle_profile


def test_a_pod_kube_scheduler_would_not_bind_claims_nothing_and_a_pod_claims_only_where_its_cpu_fits() -> None:
    # "stuck" was released and found unschedulable (anti-affinity, say: nothing migctl models), "kueued" carries
    # another component's gate: neither claims anything, and the next pod gets the instance. "heavy" asks for more
    # CPU than n1 has left: it takes n2's instance
    n1 = node("n1", "a100-40gb", [{"1g.5gb": 7}], [{"1g.5gb": 6}], cpu_m=4_000)
    n2 = node("n2", "a100-40gb", [{"1g.5gb": 7}], [{"1g.5gb": 6}])
    stuck = dataclasses.replace(mig("stuck", "1g.5gb"), created=OLD, unschedulable=True)
    kueued = dataclasses.replace(gated("kueued", "1g.5gb", created=OLD), other_gates=True)  # Kueue's gate too
    heavy = dataclasses.replace(gated("heavy", "1g.5gb"), requests=Resources(cpu_m=8_000, pods=1))
    got = claim(Snapshot((n1, n2), (stuck, kueued, heavy, gated("next", "1g.5gb", created="2027-01-15T07:59:30Z"))))
    assert [(c.pod, c.node) for c in got.claims] == [("ns/heavy", "n2"), ("ns/next", "n1")]
