"""The local search after the greedy: exact single-GPU fits, and each kind of move on small hand-built clusters."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bench.instances import random_instance
from migctl.core.forecast.estimate import forecast
from migctl.core.hardware.geometry import canonical, geometry
from migctl.core.model.cluster import GpuDemand, Pod, Resources, Snapshot
from migctl.core.model.settings import ExactSettings, PlannerSettings
from migctl.core.planner import plan
from migctl.core.planner.passes import Planner
from migctl.core.search import LocalSearch, budgets
from migctl.core.search.bins import Bin, Box, Item
from migctl.core.search.fits import Shapes
from tests.unit.builders import CATALOG, mig, node, vram

A100 = Shapes(geometry(CATALOG.model("a100-40gb")))
IDLE = A100.start((), True)  # an idle GPU that may take any layout
MIB = A100.mib
HEURISTIC = PlannerSettings(exact=ExactSettings(enabled=False))  # the planner's own passes, no exact solves


def vreq(gib: float) -> GpuDemand:
    return GpuDemand("vram", vram_mib=int(gib * 1024))


def item(name: str, demand: GpuDemand, priority: int = 0, cpu_m: int = 0) -> Item:
    return Item(Pod("ns", name, priority=priority, requests=Resources(cpu_m, 0, 1), gpu=(demand,)), demand, None)


def gpu(box: Box, order: int, pods: Sequence[Item] = (), base: dict[str, int] | None = None) -> Bin:
    """A GPU on `box`: idle and reshapable when `base` is None, else fixed with these free instances."""
    b = Bin(box, order, A100, canonical((base or {}).items()), base is None)
    box.bins.append(b)
    b.set(list(pods))
    return b


def search(bins: Sequence[Bin], budget: int = 10_000) -> LocalSearch:
    return LocalSearch(lambda it: [b for b in bins if it.req(b.shapes) is not None], budget)


def names(b: Bin) -> set[str]:
    return {it.pod.name for it in b.items}


# -- exact fits ----------------------------------------------------------------------------------------------


def test_vram_requests_round_up_to_the_instance_size_that_holds_them() -> None:
    assert A100.req(vreq(9)) == ("v", MIB["1g.10gb"])
    assert A100.req(vreq(3)) == ("v", MIB["1g.5gb"])
    assert A100.req(vreq(41)) is None  # more than the 7g.40gb instance
    assert A100.req(GpuDemand("profile", profile="1g.18gb")) is None  # an H200 profile


def test_fit_hands_out_the_smallest_instances_and_counts_unusable_memory() -> None:
    reqs = tuple(sorted([A100.req(vreq(9)), A100.req(vreq(3))]))  # type: ignore[type-var]
    got = A100.fit(IDLE, reqs)  # type: ignore[arg-type]
    assert got is not None
    cost, reshaped, profiles = got
    assert reshaped and sorted(profiles) == ["1g.10gb", "1g.5gb"]
    # the cheapest valid layout holding both strands nothing: instance memory handed out is all that counts
    geo = geometry(CATALOG.model("a100-40gb"))
    best = min(
        geo.unusable_mib(lay) for lay in geo.layouts if dict(lay).get("1g.10gb", 0) >= 1 and dict(lay).get("1g.5gb", 0)
    )
    assert cost == MIB["1g.10gb"] + MIB["1g.5gb"] + best


def test_fit_keeps_existing_instances_when_they_serve_and_refuses_impossible_sets() -> None:
    fixed = A100.start(canonical({"3g.20gb": 1, "4g.20gb": 1}.items()), False)
    got = A100.fit(fixed, (("p", "3g.20gb"), ("v", MIB["4g.20gb"])))
    assert got is not None and not got[1] and sorted(got[2]) == ["3g.20gb", "4g.20gb"]
    assert A100.fit(fixed, (("p", "1g.5gb"),)) is None  # a fixed GPU cannot grow instances it lacks
    assert A100.fit(IDLE, (("p", "4g.20gb"), ("p", "4g.20gb"))) is None  # one 4g.20gb per GPU at most


def test_exact_profiles_claim_their_instances_before_vram_requests() -> None:
    """A 5 GiB-class VRAM request would take the 1g.10gb (smallest, then name order) if it went first; the exact
    1g.10gb pod would then find nothing, although 2g.10gb serves the VRAM request."""
    fixed = A100.start(canonical({"1g.10gb": 1, "2g.10gb": 1}.items()), False)
    got = A100.fit(fixed, (("p", "1g.10gb"), ("v", MIB["1g.10gb"])))
    assert got is not None and got[2] == ("1g.10gb", "2g.10gb")


# -- moves -----------------------------------------------------------------------------------------------------


def test_swap_moves_a_placed_pod_to_make_room() -> None:
    """Only g0 can take the 7g pod; it holds a small pod that fits on g1's free instance."""
    box = Box(Resources(64_000, 0, 110))
    small = item("small", vreq(4))
    g0 = gpu(box, 0, [small])
    g1 = gpu(box, 1, [], base={"1g.5gb": 1})  # fixed layout with one free small instance
    big = item("big", GpuDemand("profile", profile="7g.40gb"))
    left = search([g0, g1]).run([big])
    assert left == [] and names(g0) == {"big"} and names(g1) == {"small"}


