"""The greedy's cheapest-state-first scan of reshaping options (migctl/core/planner/greedy.py,
`_reshape_cheapest`) against trying every GPU state for every pod (`_reshape_each`): the same plans, on random
snapshots and on a scale-family instance with node pools and hundreds of demand classes."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from bench.instances import scale_instance, subset
from migctl.core.cluster import GpuDemand, Pod, Snapshot
from migctl.core.forecast import forecast
from migctl.core.planner import plan
from migctl.core.planner.greedy import Greedy
from migctl.core.planner.passes import Planner
from migctl.core.planner.state import Candidate
from migctl.core.planner.strategy import STRATEGIES, Strategy
from migctl.core.settings import PlannerSettings
from tests.unit.builders import CATALOG
from tests.unit.core.test_planner_properties import snapshots


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
