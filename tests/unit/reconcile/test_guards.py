"""Guard rails as pure decisions: holds before planning, select after, the batching window, the budget."""

from __future__ import annotations

import pytest

from migctl.config import ControllerSettings
from migctl.reconcile.guards import (
    BatchWindow,
    Candidate,
    Decision,
    EvictionLedger,
    NodeRecord,
    failure_backoff,
    holds,
    select,
)
from migctl.reconcile.paths import stock_rails
from migctl.reconcile.reasons import Code

S = ControllerSettings(cooldown_s=100, min_dwell_s=1000, failure_backoff_s=60, failure_backoff_max_s=300)


def sel(
    cands: list[Candidate], *, active: int, evictions_last_hour: int, settings: ControllerSettings, paused: bool,
    protected_pods: frozenset[str] | set[str] = frozenset(),
) -> list[Decision]:  # fmt: skip
    """`select` on the stock path's rails, with the hour's budget as the controller computes it."""
    left = settings.max_evictions_per_hour - evictions_last_hour
    return select(cands, active=active, rails=stock_rails(settings), evictions_left=left,
                  max_evictions_per_hour=settings.max_evictions_per_hour, paused=paused, dry_run=settings.dry_run,
                  protected_pods=protected_pods)  # fmt: skip


def test_records_come_from_annotations_and_tolerate_garbage() -> None:
    r = NodeRecord.from_annotations(
        "n",
        {"migctl.io/phase": "draining", "migctl.io/last-change": "12.5", "migctl.io/failures": "2",
         "migctl.io/backoff-until": "not a number"},
    )  # fmt: skip
    assert (r.phase, r.last_change, r.failures, r.backoff_until) == ("draining", 12.5, 2, None)


def test_holds_in_priority_order() -> None:
    now = 10_000.0
    records = [
        NodeRecord("busy", phase="applying"),
        NodeRecord("worker"),
        NodeRecord("backoff", backoff_until=now + 5, failures=1, last_attempt=now - 1),
        NodeRecord("cool", last_attempt=now - 50),
        NodeRecord("dwell", last_attempt=now - 500, last_change=now - 500),
        NodeRecord("free", last_attempt=now - 5000, last_change=now - 5000, backoff_until=now - 1),
    ]
    out = holds(records, now, lambda _: stock_rails(S), in_flight={"worker"})
    codes = {n: r.code for n, r in out.items()}
    assert codes == {"busy": Code.IN_FLIGHT, "worker": Code.IN_FLIGHT, "backoff": Code.BACKOFF,
                     "cool": Code.COOLDOWN, "dwell": Code.DWELL}  # fmt: skip
    assert "phase applying" in out["busy"].text and "cooldown_s 100" in out["cool"].text


def test_failure_backoff_doubles_and_caps() -> None:
    assert [failure_backoff(f, S) for f in range(5)] == [0, 60, 120, 240, 300]
    assert failure_backoff(1000, S) == 300


def test_select_respects_concurrency_budget_optouts_and_pause() -> None:
    cands = [
        Candidate("a"),
        Candidate("b", evictions=("ns/x", "ns/y")),
        Candidate("c", evictions=("opt/z",)),
        Candidate("d"),
    ]
    settings = ControllerSettings(max_concurrent_nodes=2, max_evictions_per_hour=3)
    out = sel(cands, active=0, evictions_last_hour=2, settings=settings, paused=False, protected_pods={"opt/z"})
    assert [(d.node, d.start) for d in out] == [("a", True), ("b", False), ("c", False), ("d", True)]
    assert (out[1].reason.code, out[2].reason.code) == (Code.EVICTION_BUDGET, Code.PROTECTED)

    full = sel(cands[:1], active=2, evictions_last_hour=0, settings=settings, paused=False)
    assert not full[0].start and full[0].reason.code is Code.CONCURRENCY
    paused = sel(cands, active=0, evictions_last_hour=0, settings=settings, paused=True)
    assert all(not d.start and d.reason.code is Code.PAUSED for d in paused)


def test_select_default_starts_at_most_four_nodes() -> None:
    """The default limit (docs/simulation.md §4.3): four nodes at once, the fifth waits for a slot."""
    cands = [Candidate(n) for n in "abcde"]
    out = sel(cands, active=0, evictions_last_hour=0, settings=ControllerSettings(), paused=False)
    assert [d.start for d in out] == [True, True, True, True, False]
    busy = sel(cands, active=3, evictions_last_hour=0, settings=ControllerSettings(), paused=False)
    assert [d.start for d in busy] == [True, False, False, False, False]


def test_dry_run_decision_says_so() -> None:
    out = sel([Candidate("a")], active=0, evictions_last_hour=0, settings=ControllerSettings(dry_run=True),
              paused=False)  # fmt: skip
    assert out[0].start and out[0].reason.code is Code.DRY_RUN


def test_batch_window_waits_for_stability_but_not_forever() -> None:
    w = BatchWindow(stable_s=10, max_s=25)
    assert w.observe(frozenset(), 0) == (False, None)
    assert w.observe(frozenset({"a"}), 0) == (False, 10)
    assert w.observe(frozenset({"a", "b"}), 8) == (False, 18)  # changed: stable window restarts
    assert w.observe(frozenset({"a", "b", "c"}), 16) == (False, 25)  # capped by max_s from first sight
    assert w.observe(frozenset({"a", "b", "c", "d"}), 25) == (True, None)
    assert w.observe(frozenset(), 26) == (False, None)  # empty resets
    assert w.observe(frozenset({"e"}), 30) == (False, 40)


@pytest.mark.parametrize(("stable", "maximum"), [(0, 0), (0, 5)])
def test_batch_window_zero_acts_at_once(stable: float, maximum: float) -> None:
    assert BatchWindow(stable, maximum).observe(frozenset({"a"}), 3) == (True, None)


def test_eviction_ledger_forgets_after_an_hour() -> None:
    led = EvictionLedger()
    led.record(0, 2)
    led.record(1800)
    assert led.count(1800) == 3
    assert led.count(3600) == 1
    assert led.count(5401) == 0
