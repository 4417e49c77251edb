"""One reconcile's decisions, pure: from the snapshot, the nodes' own state, the settings and the clock to actions.

No API, no threads, no clock of its own (`now` is passed in), so the controller executes these actions against
the cluster and a simulator can execute them against its model. Two actuation paths, chosen per node:

* `mig-manager` (default): the GPU Operator's mig-manager applies a mig-parted config (actuator.py);
* `in-place`: the node is labelled `migctl.io/actuation=in-place` or matches `controller.in_place_node_selector`;
  migctl's node agent creates and destroys free instances itself (inplace.py).

An in-place node is refused (frozen for the planner, one Event) where something else would also change its MIG
instances: the GPU Operator's mig-manager (it re-applies its label's layout whenever its pod starts, and pauses
the node to do so) unless `nvidia.com/gpu.deploy.mig-manager=false`, and the components `in_place_conflicts`
names (HAMi's device plugin by default; a DRA driver's node label where an operator adds it): they destroy
instances they did not create.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migctl.config import ControllerSettings
from migctl.config.selector import LabelSelector
from migctl.controller.guards import BatchWindow, Candidate, Decision, NodeRecord, holds, select
from migctl.controller.nodestate import PHASE_ANNOTATIONS, Target, UnreadableError, abandoned, read_state
from migctl.core.forecast.estimate import burst_hold
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import NodePlan, Plan
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, IN_PLACE, TARGET

MIG_MANAGER = "mig-manager"


def actuation_path(labels: Mapping[str, str], selector: LabelSelector) -> str:
    """`in-place` for a node opted in by its label or the config's selector, else `mig-manager`."""
    return IN_PLACE if labels.get(ACTUATION) == IN_PLACE or selector.matches(labels) else MIG_MANAGER


def in_place_refusal(labels: Mapping[str, str], annotations: Mapping[str, str], settings: ControllerSettings) -> str:
    """Why migctl must not act in place on this node ("" when it may); the text says what to set."""
    deploy = labels.get(DEPLOY_MIG_MANAGER)
    if deploy != "false":
        return (
            f"refusing the in-place path: {DEPLOY_MIG_MANAGER}={deploy or '<unset>'}: the GPU Operator's mig-manager "
            "would re-apply its own layout when its pod starts; set the node label "
            f"{DEPLOY_MIG_MANAGER}=false (or remove {ACTUATION}={IN_PLACE} to use the mig-manager path)"
        )
    for term in settings.in_place_conflicts:
        key, has_value, value = term.partition("=")
        for where, found in (("label", labels), ("annotation", annotations)):
            if key in found and (not has_value or found[key] == value):
                return (
                    f"refusing the in-place path: node {where} {term} (controller.in_place_conflicts) says another "
                    "component manages this node's MIG instances (HAMi's device plugin, a DRA driver); it would "
                    f"destroy instances it did not create. Take the node off that component or remove {ACTUATION}"
                )
    return ""


@dataclass(frozen=True)
class NodeFacts:
    """What a reconcile needs of one Node object besides the snapshot."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    tainted: bool = False  # carries migctl's reconfiguring taint

    @staticmethod
    def of(node: Mapping[str, Any], taint_key: str) -> NodeFacts:
        meta = node.get("metadata") or {}
        taints = (node.get("spec") or {}).get("taints") or []
        return NodeFacts(str(meta.get("name")), dict(meta.get("labels") or {}), dict(meta.get("annotations") or {}),
                         any(t.get("key") == taint_key for t in taints))  # fmt: skip

    @property
    def in_flight(self) -> bool:
        """A change is under way (phase annotations), or migctl's taint is left on the node."""
        return self.tainted or any(self.annotations.get(k) for k in PHASE_ANNOTATIONS)


def reserved_pods(facts: Iterable[NodeFacts]) -> set[str]:
    """The pending pods in-flight changes are for: left out of planning, so nobody plans them twice."""
    out: set[str] = set()
    for f in facts:
        if f.annotations.get(TARGET):
            with contextlib.suppress(UnreadableError):
                out.update(Target.from_json(str(f.annotations[TARGET])).pods)
    return out


def resumptions(
    facts: Iterable[NodeFacts], busy: Collection[str], not_before: Mapping[str, float], now: float,
    settings: ControllerSettings,
) -> list[tuple[str, str]]:  # fmt: skip
    """Nodes left mid-way that no worker drives: (node, "") to drive it on, or (node, why) to release it (a
    dry-run controller releases only what no live controller can still be driving). `not_before`: the backoff
    of resumes that failed."""
    out = []
    for f in facts:
        if f.name in busy or not f.in_flight or not_before.get(f.name, 0.0) > now:
            continue
        if not settings.dry_run:
            out.append((f.name, ""))
        elif abandoned(read_state(f.annotations, now), now, settings):
            out.append((f.name, "released: abandoned mid-phase, and this controller is in dry run"))
    return out


@dataclass(frozen=True)
class Start:
    """Start changing `node` along `path` to `target`."""

    node: str
    path: str
    target: Target
    reason: str


@dataclass(frozen=True)
class Hold:
    """A planned change that must not start now, and why (logged, an Event on the node unless paused)."""

    node: str
    path: str
    reason: str


Action = Start | Hold


def paths(facts: Collection[NodeFacts], settings: ControllerSettings) -> dict[str, str]:
    selector = settings.in_place_selector
    return {f.name: actuation_path(f.labels, selector) for f in facts}


def refusals(facts: Collection[NodeFacts], settings: ControllerSettings) -> dict[str, str]:
    """In-place nodes migctl must not act on, with why: they are frozen for the planner."""
    selector = settings.in_place_selector
    out = {}
    for f in facts:
        if actuation_path(f.labels, selector) == IN_PLACE:
            why = in_place_refusal(f.labels, f.annotations, settings)
            if why:
                out[f.name] = why
    return out


