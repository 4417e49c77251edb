"""The forecast term's exact model (migctl/core/exact/forecast_model.py): the planner's last step never does worse
than the greedy on the term, keeps the placement, reaches the proven optimum where the greedy falls short, and
stays within its size limit."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.instances import hard_instance, random_instance
from migctl.core.budget import WorkBudget
from migctl.core.exact.forecast_model import build, improve, value
from migctl.core.exact.solve import solve
from migctl.core.forecast.estimate import Forecast, forecast
from migctl.core.forecast.over_time import for_the_forecast
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import ExactSettings, PlannerSettings
from migctl.core.planner import place, plan
from tests.unit.builders import CATALOG
from tests.unit.core.planner.test_planner_properties import _check_valid, snapshots

DEFAULT = PlannerSettings()
GREEDY_ONLY = PlannerSettings(exact=ExactSettings(forecast_max_gpus=0))


def _parts(snap: Snapshot, s: PlannerSettings = DEFAULT) -> tuple[Forecast, Plan, Plan]:
    """The forecast, the placement's plan, and the greedy's layouts for the forecast on it."""
    demand = forecast(snap, s)
    placed = place(snap, s, WorkBudget.for_snapshot(snap, s), demand)
    return demand, placed, for_the_forecast(placed, snap, s, demand)


def _placement(p: Plan) -> set[tuple[str, str, int | None]]:
    return {(a.pod, a.node, a.gpu) for a in p.assignments}


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.booleans())
def test_the_model_keeps_the_placement_and_never_does_worse_than_the_greedy(snap: Snapshot, quiet: bool) -> None:
    s = DEFAULT.model_copy(update={"preshape_quiet_nodes": quiet})
    demand, placed, greedy = _parts(snap, s)
    got = improve(placed, greedy, snap, s, demand)
    _check_valid(snap, got)
    assert _placement(got) == _placement(placed)
    assert got.summary.pods_placed == placed.summary.pods_placed
    if demand.models:
        fm = build(placed, snap, s, demand)
        mine, theirs = value(fm, got), value(fm, greedy)
        assert mine is not None and theirs is not None
        assert mine <= theirs


# Instances of the benchmark where the greedy (GPU by GPU, in name order) ends below the term's optimum.
SHORT = [random_instance(10, CATALOG, 64, 300), hard_instance(2, CATALOG, 64, 300)]


def test_where_the_greedy_falls_short_the_plan_reaches_the_proven_optimum() -> None:
    for inst in SHORT:
        snap = inst.snapshot(CATALOG)
        demand, placed, greedy = _parts(snap)
        fm = build(placed, snap, DEFAULT, demand)
        best = solve(fm.model, nodes=20_000)
        assert best is not None and best.proven, inst.name
        optimum = tuple(stage.value for stage in best.stages)
        greedy_value = value(fm, greedy)
        assert greedy_value is not None and greedy_value > optimum, inst.name  # the greedy falls short here
        result = plan(snap)
        _check_valid(snap, result)
        assert value(fm, result) == optimum, inst.name
        assert _placement(result) == _placement(placed), inst.name


def test_above_its_size_limit_the_plan_is_the_greedys() -> None:
    snap = SHORT[0].snapshot(CATALOG)
    _, _, greedy = _parts(snap, GREEDY_ONLY)
    assert plan(snap, GREEDY_ONLY).nodes == greedy.nodes
    assert plan(snap).nodes != greedy.nodes  # within the limit the model changes something here


def test_without_a_forecast_the_term_changes_nothing() -> None:
    snap = SHORT[0].snapshot(CATALOG)
    off = PlannerSettings(forecast=False)
    demand, placed, greedy = _parts(snap, off)
    assert not demand.models
    assert improve(placed, greedy, snap, off, demand) is greedy
