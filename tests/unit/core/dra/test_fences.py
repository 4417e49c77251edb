"""Fences that make first fit serve the plan's reservations on a DynamicMIG node, the cap, and lifting."""

from __future__ import annotations

import pytest

from migctl.core.dra.fences import Reservation, conflict, plan_fences
from migctl.core.dra.firstfit import Choice
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import Toleration
from migctl.wire.names import PLACEMENT_TAINT as FENCE_KEY
from tests.unit.core.dra.helpers import MIG, claim, classes, exact, pool, profile_cel, profile_claim

ONE_G = [f"gpu-0-mig-1g10gb-19-{s}" for s in range(7)]


def chosen(plan_outcome: object) -> tuple[str, ...]:
    assert isinstance(plan_outcome, Choice), plan_outcome
    return plan_outcome.names


def test_whole_gpu_kept_for_a_7g(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb", gpus=2), classes(catalog)
    queue = [profile_claim("small", "1g.10gb"), profile_claim("big", "7g.80gb")]
    plan = plan_fences(p, queue, cls, [Reservation(0, "7g.80gb", 0, 8)])
    assert plan.add == tuple(ONE_G)  # each plain 1g of GPU 0, in the order first fit walks them
    assert chosen(plan.prediction.outcomes[0]) == ("gpu-1-mig-1g10gb-19-0",)
    assert chosen(plan.prediction.outcomes[1]) == ("gpu-0-mig-7g80gb-0-0",)
    assert not plan.capped and not plan.lift and not plan.keep


def test_a_4g_region_leaves_the_rest_of_the_gpu_usable(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    queue = [profile_claim("small", "1g.10gb"), profile_claim("mid", "4g.40gb")]
    plan = plan_fences(p, queue, cls, [Reservation(0, "4g.40gb", 0, 4)])
    assert plan.add == tuple(ONE_G[:4])
    assert chosen(plan.prediction.outcomes[0]) == ("gpu-0-mig-1g10gb-19-4",)
    assert chosen(plan.prediction.outcomes[1]) == ("gpu-0-mig-4g40gb-5-0",)


def test_nothing_to_fence_when_first_fit_already_agrees(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    plan = plan_fences(p, [profile_claim("a", "1g.10gb")], cls, [Reservation(0, "4g.40gb", 4, 4)])
    assert plan.add == () and chosen(plan.prediction.outcomes[0]) == (ONE_G[0],)
    exact_match = plan_fences(p, [profile_claim("a", "4g.40gb")], cls, [Reservation(0, "4g.40gb", 0, 4)])
    assert exact_match.add == ()  # the reserved instance itself is never a bad choice


def test_the_cap_stops_and_reports_what_is_left(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb", gpus=2), classes(catalog)
    queue = [profile_claim("small", "1g.10gb"), profile_claim("big", "7g.80gb")]
    plan = plan_fences(p, queue, cls, [Reservation(0, "7g.80gb", 0, 8)], cap=3)
    assert plan.capped and plan.add == tuple(ONE_G[:3])
    assert plan.bad == (("ns/small", ONE_G[3]),)
    held = plan_fences(p, queue, cls, [Reservation(0, "7g.80gb", 0, 8)], fences=ONE_G[:3], cap=3)
    assert held.capped and held.add == () and held.keep == tuple(ONE_G[:3])  # existing fences count toward the cap


def test_lifting_when_the_demand_is_served_or_gone(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    reserve = [Reservation(0, "4g.40gb", 0, 4)]
    kept = plan_fences(p, [], cls, reserve, fences=[ONE_G[0], ONE_G[5]])
    assert kept.keep == (ONE_G[0],) and kept.lift == (ONE_G[5],)  # slice 5 is not reserved
    gone = plan_fences(p, [], cls, [], fences=[ONE_G[0]])
    assert gone.lift == (ONE_G[0],) and gone.keep == ()
    served = plan_fences(p, [], cls, reserve, fences=[ONE_G[0]], allocated=[p.by_name["gpu-0-mig-4g40gb-5-0"].id])
    assert served.lift == (ONE_G[0],)
    vanished = plan_fences(p, [], cls, reserve, fences=["gpu-0-mig-no-such-1-0"])
    assert vanished.lift == ("gpu-0-mig-no-such-1-0",)


def test_a_claim_tolerating_fences_is_reported_not_chased(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    bold = claim("bold", exact(MIG, profile_cel("1g.10gb"), tolerations=[Toleration(FENCE_KEY, "Exists")]))
    plan = plan_fences(p, [bold], cls, [Reservation(0, "4g.40gb", 0, 4)])
    assert plan.add == (ONE_G[0],) and plan.bad == (("ns/bold", ONE_G[0]),) and not plan.capped


def test_deterministic_and_static_pools_refused(catalog: Catalog) -> None:
    p, cls = pool(catalog, "a100-40gb", gpus=2), classes(catalog)
    queue = [profile_claim("a", "1g.5gb"), profile_claim("b", "2g.10gb"), profile_claim("c", "7g.40gb")]
    reserve = [Reservation(0, "7g.40gb", 0, 8), Reservation(1, "3g.20gb", 4, 4)]
    assert plan_fences(p, queue, cls, reserve) == plan_fences(p, queue, cls, reserve)
    with pytest.raises(ValueError, match="DynamicMIG"):
        plan_fences(pool(catalog, "h100-80gb", mode="static"), queue, cls, reserve)


def test_conflict_rules(catalog: Catalog) -> None:
    p = pool(catalog, "h100-80gb")
    whole = Reservation(0, "", 0, 8)
    assert conflict(p.by_name["gpu-0"], [whole]) is None  # it is the reservation
    assert conflict(p.by_name[ONE_G[3]], [whole]) == whole
    assert conflict(p.by_name[ONE_G[3]], [Reservation(1, "", 0, 8)]) is None  # another GPU
