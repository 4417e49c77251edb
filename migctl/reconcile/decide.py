"""One reconcile's decisions, pure: from the snapshot, the nodes' own state, the settings and the clock to actions.

No API, no threads, no clock of its own (`now` is passed in): `step.py` sequences these for the controller and
the simulator alike, and each executes the actions against its own world. Which path a node takes, with its
guard rails and refusals, is `paths.py`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from migctl.config import ControllerSettings
from migctl.core.forecast.estimate import burst_hold
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import NodePlan, Plan
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.guards import BatchWindow, Candidate, Decision, holds, select
from migctl.reconcile.nodestate import Target
from migctl.reconcile.paths import PATHS, STOCK, Path, path_of
from migctl.reconcile.reasons import Reason
from migctl.wire.names import MIG_CONFIG


@dataclass(frozen=True)
class Start:
    """Start changing `node` along `path` to `target`."""

    node: str
    path: Path
    target: Target
    reason: Reason


@dataclass(frozen=True)
class Hold:
    """A planned change that must not start now, and why (logged, an Event on the node unless paused)."""

    node: str
    path: Path
    reason: Reason


Action = Start | Hold


def routes(facts: Collection[NodeFacts], settings: ControllerSettings) -> dict[str, Path]:
    selector = settings.in_place_selector
    return {f.name: path_of(f.labels, selector, f.dra) for f in facts}


def refusals(facts: Collection[NodeFacts], settings: ControllerSettings) -> dict[str, Reason]:
    """Nodes whose path must not act on them, with why: they are frozen for the planner."""
    out = {}
    for f in facts:
        why = path_of(f.labels, settings.in_place_selector, f.dra).refusal(f.labels, f.annotations, settings)
        if why is not None:
            out[f.name] = why
    return out


def frozen_nodes(
    facts: Collection[NodeFacts], now: float, settings: ControllerSettings, in_flight: Collection[str]
) -> tuple[dict[str, Reason], dict[str, str]]:
    """(refused nodes, every node the planner must leave alone now, with why): refusals and guard rails."""
    refused = refusals(facts, settings)
    route = routes(facts, settings)
    rails = {name: path.rails(settings) for name, path in route.items()}
    held = holds([f.record for f in facts], now, lambda n: rails[n], in_flight)
    return refused, {
        **{n: r.text for n, r in refused.items()},
        **{n: f"guard rail: {why.text}" for n, why in held.items()},
    }


def freeze(snapshot: Snapshot, reasons: Mapping[str, str]) -> Snapshot:
    """The snapshot with these nodes frozen (a reason already there wins): the planner plans around them."""
    if not reasons:
        return snapshot
    nodes = tuple(
        dataclasses.replace(n, frozen_reason=n.frozen_reason or reasons[n.name]) if n.name in reasons else n
        for n in snapshot.nodes
    )
    return dataclasses.replace(snapshot, nodes=nodes)


def hold_burst(snapshot: Snapshot, now: float) -> tuple[Snapshot, float | None]:
    """The snapshot to plan on, and when to look again (None: no burst). While a burst of pods is still arriving
    (`core/forecast/estimate.burst_hold`), its pending pods that would waste much of their instance are left out of
    planning until it has landed. `now`: seconds since the epoch, as the pods' creation times count."""
    burst = burst_hold(snapshot, now)
    if burst is None:
        return snapshot, None
    pods = tuple(p for p in snapshot.pods if p.key not in burst.held)
    return dataclasses.replace(snapshot, pods=pods), burst.until


class Windows:
    """The batching windows, one per path (each path's own `batch_*` rails): a plan's changes on a path start once
    that path's pending demand has settled. The controller and the simulator each hold one."""

    def __init__(self, settings: ControllerSettings) -> None:
        self.by_path = {
            name: BatchWindow(rails.batch_stable_s, rails.batch_max_s)
            for name, rails in ((p.name, p.rails(settings)) for p in PATHS.values())
        }

    def observe(
        self, plan: Plan, route: Mapping[str, Path], demand: frozenset[str], now: float
    ) -> tuple[frozenset[str], float | None, bool]:
        """(the paths whose changes may start now, when to look again for the others (None: no need), whether
        the plan is final enough to report the pods it leaves out). Every window sees every reconcile's demand."""
        observed = {path: w.observe(demand, now) for path, w in self.by_path.items()}
        changing = {path.name for n in plan.nodes if n.changed and (path := route.get(n.name, STOCK)).actuates}
        ready = frozenset(path for path in changing if observed[path][0])
        dues = [due for path in changing - ready if (due := observed[path][1]) is not None]
        report = bool(ready) or (not changing and observed[STOCK.name][0])
        return ready, (min(dues) if dues else None), report


def decide(
    plan: Plan,
    plan_id: str,
    snapshot: Snapshot,
    facts: Mapping[str, NodeFacts],
    settings: ControllerSettings,
    now: float,
    *,
    in_flight: Collection[str],
    evictions_last_hour: int,
    paused: bool,
    protected_pods: Collection[str],
) -> list[Action]:
    """One action per node the plan changes, in plan order: Start (with its target) or Hold (with why).

    Each path has its own guard rails (its concurrency limit among them); the eviction budget is shared, and
    spent in the order of `PATHS`. A path refuses what it cannot carry out (`Path.cannot`)."""
    route = routes(facts.values(), settings)
    changed = [n for n in plan.nodes if n.changed]
    evictions: dict[str, list[str]] = {}
    for e in plan.evictions:
        evictions.setdefault(e.node, []).append(e.pod)
    changed = [n for n in changed if route.get(n.name, STOCK).actuates]  # elsewhere the plan needs no start
    by_path: dict[str, list[NodePlan]] = {name: [] for name in PATHS}
    for n in changed:
        by_path[route.get(n.name, STOCK).name].append(n)
    decided: dict[str, Decision] = {}
    budget_used = evictions_last_hour
    for path in PATHS.values():
        nodes = []
        for n in by_path[path.name]:
            why = path.cannot(n, tuple(evictions.get(n.name, ())))
            if why is not None:
                decided[n.name] = Decision(n.name, why)
            else:
                nodes.append(n)
        active = sum(1 for n in in_flight if route.get(n, STOCK) is path)
        for d in select(
            [Candidate(n.name, tuple(evictions.get(n.name, ()))) for n in nodes],
            active=active,
            rails=path.rails(settings),
            evictions_left=settings.max_evictions_per_hour - budget_used,
            max_evictions_per_hour=settings.max_evictions_per_hour,
            paused=paused,
            dry_run=settings.dry_run,
            protected_pods=protected_pods,
        ):
            decided[d.node] = d
            if d.start:
                budget_used += len(evictions.get(d.node, ()))
    by_name = {n.name: n for n in snapshot.nodes}
    out: list[Action] = []
    for node_plan in changed:
        d, path = decided[node_plan.name], route.get(node_plan.name, STOCK)
        if not d.start:
            out.append(Hold(d.node, path, d.reason))
            continue
        evict = tuple(sorted(evictions.get(d.node, ())))
        model = by_name.get(d.node)
        keep = tuple(sorted(k for k, _, _ in (model.gpu_pods if model else ()) if k not in evict))
        node_facts = facts.get(d.node)
        target = Target(
            plan_id=plan_id,
            config=node_plan.config_name or "",
            gpus=dict(node_plan.target),
            evict=evict,
            keep=keep,
            pods=tuple(sorted(a.pod for a in plan.assignments if a.node == d.node)),
            previous_config=node_facts.labels.get(MIG_CONFIG) if node_facts is not None else None,
            started=now,
        )
        out.append(Start(d.node, path, target, d.reason))
    return out