def test_swap_fills_the_room_with_another_left_out_pod() -> None:
    """u takes v's place and v fits nowhere, but a second left-out pod of v's priority fits beside u: +1 pod."""
    box = Box(Resources(64_000, 0, 110))
    v = item("v", vreq(15))
    g0 = gpu(box, 0, [v, item("x", GpuDemand("profile", profile="4g.20gb"))])  # 4g.20gb + 3g.20gb: full memory
    u, w = item("u", vreq(9)), item("w", vreq(9))
    left = search([g0]).run([u, w])
    assert {it.pod.name for it in left} == {"v"}
    assert names(g0) == {"x", "u", "w"}


def test_evacuate_frees_a_whole_gpu() -> None:
    """Two small pods on g0, each fitting on a different fixed GPU: g0 is emptied for the 7g pod."""
    box = Box(Resources(64_000, 0, 110))
    a, b = item("a", vreq(4)), item("b", vreq(9))
    g0 = gpu(box, 0, [a, b])
    g1 = gpu(box, 1, [], base={"1g.5gb": 1})
    g2 = gpu(box, 2, [], base={"1g.10gb": 1})
    left = search([g0, g1, g2]).run([item("big", GpuDemand("profile", profile="7g.40gb"))])
    assert left == []
    assert (names(g0), names(g1), names(g2)) == ({"big"}, {"a"}, {"b"})


def test_a_higher_priority_pod_may_displace_a_lower_one_but_not_the_reverse() -> None:
    box = Box(Resources(64_000, 0, 110))
    low = item("low", GpuDemand("profile", profile="7g.40gb"), priority=0)
    g0 = gpu(box, 0, [low])
    high = item("high", vreq(30), priority=10)
    left = search([g0]).run([high])
    assert names(g0) == {"high"} and [it.pod.name for it in left] == ["low"]
    # the reverse: a low-priority pod never displaces a higher one it cannot rehome
    box2 = Box(Resources(64_000, 0, 110))
    g = gpu(box2, 0, [item("high", vreq(30), priority=10)])
    left2 = search([g]).run([item("low", GpuDemand("profile", profile="7g.40gb"))])
    assert names(g) == {"high"} and [it.pod.name for it in left2] == ["low"]


