"""The exact solver inside the planner (migctl/core/exact): plans it makes are valid, never rank worse than the
heuristic's, reach the reference's optimum, stay deterministic, and the heuristic takes over without the solver."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import exact as reference
from bench.instances import hard_instance, random_instance
from bench.quality import tiers_of
from migctl.core.budget import WorkBudget
from migctl.core.exact import solve as solve_module
from migctl.core.exact.model import build
from migctl.core.forecast.estimate import EMPTY
from migctl.core.model.cluster import Resources, Snapshot
from migctl.core.model.placement import static_misfit
from migctl.core.model.plan import Plan
from migctl.core.model.settings import ExactSettings, PlannerSettings
from migctl.core.planner import place, plan, rank
from tests.unit.builders import CATALOG
from tests.unit.core.planner.test_planner_properties import _check_valid, snapshots

HEURISTIC = PlannerSettings(exact=ExactSettings(enabled=False))
LNS_ONLY = PlannerSettings(exact=ExactSettings(whole_max_gpus=0, neighbourhoods=40))


def _check(snap: Snapshot, result: Plan) -> None:
    """Valid layouts and instances (the property tests' check), and every node's CPU, memory and pod slots."""
    _check_valid(snap, result)
    pods = {p.key: p for p in snap.pending}
    nodes = {n.name: n for n in snap.nodes}
    used: dict[str, Resources] = {}
    for a in {a.pod: a for a in result.assignments}.values():
        used[a.node] = used.get(a.node, Resources()) + pods[a.pod].requests
        assert static_misfit(pods[a.pod], nodes[a.node]) is None
    for name, req in used.items():
        assert req.fits_in(nodes[name].free), f"{name}: {req} > {nodes[name].free}"


def _before_forecast(snap: Snapshot, settings: PlannerSettings | None = None) -> Plan:
    settings = settings or PlannerSettings()
    return place(snap, settings, WorkBudget.for_snapshot(snap, settings), EMPTY)


def _tiers(snap: Snapshot, settings: PlannerSettings | None = None) -> tuple[tuple[int, ...], int]:
    """Pods per priority and stranded MiB of the placement (`place`, before the forecast term): the part of the
    objective this model shares with the reference. The forecast term trades stranded MiB now for the pods to
    come by design and has a model of its own (tests/unit/core/exact/test_forecast_model.py)."""
    result = _before_forecast(snap, settings)
    _check(snap, result)
    return tiers_of(snap, {a.pod for a in result.assignments}), result.objective()[1]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_exact_plans_are_valid_and_never_rank_worse_than_the_heuristic(snap: Snapshot) -> None:
    for s in (None, LNS_ONLY):
        _check(snap, plan(snap, s))  # the whole plan, forecast step included, is valid
        # on the objective the solver optimises (the plan before its forecast step, see `_tiers`)
        assert rank(_before_forecast(snap, s), snap) <= rank(_before_forecast(snap, HEURISTIC), snap)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.randoms())
def test_neighbourhood_search_is_deterministic(snap: Snapshot, rnd: random.Random) -> None:
    """The large-neighbourhood search alone (the whole-instance solve off) gives the same plan whatever the order
    of nodes and pods (the default settings are covered by test_planner_properties.py)."""
    first = plan(snap, LNS_ONLY).to_dict()
    nodes, pods = list(snap.nodes), list(snap.pods)
    rnd.shuffle(nodes)
    rnd.shuffle(pods)
    assert plan(Snapshot(tuple(nodes), tuple(pods)), LNS_ONLY).to_dict() == first


@pytest.mark.parametrize("seed", [66, 91, 85])
def test_the_whole_instance_solve_reaches_the_references_optimum(seed: int) -> None:
    """Seeded benchmark instances (8-16 GPUs) where the heuristic alone misses the optimum (random-66 and
    random-91: stranded MiB; random-85: a pod of the lowest tier): the planner's plan now has the reference's
    pods per priority and stranded MiB."""
    snap = random_instance(seed, CATALOG, 64, 300).snapshot(CATALOG)
    ex = reference.solve(snap, time_limit=120)
    assert ex.optimal
    optimum = (tuple(n for _, n in ex.placed_by_priority), ex.stranded_mib)
    assert _tiers(snap) == optimum
    assert _tiers(snap, HEURISTIC) != optimum


def test_the_neighbourhood_search_improves_the_heuristic_plan() -> None:
    """A `hard` instance with the whole-instance solve off (0 GPUs) and 40 neighbourhoods: the sub-solves on
    node pairs alone rank the plan better than the heuristic's."""
    snap = hard_instance(1, CATALOG, 64, 300).snapshot(CATALOG)
    heur = plan(snap, HEURISTIC)
    lns = plan(snap, LNS_ONLY)
    _check(snap, lns)
    assert rank(lns, snap) < rank(heur, snap)


def test_above_its_size_limit_the_neighbourhood_search_leaves_the_plan_alone() -> None:
    """The instance above, whose plan the sub-solves improve, with the limit one GPU below its size: the plan is
    the heuristic's; at its size exactly, the sub-solves run again."""
    snap = hard_instance(1, CATALOG, 64, 300).snapshot(CATALOG)
    gpus = sum(len(n.gpus) for n in snap.nodes if n.model is not None)
    below = LNS_ONLY.model_copy(update={"exact": LNS_ONLY.exact.model_copy(update={"refine_max_gpus": gpus - 1})})
    at = LNS_ONLY.model_copy(update={"exact": LNS_ONLY.exact.model_copy(update={"refine_max_gpus": gpus})})
    none = LNS_ONLY.model_copy(update={"exact": LNS_ONLY.exact.model_copy(update={"neighbourhoods": 0})})
    assert plan(snap, below).to_dict() == plan(snap, none).to_dict()
    assert rank(plan(snap, at), snap) < rank(plan(snap, none), snap)


def test_without_the_solver_the_heuristic_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    snap = random_instance(85, CATALOG, 64, 300).snapshot(CATALOG)
    monkeypatch.setattr("migctl.core.exact.search.AVAILABLE", False)
    assert plan(snap).to_dict() == plan(snap, HEURISTIC).to_dict()


def test_a_stage_out_of_budget_keeps_the_warm_start() -> None:
    """With one branch-and-bound node per stage, each stage ends no worse than its start (the heuristic's plan),
    and the same budget gives the same solution again."""
    snap = random_instance(85, CATALOG, 64, 300).snapshot(CATALOG)
    model = build(snap.nodes, list(snap.pending), PlannerSettings())
    tight = solve_module.solve(model, nodes=1)
    full = solve_module.solve(model, nodes=10**9)
    assert tight is not None and full is not None
    assert full.proven
    assert [s.value for s in full.stages][:1] <= [s.value for s in tight.stages][:1]
    assert solve_module.solve(model, nodes=1) == tight


def test_thorough_raises_every_budget() -> None:
    base = ExactSettings()
    more = base.thorough()
    for name in (
        "whole_max_gpus",
        "whole_max_pods",
        "whole_nodes",
        "neighbourhoods",
        "neighbourhood_nodes",
        "refine_max_gpus",
        "forecast_max_gpus",
    ):
        assert getattr(more, name) > getattr(base, name)


def test_the_search_state_keeps_every_unit_of_a_pod_of_several_instances() -> None:
    """A pod of two instances has two assignments; the search's state, keyed by pod, once kept only the last, so
    an improved plan placed the pod partially (found by test_plans_are_valid with the forecast and the solver)."""
    from migctl.core.exact.search import _State
    from tests.unit.builders import mig, node, vram

    idle = {"1g.10gb": 7}
    snap = Snapshot(nodes=(node("n1", "h100-80gb", [idle, idle]),), pods=(mig("two", "2g.20gb", count=2), vram("v", 7)))
    base = plan(snap, HEURISTIC)
    assert [a.pod for a in base.assignments].count("ns/two") == 2
    kept = _State.of(snap, base, list(snap.pending)).plan()
    assert sorted(kept.assignments, key=str) == sorted(base.assignments, key=str)
    assert not kept.unplaced
