"""The burst rule (`core/forecast/estimate.burst_hold`): while a burst of GPU pods is still arriving, its pods that
would leave much of their instance unused are not planned, so the plan that cuts GPUs for them sees the burst whole.
The clock is passed in (the controller's and the simulator's); creation times are what the API server writes."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from migctl.core.forecast.estimate import BURST_MAX_S, BURST_QUIET_S, burst_hold
from migctl.core.model.cluster import Pod, Snapshot
from tests.unit.builders import node, vram

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = node("n1", "h100-80gb", [{"7g.80gb": 1}] * 8)


def _pods(arrivals: list[float], gib: float) -> list[Pod]:
    return [
        replace(vram(f"p{gib:g}-{i}", gib), created=(T0 + timedelta(seconds=t)).strftime("%Y-%m-%dT%H:%M:%SZ"))
        for i, t in enumerate(arrivals)
    ]


def at(seconds: float) -> float:
    return T0.timestamp() + seconds


def test_a_bursts_wasteful_pods_wait_until_it_has_landed_and_the_others_do_not() -> None:
    # 45 GiB takes a whole 7g.80gb (44% unused); 38 GiB fits a 3g.40gb (5% unused). 2 s apart, last at 38 s
    pods = _pods([4.0 * i for i in range(10)], 45) + _pods([4.0 * i + 2 for i in range(10)], 38)
    snap = Snapshot((H100,), tuple(pods))
    burst = burst_hold(snap, at(39.0))
    assert burst is not None
    assert burst.until == at(38.0 + BURST_QUIET_S)
    assert burst.held == {p.key for p in pods if p.name.startswith("p45")}
    assert burst_hold(snap, at(38.0 + BURST_QUIET_S)) is None  # quiet for 30 s: it has landed


def test_a_few_pods_or_a_steady_stream_are_no_burst() -> None:
    assert burst_hold(Snapshot((H100,), tuple(_pods([0.0, 5.0, 10.0], 45))), at(11.0)) is None
    assert burst_hold(Snapshot((H100,), tuple(_pods([100.0 * i for i in range(20)], 45))), at(1901.0)) is None


def test_a_burst_that_never_ends_holds_pods_at_most_burst_max_s() -> None:
    endless = Snapshot((H100,), tuple(_pods([5.0 * i for i in range(400)], 45)))  # 2,000 s, 5 s apart
    burst = burst_hold(endless, at(300.0))
    assert burst is not None and burst.until == at(BURST_MAX_S)
    assert burst_hold(endless, at(BURST_MAX_S + 1.0)) is None