def frozen_nodes(
    facts: Collection[NodeFacts], now: float, settings: ControllerSettings, in_flight: Collection[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """(refused in-place nodes, every node the planner must leave alone now) with why: refusals and guard rails."""
    refused = refusals(facts, settings)
    records = [NodeRecord.from_annotations(f.name, f.annotations) for f in facts]
    in_place = {n for n, path in paths(facts, settings).items() if path == IN_PLACE}
    held = {n: f"guard rail: {why}" for n, why in holds(records, now, settings, in_flight, in_place).items()}
    return refused, {**refused, **held}


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
    planning until it has landed; the simulator applies the same rule at the same point."""
    burst = burst_hold(snapshot, now)
    if burst is None:
        return snapshot, None
    pods = tuple(p for p in snapshot.pods if p.key not in burst.held)
    return dataclasses.replace(snapshot, pods=pods), burst.until


class Windows:
    """The batching windows, one per path (an in-place node has its own, `in_place_batch_*`): a plan's changes on
    a path start once that path's pending demand has settled. The controller and the simulator both hold one."""

    def __init__(self, settings: ControllerSettings) -> None:
        own = settings.in_place_rails()
        self.by_path = {
            MIG_MANAGER: BatchWindow(settings.batch_stable_s, settings.batch_max_s),
            IN_PLACE: BatchWindow(own.batch_stable_s, own.batch_max_s),
        }

    def observe(
        self, plan: Plan, route: Mapping[str, str], demand: frozenset[str], now: float
    ) -> tuple[set[str], float | None, bool]:
        """(the paths whose changes may start now, when to look again for the others (None: no need), whether
        the plan is final enough to report the pods it leaves out). Every window sees every reconcile's demand."""
        observed = {path: w.observe(demand, now) for path, w in self.by_path.items()}
        changing = {route.get(n.name, MIG_MANAGER) for n in plan.nodes if n.changed}
        ready = {path for path in changing if observed[path][0]}
        dues = [due for path in changing - ready if (due := observed[path][1]) is not None]
        report = bool(ready) or (not changing and observed[MIG_MANAGER][0])
        return ready, (min(dues) if dues else None), report


def _in_place_problem(node_plan: NodePlan, evictions: tuple[str, ...]) -> str:
    """What the in-place path cannot do (yet) of a planned node change."""
    if evictions:
        return "the in-place path does not evict: the plan's evictions wait for a plan without them"
    modes = [g.index for g in node_plan.gpus if g.changed and g.current.mig_enabled != g.target.mig_enabled]
    if modes:
        return f"the in-place path never changes MIG mode (GPU {', '.join(map(str, modes))})"
    return ""


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
    previous_configs: Mapping[str, str | None],
) -> list[Action]:
    """One action per node the plan changes, in plan order: Start (with its target) or Hold (with why).

    Each path has its own concurrency limit (`max_concurrent_nodes`, `in_place_max_concurrent_nodes`); the
    eviction budget is shared. The stock path's decisions are exactly `guards.select`'s over its own nodes."""
    route = paths(facts.values(), settings)
    changed = [n for n in plan.nodes if n.changed]
    evictions: dict[str, list[str]] = {}
    for e in plan.evictions:
        evictions.setdefault(e.node, []).append(e.pod)
    by_path: dict[str, list[NodePlan]] = {MIG_MANAGER: [], IN_PLACE: []}
    for n in changed:
        by_path[route.get(n.name, MIG_MANAGER)].append(n)
    decided: dict[str, Decision] = {}
    budget_used = evictions_last_hour
    limits = ((MIG_MANAGER, settings.max_concurrent_nodes), (IN_PLACE, settings.in_place_max_concurrent_nodes))
    for path, limit in limits:
        nodes = []
        for n in by_path[path]:
            why = _in_place_problem(n, tuple(evictions.get(n.name, ()))) if path == IN_PLACE else ""
            if why:
                decided[n.name] = Decision(n.name, False, why)
            else:
                nodes.append(n)
        active = sum(1 for n in in_flight if route.get(n, MIG_MANAGER) == path)
        limited = settings.model_copy(update={"max_concurrent_nodes": limit})
        for d in select(
            [Candidate(n.name, tuple(evictions.get(n.name, ()))) for n in nodes],
            active=active,
            evictions_last_hour=budget_used,
            settings=limited,
            paused=paused,
            protected_pods=protected_pods,
        ):
            renamed = path == IN_PLACE and not d.start and d.reason.startswith("max_concurrent_nodes")
            decided[d.node] = Decision(d.node, False, "in_place_" + d.reason) if renamed else d  # its own name
            if d.start:
                budget_used += len(evictions.get(d.node, ()))
    by_name = {n.name: n for n in snapshot.nodes}
    out: list[Action] = []
    for node_plan in changed:
        d, path = decided[node_plan.name], route.get(node_plan.name, MIG_MANAGER)
        if not d.start:
            out.append(Hold(d.node, path, d.reason))
            continue
        evict = tuple(sorted(evictions.get(d.node, ())))
        model = by_name.get(d.node)
        keep = tuple(sorted(k for k, _, _ in (model.gpu_pods if model else ()) if k not in evict))
        target = Target(
            plan_id=plan_id,
            config=node_plan.config_name or "",
            gpus=dict(node_plan.target),
            evict=evict,
            keep=keep,
            pods=tuple(sorted(a.pod for a in plan.assignments if a.node == d.node)),
            previous_config=previous_configs.get(d.node),
            started=now,
        )
        out.append(Start(d.node, path, target, d.reason))
    return out