def test_a_higher_priority_pod_may_clear_a_gpu_of_several_lower_ones() -> None:
    """No single lower-priority pod frees enough for the 7g pod; evacuating the GPU and leaving both out does."""
    box = Box(Resources(64_000, 0, 110))
    g0 = gpu(box, 0, [item("low-a", vreq(4)), item("low-b", vreq(9))])
    left = search([g0]).run([item("high", GpuDemand("profile", profile="7g.40gb"), priority=10)])
    assert names(g0) == {"high"} and sorted(it.pod.name for it in left) == ["low-a", "low-b"]


def test_swap_frees_node_cpu() -> None:
    """The node has GPU room for u but not CPU: a CPU-heavy pod moves to the other node."""
    tight, roomy = Box(Resources(4_000, 0, 110)), Box(Resources(8_000, 0, 110))
    hog = item("hog", vreq(4), cpu_m=4_000)
    g0 = gpu(tight, 0, [hog])
    tight.free = Resources(0, 0, 109)
    g1 = gpu(roomy, 1, [], base={"1g.5gb": 1})
    u = item("u", vreq(7), cpu_m=2_000)
    left = search([g0, g1]).run([u])  # u fits only g0's GPU (g1 has one 1g.5gb), where the hog holds the CPU
    assert left == [] and names(g0) == {"u"} and names(g1) == {"hog"}
    assert tight.free.cpu_m == 2_000 and roomy.free.cpu_m == 4_000


def test_tidy_moves_a_pod_to_where_it_strands_less() -> None:
    box = Box(Resources(64_000, 0, 110))
    p = item("p", vreq(4))
    g0 = gpu(box, 0, [p], base={"3g.20gb": 1})  # a 4 GiB pod on a 20 GiB instance
    g1 = gpu(box, 1, [], base={"1g.5gb": 1})
    before = g0.cost + g1.cost
    search([g0, g1]).tidy([p], 1_000)
    assert names(g1) == {"p"} and g0.cost + g1.cost < before


def test_no_budget_no_moves() -> None:
    box = Box(Resources(64_000, 0, 110))
    g0 = gpu(box, 0, [item("small", vreq(4))])
    gpu(box, 1, [], base={"1g.5gb": 1})
    big = item("big", GpuDemand("profile", profile="7g.40gb"))
    assert search(box.bins, budget=0).run([big]) == [big]
    assert names(g0) == {"small"}


# -- through plan() ----------------------------------------------------------------------------------------------


def test_the_documented_greedy_miss_now_reaches_the_optimum() -> None:
    """docs/benchmarks.md's reproducer: the greedy alone places 8; the optimum (exact ILP) places 9."""
    n = node(
        "n1",
        "a100-40gb",
        [
            {"1g.10gb": 1, "2g.10gb": 1, "4g.20gb": 1},
            {"1g.5gb": 1, "4g.20gb": 1},
            {"1g.10gb": 2, "1g.5gb": 4},
            {"1g.10gb": 1, "2g.10gb": 1, "3g.20gb": 1},
        ],
    )
    pods = [mig("p18", "7g.40gb"), vram("p07", 30), vram("p04", 15), vram("p00", 10), vram("p05", 7)]
    pods += [mig("p06", "1g.10gb"), vram("p10", 5), vram("p13", 3), vram("p19", 1), mig("p20", "1g.10gb")]
    assert plan(Snapshot((n,), tuple(pods))).objective()[0] == 9


# -- augment: chains of any length ----------------------------------------------------------------------------


def _three_step_chain(priority_v1: int, priority_v2: int) -> tuple[Item, Item, Item, Bin, Bin, Bin, LocalSearch]:
    """u (priority 10) needs a 3g.20gb: only g0 has one, held by v1; v1 fits g1's 2g.10gb, held by v2; v2 fits
    g2's free 1g.5gb. Every GPU is fixed."""
    box = Box(Resources(64_000, 0, 110))
    v1, v2 = item("v1", vreq(9), priority=priority_v1), item("v2", vreq(4), priority=priority_v2)
    g0 = gpu(box, 0, [v1], base={"3g.20gb": 1})
    g1 = gpu(box, 1, [v2], base={"2g.10gb": 1})
    g2 = gpu(box, 2, [], base={"1g.5gb": 1})
    u = item("u", GpuDemand("profile", profile="3g.20gb"), priority=10)
    return u, v1, v2, g0, g1, g2, search([g0, g1, g2])


