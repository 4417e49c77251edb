"""The burst rule (`core/forecast.burst_hold`): layout changes wait while a burst of GPU pods is still arriving,
so the plan that cuts GPUs sees the burst whole, not its first pods. The clock is passed in (the controller's
and the simulator's); the pods' creation times are what the API server writes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from migctl.core.cluster import Snapshot
from migctl.core.forecast import BURST_MAX_S, BURST_QUIET_S, burst_hold
from tests.unit.builders import vram

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _snapshot(arrivals: list[float]) -> Snapshot:
    pods = [
        replace(vram(f"p{i}", 20), created=(T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        for i, t in enumerate(arrivals)
    ]
    return Snapshot((), tuple(pods))


def at(seconds: float) -> float:
    return T0.timestamp() + seconds


def test_changes_wait_while_a_burst_arrives_and_go_once_it_has_landed() -> None:
    burst = _snapshot([2.0 * i for i in range(20)])  # 20 pods, 2 s apart: the last at 38 s
    assert burst_hold(burst, at(39.0)) == at(38.0 + BURST_QUIET_S)
    assert burst_hold(burst, at(38.0 + BURST_QUIET_S)) is None  # quiet for 30 s: it has landed


def test_a_few_pods_are_no_burst() -> None:
    assert burst_hold(_snapshot([0.0, 5.0, 10.0]), at(11.0)) is None
    assert burst_hold(_snapshot([100.0 * i for i in range(20)]), at(1901.0)) is None  # steady, 100 s apart


def test_a_burst_that_never_ends_holds_changes_at_most_burst_max_s() -> None:
    endless = _snapshot([5.0 * i for i in range(400)])  # 2,000 s of arrivals 5 s apart
    assert burst_hold(endless, at(300.0)) == at(0.0 + BURST_MAX_S)
    assert burst_hold(endless, at(BURST_MAX_S + 1.0)) is None
