"""Guard rails, as pure decisions (no API, no clock: `now` is passed in), so each rule is unit-tested alone.

Two stages:
* before planning, `holds` says which nodes the planner must leave alone right now (in flight, failure backoff,
  cooldown, minimum dwell); they are handed to the planner as frozen nodes, so it plans around them instead of
  planning changes that would then wait;
* after planning, `select` decides which planned node changes may start now (pause, dry run, concurrency,
  eviction budget, opted-out pods).
`BatchWindow` decides when pending demand has settled enough to act on.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass

from migctl.config import ControllerSettings
from migctl.reconcile.paths import Rails
from migctl.reconcile.reasons import Code, Reason
from migctl.wire.names import BACKOFF_UNTIL, FAILURES, LAST_ATTEMPT, LAST_CHANGE, PHASE


def _float(value: object) -> float | None:
    try:
        return float(str(value))
    except ValueError:
        return None


@dataclass(frozen=True)
class NodeRecord:
    """What migctl remembers about a node, read from its annotations (so every replica sees the same)."""

    name: str
    phase: str = ""
    last_attempt: float | None = None
    last_change: float | None = None
    backoff_until: float | None = None
    failures: int = 0

    @staticmethod
    def from_annotations(name: str, annotations: Mapping[str, str]) -> NodeRecord:
        failures = _float(annotations.get(FAILURES, "0")) or 0
        return NodeRecord(
            name=name,
            phase=str(annotations.get(PHASE, "")),
            last_attempt=_float(annotations.get(LAST_ATTEMPT, "")),
            last_change=_float(annotations.get(LAST_CHANGE, "")),
            backoff_until=_float(annotations.get(BACKOFF_UNTIL, "")),
            failures=int(failures),
        )


def failure_backoff(failures: int, settings: ControllerSettings) -> float:
    """Seconds to leave a node alone after its `failures`-th consecutive failure (doubling, capped)."""
    if failures <= 0:
        return 0.0
    return float(min(settings.failure_backoff_max_s, settings.failure_backoff_s * 2 ** min(failures - 1, 30)))


def holds(
    records: Iterable[NodeRecord], now: float, rails: Callable[[str], Rails], in_flight: Collection[str] = ()
) -> dict[str, Reason]:
    """node -> why it must not be reconfigured now (absent: it may); `rails(node)`: the guard rails of the node's
    path (each path has its own cooldown and dwell)."""
    out: dict[str, Reason] = {}
    for r in records:
        if r.name in in_flight or r.phase:
            why: Reason | None = Reason(Code.IN_FLIGHT, f"migctl is reconfiguring it (phase {r.phase or 'starting'})")
        else:
            why = _hold(r, now, rails(r.name))
        if why is not None:
            out[r.name] = why
    return out


def _hold(r: NodeRecord, now: float, rails: Rails) -> Reason | None:
    """Why the failure backoff, cooldown or dwell holds this node (None when none does)."""
    if r.backoff_until is not None and now < r.backoff_until:
        return Reason(
            Code.BACKOFF, f"backing off after {r.failures} failed attempt(s) for {r.backoff_until - now:.0f} s more"
        )
    if r.last_attempt is not None and now < r.last_attempt + rails.cooldown_s:
        cooldown = f"{rails.setting('cooldown_s')} {rails.cooldown_s}"
        return Reason(Code.COOLDOWN, f"cooldown: last attempt {now - r.last_attempt:.0f} s ago ({cooldown})")
    if r.last_change is not None and now < r.last_change + rails.min_dwell_s:
        dwell = f"{rails.setting('min_dwell_s')} {rails.min_dwell_s}"
        return Reason(Code.DWELL, f"minimum dwell: layout applied {now - r.last_change:.0f} s ago ({dwell})")
    return None


@dataclass(frozen=True)
class Candidate:
    """A node the plan changes: its name and the pods the plan evicts there."""

    node: str
    evictions: tuple[str, ...] = ()


@dataclass(frozen=True)
class Decision:
    node: str
    reason: Reason

    @property
    def start(self) -> bool:
        return self.reason.starts


def select(
    candidates: Iterable[Candidate],
    *,
    active: int,
    rails: Rails,
    evictions_left: int,
    max_evictions_per_hour: int,
    paused: bool,
    dry_run: bool,
    protected_pods: Collection[str] = (),
) -> list[Decision]:
    """Which planned changes on one path start now, in plan order; every refusal says why (logged, Event on the
    node). `active`: the path's changes in flight; `evictions_left`: the hour's eviction budget still unused."""
    out: list[Decision] = []
    slots = rails.max_concurrent_nodes - active
    budget = evictions_left
    for c in candidates:
        protected = sorted(set(c.evictions) & set(protected_pods))
        if paused:
            out.append(Decision(c.node, Reason(Code.PAUSED, "paused")))
        elif protected:
            out.append(Decision(c.node, Reason(Code.PROTECTED, f"would evict opted-out pod(s) {', '.join(protected)}")))
        elif len(c.evictions) > budget:
            why = (
                f"eviction budget: needs {len(c.evictions)}, {max(budget, 0)} left of "
                f"max_evictions_per_hour {max_evictions_per_hour}"
            )
            out.append(Decision(c.node, Reason(Code.EVICTION_BUDGET, why)))
        elif slots <= 0:
            limit = f"{rails.setting('max_concurrent_nodes')} {rails.max_concurrent_nodes}"
            out.append(Decision(c.node, Reason(Code.CONCURRENCY, f"{limit} already reconfiguring")))
        else:
            start = Reason(Code.DRY_RUN, "dry run: would start") if dry_run else Reason(Code.START, "start")
            out.append(Decision(c.node, start))
            slots -= 1
            budget -= len(c.evictions)
    return out


class BatchWindow:
    """Act on pending demand once it has been stable for `stable_s`, or `max_s` after it first appeared."""

    def __init__(self, stable_s: float, max_s: float) -> None:
        self.stable_s, self.max_s = stable_s, max_s
        self.demand: frozenset[str] = frozenset()
        self.first_seen: float | None = None
        self.changed_at: float | None = None

    def observe(self, demand: frozenset[str], now: float) -> tuple[bool, float | None]:
        """(act now?, when to look again if not). Empty demand resets the window."""
        if not demand:
            self.demand, self.first_seen, self.changed_at = frozenset(), None, None
            return False, None
        if self.first_seen is None or self.changed_at is None:
            self.first_seen = self.changed_at = now
        elif demand != self.demand:
            self.changed_at = now
        self.demand = demand
        due = min(self.changed_at + self.stable_s, self.first_seen + self.max_s)
        return (True, None) if now >= due else (False, due)


class EvictionLedger:
    """Evictions started in the last hour (in memory: a restart forgets it; the budget is a rate limit)."""

    WINDOW_S = 3600.0

    def __init__(self) -> None:
        self.times: deque[float] = deque()

    def count(self, now: float) -> int:
        while self.times and self.times[0] <= now - self.WINDOW_S:
            self.times.popleft()
        return len(self.times)

    def record(self, now: float, n: int = 1) -> None:
        self.times.extend([now] * n)
