"""Properties of the in-place steps (migctl/core/inplace/steps.py) over random A100-40GB states and targets: a plan that
is not blocked reaches the target exactly without touching an instance in use, and a blocked one really has no
placement around the instances in use."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.hardware.geometry import Placement, geometry
from migctl.core.inplace.steps import Found, Op, plan_gpu
from tests.unit.builders import CATALOG

MODEL = CATALOG.model("a100-40gb")
GEO = geometry(MODEL)


@st.composite
def states(draw: st.DrawFn) -> tuple[list[Found], dict[str, int]]:
    layout = draw(st.sampled_from(GEO.base_layouts))
    placed = GEO.place(layout)
    found = []
    for i, p in enumerate(placed):
        holder = "pod x/y" if draw(st.booleans()) else ""
        pid = MODEL.profile(p.profile).profile_id or 0
        found.append(Found(p.profile, pid, p.start, p.size, i + 1, 0, f"MIG-{i}", holder))
    target = dict(draw(st.sampled_from(GEO.base_layouts)))
    return found, target


def _apply(found: list[Found], ops: tuple[Op, ...]) -> list[Placement]:
    now = [f.placement for f in found]
    for op in ops:
        spot = Placement(op.profile, op.start, op.size)
        if op.kind == "destroy":
            now.remove(spot)
        else:
            now.append(spot)
    return now


@settings(max_examples=150, deadline=None)
@given(states())
def test_a_plan_reaches_the_target_and_never_touches_an_instance_in_use(
    state: tuple[list[Found], dict[str, int]],
) -> None:
    found, target = state
    plan = plan_gpu(GEO, 0, found, target)
    busy = [f.placement for f in found if f.in_use]
    if plan.blocked:
        assert plan.ops == ()
        fits = GEO.place_around(Counter(target) - Counter(p.profile for p in busy), busy)
        too_few = any(target.get(p, 0) < n for p, n in Counter(p.profile for p in busy).items())
        assert fits is None or too_few, "blocked although a placement around the busy instances exists"
        return
    assert all(op.found is None or not op.found.in_use for op in plan.ops)
    result = _apply(found, plan.ops)
    assert Counter(p.profile for p in result) == Counter({k: v for k, v in target.items() if v})
    assert all(b in result for b in busy)
    used = 0
    for p in result:
        assert (p.start, p.size) in MODEL.profile(p.profile).placements
        mask = ((1 << p.size) - 1) << p.start
        assert not used & mask, "overlapping instances"
        used |= mask
    destroyed = [op for op in plan.ops if op.kind == "destroy"]
    created = [op for op in plan.ops if op.kind == "create"]
    assert plan.ops == (*destroyed, *created), "every destroy comes before every create"
