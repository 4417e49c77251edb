"""`plan()`: the greedy passes, the portfolio of strategies, squeaky wheel, the polish, and the exact solver's
turns (docs/planning.md, "Method"). `Planner` is one pass: its state and layers (`state.py` to `improve.py`)
with `run()`."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from migctl.core import exact
from migctl.core.budget import WorkBudget
from migctl.core.exact import forecast_model
from migctl.core.forecast.estimate import Forecast, forecast
from migctl.core.forecast.over_time import for_the_forecast
from migctl.core.forecast.spare import Completions
from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.core.objective import rank
from migctl.core.planner.improve import Improve
from migctl.core.planner.strategy import STRATEGIES, Scarcity
from migctl.core.search.fits import Shapes

# Extra passes that move pods left out by the best pass to the front of their priority ("squeaky wheel").
SQUEAKY_ROUNDS = 4


class Planner(Improve):
    """One planning pass over one snapshot (create, call `run()` once)."""

    def run(self) -> Plan:
        reach: dict[str, list[str]] = {}  # pod key -> `_kinds`, found while ordering

        def order(p: Pod) -> tuple[object, ...]:
            size = self._size(p)
            kinds = reach[p.key] = self._kinds(p)
            return self.strategy.sort_key(size, p.priority, p.key in self.boost, len(kinds), p.created, p.key)

        pending = sorted(self.snapshot.pending, key=order)
        for p in pending:
            kinds = reach[p.key]
            self.pod_kinds[p.key] = len(kinds)
            if self.strategy.scarcity is Scarcity.DEMAND and kinds:
                shares = [(k, self._rigid_mib(p, k) // len(kinds)) for k in kinds]
                self.demand_share[p.key] = shares
                for k, share in shares:
                    self.demand_left[k] += share
            if len(kinds) == 1:
                self.rigid_kind[p.key] = kinds[0]
                self.rigid_left[kinds[0]] += self._rigid_mib(p, kinds[0])
        for slot in self.slots:
            if slot.reconfigurable and slot.model is not None:
                offer = slot.model.full_profile.memory_mib
                if slot.around is not None:  # in place: all but its instances in use
                    offer -= sum(slot.model.profile(p.profile).memory_mib for p in slot.around[0])
            else:
                offer = sum(mib * n for mib, n in self._free_mib(slot))
            self.cap_left[slot.kind] += offer
            slot.node.gpu_total += offer
            slot.node.gpu_left += offer
        unplaced: list[Pod] = []
        for pod in pending:
            if pod.units == 1 and pod.gpu[0].count == 1:
                placed = self._place_single(pod)
            else:
                placed = self._place_multi(pod, self.sig_nodes[self._sig(pod)])
            if placed:
                self._consume(pod)
            else:
                unplaced.append(pod)
        if self.strategy.changes:
            unplaced = self._improve(unplaced)
        if self.settings.evictions == "lower-priority" and unplaced:
            still: list[Pod] = []
            budget = self.settings.max_evictions
            for pod in unplaced:
                evicted = self._try_evict(pod, budget - len(self.evictions))
                if evicted is None:
                    still.append(pod)
                else:
                    self.evictions.extend(evicted)
            unplaced = still
        self._run = (pending, unplaced)
        return self._result(pending, unplaced)


def plan(snapshot: Snapshot, settings: PlannerSettings | None = None) -> Plan:
    """Plan MIG layouts for a snapshot: pure, deterministic, no I/O.

    The greedy `stranded-first` pass usually places every pod that can be placed at all. When it leaves pods
    that some GPU in their reach could serve, more passes run and the best plan by the objective wins:
    `pack-first` (each pod takes the smallest share of a GPU it can),
    `pressure-first` (pods that fit several GPU kinds avoid kinds that single-kind pods still need),
    `demand-first` (the same, against the kinds that all pods still to place need most),
    `balance-first` (a pod goes where the node's GPU memory, CPU and memory stay most evenly used, before
    stranded memory counts), `balance-ties` (the same, among options of equal cost),
    `small-first` (smallest pods first across priorities; the local search then claims room for higher
    priorities), `ascending` (smallest first within each priority: more pods of a tier that cannot all fit),
    `existing-first` (reshape only when no existing instance fits) and `no-changes`. Including
    `no-changes` guarantees a plan never places fewer pods of any priority than leaving the layouts alone. Every
    pass but `no-changes` ends with the local search (`migctl/core/search/`), whose last step looks for chains of moves
    of any length that place the pods still left out (`LocalSearch.augment_all`). Then, "squeaky wheel": the
    pods the latest pass left out go first within their priority in another pass, alternating the two best
    strategies, a few rounds, keeping the best plan. Then `Planner.polish` spends more local search on that
    plan's objective 2 (exchanges, and trades among the lowest priority left out); it never places fewer pods of
    any priority. Last, where pods that some GPU could serve are still left out, `Planner.augment` looks for
    such chains once more on that plan.

    The exact solver (`migctl.core.exact`) comes in twice: a small instance is solved whole right after the first
    pass (a plan proven optimal on pods per priority and stranded MiB is returned at once), and the plan kept at
    the end gets a large-neighbourhood search with exact sub-solves; both within `settings.exact`'s work budget.
    """
    settings = settings or PlannerSettings()
    with _collector_paused():
        budget = WorkBudget.for_snapshot(snapshot, settings)
        demand = forecast(snapshot, settings)
        return budget.stamp(shape(place(snapshot, settings, budget, demand), snapshot, settings, demand))


def shape(placed: Plan, snapshot: Snapshot, settings: PlannerSettings, demand: Forecast) -> Plan:
    """The objective's forecast term on the placement's plan: the greedy's layouts for the demand to come, or the
    exact model's where it does better on a small snapshot (`migctl/core/exact/forecast_model.py`)."""
    shaped = for_the_forecast(placed, snapshot, settings, demand)
    return forecast_model.improve(placed, shaped, snapshot, settings, demand)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while planning. The planner allocates hundreds of thousands of
    small tuples that live until the plan ends; every automatic full collection would rescan them and the whole
    snapshot (a fifth of the time of a 1,000-node plan, docs/benchmarks.md). Reference counting still frees
    acyclic garbage at once; the cycles of discarded passes wait for the next collection after the plan."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def place(snapshot: Snapshot, settings: PlannerSettings, budget: WorkBudget, demand: Forecast) -> Plan:
    """The placement: objectives 1-3 (pods per priority, stranded MiB, disruption), before the forecast term."""
    shapes: dict[str, Shapes] = {}
    completions: dict[str, Completions] = {}
    first = Planner(snapshot, settings, shapes=shapes, completions=completions, demand=demand)
    budget.take()  # the first pass always runs
    best = first.run()
    exact_plan, proven = exact.whole(snapshot, first.settings, best, first.best_layout, rank)  # small instances
    if exact_plan is not None and proven:
        return exact_plan  # proven optimal on objectives 1-2: the heuristic's passes could not do better
    maker = first
    placed = {a.pod for a in best.assignments}
    hopeless = {p.key for p in snapshot.pending if first.pod_kinds.get(p.key, 0) == 0}
    # a first pass that placed its last pods by re-packing nodes left them full, not tidy: the others compete too
    if first.repacked or not all(p.key in placed or p.key in hopeless for p in snapshot.pending):
        best_rank = rank(best, snapshot)
        ranked = [(best_rank, 0, STRATEGIES[0])]
        for i, strategy in enumerate(STRATEGIES[1:], 1):
            if not budget.take():
                break
            other_maker = Planner(snapshot, settings, strategy, shapes=shapes, completions=completions, demand=demand)
            other = other_maker.run()
            other_rank = rank(other, snapshot)
            ranked.append((other_rank, i, strategy))
            if other_rank < best_rank:
                best, best_rank, maker = other, other_rank, other_maker
        leaders = [s for _, _, s in sorted(ranked, key=lambda r: r[:2])[:2]]
        boost: set[str] = set()
        latest = best
        for r in range(SQUEAKY_ROUNDS):
            left = {p.key for p in snapshot.pending} - {a.pod for a in latest.assignments} - hopeless
            if not left or left <= boost or not budget.take():
                break
            boost |= left
            latest_maker = Planner(
                snapshot, settings, leaders[r % len(leaders)], frozenset(boost), shapes, completions, demand
            )
            latest = latest_maker.run()
            latest_rank = rank(latest, snapshot)
            if latest_rank < best_rank:
                best, best_rank, maker = latest, latest_rank, latest_maker
    if maker.can_polish and budget.take():
        polished = maker.polish()
        if rank(polished, snapshot) <= rank(best, snapshot):  # it never ranks worse
            best = polished
    placed = {a.pod for a in best.assignments}
    if not (maker.evictions or all(p.key in placed or p.key in hopeless for p in snapshot.pending)) and budget.take():
        augmented = maker.augment()
        best = augmented if rank(augmented, snapshot) <= rank(best, snapshot) else best
    return exact.refine(snapshot, maker.settings, best, maker.best_layout, rank, exact_plan)  # exact neighbourhoods
