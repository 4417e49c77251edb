"""The in-place steps of one GPU (migctl/core/inplace/steps.py) on the catalog's exact A100-40GB geometry."""

from __future__ import annotations

import pytest

from migctl.core.hardware.geometry import ModelGeometry, Placement, geometry
from migctl.core.inplace.steps import Found, Op, held, plan_gpu, restore_ops, target_problem
from tests.unit.builders import CATALOG

GEO: ModelGeometry = geometry(CATALOG.model("a100-40gb"))
IDS = {"1g.5gb": 19, "2g.10gb": 14, "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0}


def inst(profile: str, start: int, size: int, gi: int, holder: str = "") -> Found:
    return Found(profile, IDS[profile], start, size, gi, 0, f"MIG-{gi}", holder)


def kinds(ops: tuple[Op, ...]) -> list[tuple[str, str, int]]:
    return [(o.kind, o.profile, o.start) for o in ops]


def test_busy_instance_kept_free_ones_reshaped_around_it() -> None:
    found = [inst("3g.20gb", 0, 4, 2, "pod a/train"), inst("2g.10gb", 4, 2, 3), inst("1g.5gb", 6, 1, 9)]
    plan = plan_gpu(GEO, 0, found, {"3g.20gb": 1, "1g.5gb": 3})
    assert not plan.blocked
    assert kinds(plan.ops) == [("destroy", "2g.10gb", 4), ("create", "1g.5gb", 4), ("create", "1g.5gb", 5)]
    assert all(o.found is None or not o.found.in_use for o in plan.ops)  # the busy 3g is untouched; 1g at 6 kept


def test_a_target_that_fits_only_by_moving_a_free_instance() -> None:
    """The free 1g at 4 sits on the only span left for the 2g: it is destroyed and re-created beside it."""
    found = [inst("3g.20gb", 0, 4, 2, "pod a/train"), inst("1g.5gb", 4, 1, 11)]
    plan = plan_gpu(GEO, 0, found, {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1})
    assert not plan.blocked
    assert kinds(plan.ops) == [("destroy", "1g.5gb", 4), ("create", "2g.10gb", 4), ("create", "1g.5gb", 6)]


def test_blocked_when_an_instance_in_use_sits_where_the_target_needs_room() -> None:
    found = [inst("1g.5gb", 3, 1, 10, "pod b/infer"), inst("1g.5gb", 5, 1, 12)]
    plan = plan_gpu(GEO, 1, found, {"4g.20gb": 1, "1g.5gb": 1})
    assert plan.ops == ()
    assert plan.blocked.startswith("GPU 1: 1g.5gb + 4g.20gb does not fit")
    assert "1g.5gb at 3+1 (GI 10, CI 0, MIG-10) held by pod b/infer" in plan.blocked
    assert "MIG-12" not in plan.blocked  # the free one does not block


def test_blocked_when_the_target_drops_an_instance_in_use() -> None:
    found = [inst("2g.10gb", 0, 2, 5, "3 processes")]
    plan = plan_gpu(GEO, 0, found, {"3g.20gb": 2})
    assert plan.ops == ()
    assert "the target drops 2g.10gb at 0+2" in plan.blocked and "held by 3 processes" in plan.blocked


def test_already_at_target_needs_no_step() -> None:
    found = [inst("3g.20gb", 0, 4, 2, "pod a/x"), inst("2g.10gb", 4, 2, 3), inst("1g.5gb", 6, 1, 9)]
    target = {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}
    assert held(target, found)
    assert plan_gpu(GEO, 0, found, target).ops == ()


def test_a_gpu_instance_without_compute_instance_is_never_kept() -> None:
    half = Found("1g.5gb", 19, 6, 1, 9, None, "")
    plan = plan_gpu(GEO, 0, [half], {"1g.5gb": 1})
    assert not held({"1g.5gb": 1}, [half])
    assert kinds(plan.ops)[0] == ("destroy", "1g.5gb", 6) and plan.ops[1].kind == "create"


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ({"5g.25gb": 1}, "has no MIG profile '5g.25gb'"),
        ({"1g.5gb": -1}, "negative count"),
        ({"3g.20gb": 3}, "exceeds the maximum"),
        ({"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}, "compute slices"),
    ],
)
def test_target_problem_names_the_broken_rule(target: dict[str, int], expected: str) -> None:
    problem = target_problem(GEO, target)
    assert problem is not None and expected in problem


def test_restore_destroys_only_removable_extras_and_recreates_the_missing() -> None:
    found = [inst("3g.20gb", 0, 4, 2, "pod a/x"), inst("1g.5gb", 4, 1, 11), inst("1g.5gb", 6, 1, 9)]
    wanted = [Placement("3g.20gb", 0, 4), Placement("2g.10gb", 4, 2), Placement("1g.5gb", 6, 1)]
    ops = restore_ops(found, wanted, removable=lambda f: f.start == 4)
    assert kinds(ops) == [("destroy", "1g.5gb", 4), ("create", "2g.10gb", 4)]