def test_augment_finds_a_chain_that_swap_and_evacuate_miss() -> None:
    """u needs v1's GPU, v1 needs v2's, v2 fits the free instance: two pods move, one step more than swap."""
    u, _, _, g0, g1, g2, s = _three_step_chain(10, 10)  # nothing of lower priority to leave out
    assert [it.pod.name for it in s.run([u])] == ["u"]  # insert, swap and evacuate find nothing
    assert s.augment_all([u], 0) == 0 and u.at is None  # no work granted, no search
    assert s.augment_all([u], 1_000) == 1
    assert (names(g0), names(g1), names(g2)) == ({"u"}, {"v1"}, {"v2"}) and s.out == []


def test_augment_leaves_out_only_a_lower_priority_pod_at_the_end_of_a_chain() -> None:
    """g2 is gone: the chain can only end by leaving out v2 (priority 0 < u's 10); v1 (priority 5) keeps a GPU."""
    u, _, v2, g0, g1, _, _ = _three_step_chain(5, 0)
    s = search([g0, g1])
    s.augments = 1_000
    assert s.augment(u)
    assert (names(g0), names(g1)) == ({"u"}, {"v1"}) and s.out == [v2] and v2.at is None


def test_augment_never_leaves_out_a_pod_of_the_same_priority() -> None:
    """As above with v1 and v2 of u's priority: no chain ends in room and none may end by leaving one out."""
    u, _, _, g0, g1, _, _ = _three_step_chain(10, 10)
    s = search([g0, g1])
    s.augments = 1_000
    assert not s.augment(u) and u.at is None
    assert (names(g0), names(g1)) == ({"v1"}, {"v2"})


def test_augment_counts_node_resources_along_the_chain() -> None:
    """u (2 CPUs) takes v's place on a node with no CPU left; v fits a free instance on the same node (g1) and
    on another node (g2). Staying on its node would need 2 CPUs that u has taken: the chain must end on g2."""
    full, other = Box(Resources(0, 0, 110)), Box(Resources(2_000, 0, 110))
    v = item("v", vreq(9), cpu_m=2_000)
    g0 = gpu(full, 0, [v], base={"3g.20gb": 1})
    g1 = gpu(full, 1, [], base={"1g.10gb": 1})
    g2 = gpu(other, 2, [], base={"1g.10gb": 1})
    u = item("u", GpuDemand("profile", profile="3g.20gb"), cpu_m=2_000)
    s = search([g0, g1, g2])
    s.augments = 1_000
    assert s.augment(u)
    assert (names(g0), names(g1), names(g2)) == ({"u"}, set(), {"v"})
    assert full.free.cpu_m == 0 and other.free.cpu_m == 0
    # without the other node there is no chain, and nothing changes
    full2 = Box(Resources(0, 0, 110))
    w = item("w", vreq(9), cpu_m=2_000)
    h0 = gpu(full2, 0, [w], base={"3g.20gb": 1})
    h1 = gpu(full2, 1, [], base={"1g.10gb": 1})
    u2 = item("u2", GpuDemand("profile", profile="3g.20gb"), cpu_m=2_000)
    s = search([h0, h1])
    s.augments = 1_000
    assert not s.augment(u2)
    assert (names(h0), names(h1), full2.free.cpu_m) == ({"w"}, set(), 0)


