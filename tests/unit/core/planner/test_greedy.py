"""The greedy's cheapest-state-first scan of reshaping options (migctl/core/planner/greedy.py,
`_reshape_cheapest`) against trying every GPU state for every pod (`_reshape_each`): the same plans, on random
snapshots and on a scale-family instance with node pools and hundreds of demand classes; and the trials of
multi-instance pods remembered per pod class and node state against trying every node afresh."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.instances import scale_instance, subset
from migctl.core.forecast.estimate import forecast
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import GpuDemand, Pod, Resources, Snapshot
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import greedy, plan
from migctl.core.planner.greedy import Greedy
from migctl.core.planner.passes import Planner
from migctl.core.planner.state import Candidate
from migctl.core.planner.strategy import STRATEGIES, Strategy
from tests.unit.builders import CATALOG, node
from tests.unit.core.planner.test_planner_properties import snapshots


def _every_state(
    self: Greedy, pod: Pod, demand: GpuDemand, sid: int, cid: int, best: Candidate | None
) -> Candidate | None:
    return self._reshape_each(pod, demand, sid, cid, best, False)


def _both(snap: Snapshot) -> tuple[dict[str, object], dict[str, object]]:
    fast = plan(snap).to_dict()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Greedy, "_reshape_cheapest", _every_state)
        slow = plan(snap).to_dict()
    return fast, slow


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_the_cheapest_state_first_scan_makes_the_plans_of_trying_every_state(snap: Snapshot) -> None:
    fast, slow = _both(snap)
    assert fast == slow


def test_the_same_plan_on_a_scale_instance() -> None:
    snap = scale_instance(CATALOG, nodes=24, pods=400).snapshot(CATALOG)
    fast, slow = _both(snap)
    assert fast == slow


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.name)
def test_the_same_pass_under_every_strategy(strategy: Strategy) -> None:
    """One pass per strategy: under the scarcity ones, pods that fit several GPU kinds take every state's cost
    (`_reshape_each`) and the others scan (`_reshape_cheapest`) in the same pass, sharing its memo of costs (a
    state costed by the first and missing from the second's ranking once changed this prefix's plan)."""
    snap = subset(scale_instance(CATALOG, nodes=1000, pods=10_000), 32, 320).snapshot(CATALOG)  # bench.compare's
    demand = forecast(snap, PlannerSettings())

    def one_pass() -> dict[str, object]:
        return Planner(snap, PlannerSettings(), strategy, shapes={}, completions={}, demand=demand).run().to_dict()

    fast = one_pass()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(Greedy, "_reshape_cheapest", _every_state)
        slow = one_pass()
    assert fast == slow


def _never_the_same(ns: object) -> object:
    return object()  # no trial is ever found in the memo: every node is tried afresh for every pod


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32 - 1))
def test_remembered_trials_of_multi_instance_pods_make_the_plans_of_fresh_ones(seed: int) -> None:
    """Pods of two or three units of a few sizes, each with its own annotated need (none, below every instance,
    above some), on nodes that fill up: the trials `_place_multi` remembers per pod class and node state, and
    those it shifts for a pod of another need, give the pass the plan of trying every node afresh."""
    rnd = random.Random(seed)
    nodes = []
    for i in range(rnd.randint(2, 6)):
        model = CATALOG.model(rnd.choice(["a100-40gb", "h100-80gb", "a100-80gb"]))
        layouts = [dict(rnd.choice(geometry(model).base_layouts)) if rnd.random() < 0.6 else {} for _ in range(3)]
        nodes.append(node(f"n{i}", model.id, layouts, cpu_m=rnd.choice((8000, 64000))))
    pods = []
    for j in range(rnd.randint(4, 30)):
        gib = rnd.choice((4, 8, 10, 20))
        need = rnd.choice((None, rnd.randint(1, 4) * 1024, gib * 1024, rnd.randint(11, 40) * 1024))
        demand = GpuDemand("vram", count=rnd.choice((2, 2, 3)), vram_mib=gib * 1024)
        pods.append(Pod("ns", f"p{j}", gpu=(demand,), need_mib=need, requests=Resources(rnd.choice((500, 3000)), 1, 1)))
    snap = Snapshot(tuple(nodes), tuple(pods))
    demand_forecast = forecast(snap, PlannerSettings())

    def one_pass() -> dict[str, object]:
        planner = Planner(snap, PlannerSettings(), shapes={}, completions={}, demand=demand_forecast)
        return planner.run().to_dict()

    remembered = one_pass()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(greedy, "_trial_key", _never_the_same)
        fresh = one_pass()
    assert remembered == fresh