def _cpu_bound_chain() -> tuple[Box, Box, Bin, Bin, Bin, Item]:
    """u needs g0's 3g.20gb (node A), held by v1 (2 CPUs); v1 fits g1's 1g.10gb on node B, but B's CPU is all
    v2's (4 CPUs, on g2). Returns the nodes, the GPUs and u."""
    a, b = Box(Resources(64_000, 0, 110)), Box(Resources(4_000, 0, 110))
    v1, v2 = item("v1", vreq(9), cpu_m=2_000), item("v2", vreq(4), cpu_m=4_000)
    g0 = gpu(a, 0, [v1], base={"3g.20gb": 1})
    a.free = Resources(62_000, 0, 109)
    g1 = gpu(b, 1, [], base={"1g.10gb": 2})
    g2 = gpu(b, 2, [v2], base={"1g.5gb": 1})
    b.free = Resources(0, 0, 109)
    return a, b, g0, g1, g2, item("u", GpuDemand("profile", profile="3g.20gb"), cpu_m=2_000)


def test_two_for_one_leaves_out_a_cpu_hungry_pod_for_two_that_fit_in_its_place() -> None:
    """No chain keeps every pod placed; leaving out v2 (u's priority) for v1 frees 2 CPUs on B, where w (2 CPUs)
    then fits g1's other 1g.10gb: u and w placed for v2, one pod more of that priority. No move of the search
    finds it."""
    _, b, g0, g1, g2, u = _cpu_bound_chain()
    w = item("w", vreq(9), cpu_m=2_000)
    s = search([g0, g1, g2])
    assert sorted(it.pod.name for it in s.run([u, w])) == ["u", "w"]
    assert s.augment_all([u, w], 1_000) == 1
    assert (names(g0), names(g1), names(g2)) == ({"u"}, {"v1", "w"}, set())
    assert [it.pod.name for it in s.out] == ["v2"] and b.free.cpu_m == 0


def test_two_for_one_is_undone_when_no_second_pod_fits() -> None:
    """As above without w: leaving out v2 would only trade it for u, so everything goes back as it was."""
    a, b, g0, g1, g2, u = _cpu_bound_chain()
    s = search([g0, g1, g2])
    assert s.augment_all([u], 1_000) == 0
    assert (names(g0), names(g1), names(g2)) == ({"v1"}, set(), {"v2"}) and u.at is None
    assert (a.free.cpu_m, b.free.cpu_m) == (62_000, 0)


# -- the size limit of a pass's tidy (`budgets.TIDY_MAX_GPUS`) --------------------------------------------------


def test_above_the_size_limit_a_pass_that_left_no_pod_in_reach_out_does_not_tidy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An instance whose first pass places every pod it can and whose tidy then strands less: with the limit one
    GPU below its size the tidy does not run (same pods, more stranded); at its size it runs again."""
    snap = random_instance(18, CATALOG, 16, 60).snapshot(CATALOG)
    monkeypatch.setattr(budgets, "TIDY_MAX_GPUS", snap.mig_gpus)
    tidied = plan(snap, HEURISTIC)
    monkeypatch.setattr(budgets, "TIDY_MAX_GPUS", snap.mig_gpus - 1)
    untidied = plan(snap, HEURISTIC)
    assert untidied.summary.pods_placed == tidied.summary.pods_placed
    assert untidied.objective()[1] > tidied.objective()[1]


def test_whatever_the_size_the_search_runs_for_pods_in_reach_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """The limit spares only the tidy: where a pass's greedy leaves out pods the search can place, the search
    places them (one pass, `Planner.run`, with the limit at 0 GPUs, against the same pass without its search)."""
    snap = random_instance(0, CATALOG, 16, 80).snapshot(CATALOG)
    demand = forecast(snap, HEURISTIC)
    monkeypatch.setattr(budgets, "TIDY_MAX_GPUS", 0)
    limited = Planner(snap, HEURISTIC, shapes={}, completions={}, demand=demand).run()
    monkeypatch.setattr(Planner, "_improve", lambda self, unplaced: unplaced)
    greedy = Planner(snap, HEURISTIC, shapes={}, completions={}, demand=demand).run()
    assert limited.summary.pods_placed > greedy.summary.pods_placed
