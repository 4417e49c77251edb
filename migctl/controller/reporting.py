"""What a reconcile tells people: plan metrics, and Events on pods and objects (once per change of message).

Split from loop.py so the loop keeps only watching, leadership and executing.
"""

from __future__ import annotations

import logging
import time

from migctl.config import ControllerSettings
from migctl.controller import events as ev
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.reconcile.decide import Start
from migctl.wire.names import IN_PLACE

log = logging.getLogger("migctl.controller.loop")
MAX_NOTES = 20000  # pods remembered; past it, the memory starts over (a repeated Event, never a lost one)


class Reporter:
    """Metrics of the last plan, and Events deduplicated per object and message."""

    def __init__(self, metrics: Metrics, events: EventSink, settings: ControllerSettings) -> None:
        self.metrics, self.events, self.settings = metrics, events, settings
        self._pod_notes: dict[str, str] = {}
        self._object_notes: dict[tuple[str, str], str] = {}
        self._node_notes: dict[str, str] = {}

    def planned(self, snapshot: Snapshot, result: Plan, seconds: float) -> None:
        """Everything a new plan updates: planning metrics, invalid objects, pending demand and stranded memory."""
        self.metrics.plan_seconds.observe(seconds)
        self.metrics.plans.inc()
        self.metrics.last_plan.set(time.time())
        if result.budget_exhausted:
            self.metrics.budget_exhausted.inc()
            log.warning("plan stopped at planner.work_budget (%d work units): best plan so far", result.work_units)
        self.invalid(snapshot)
        self.publish(snapshot, result)

    def publish(self, snapshot: Snapshot, result: Plan) -> None:
        m = self.metrics
        m.pending_pods.set(len(snapshot.pending))
        by_pod_model: dict[str, str] = {}
        node_model = {n.name: (n.model.id if n.model else "card") for n in snapshot.nodes}
        for a in result.assignments:
            by_pod_model[a.pod] = node_model.get(a.node, "unknown")
        demand: dict[str, float] = {}
        need: dict[str, float] = {a.pod: a.instance_mib for a in result.assignments}
        for pod in snapshot.pending:
            model = by_pod_model.get(pod.key, "unplaced")
            mib = need.get(pod.key) or sum(d.vram_mib * d.count for d in pod.gpu)
            demand[model] = demand.get(model, 0) + mib
        m.pending_demand.clear()
        for model, mib in demand.items():
            m.pending_demand.labels(model).set(mib)
        m.stranded.set(result.summary.stranded_mib_before)
        m.stranded_node.clear()
        for n in result.nodes:
            m.stranded_node.labels(n.name).set(sum(g.unusable_mib_before for g in n.gpus))

    def invalid(self, snapshot: Snapshot) -> None:
        """Count the objects the snapshot could not use, and put a warning Event on each (once per message)."""
        kinds = {"Pod": len(snapshot.rejected), "Node": 0, "ConfigMap": 0}
        notes: dict[tuple[str, str], str] = {("Pod", k): f"not planned: {why}" for k, why in snapshot.rejected}
        for kind, name, message in snapshot.problems:
            if (kind, name) not in notes:
                kinds[kind] = kinds.get(kind, 0) + 1
            notes[(kind, name)] = message
        for kind, n in kinds.items():
            self.metrics.rejected.labels(kind).set(n)
        for (kind, name), message in notes.items():
            if self._object_notes.get((kind, name)) != message:
                self.events.emit(ev.object_ref(kind, name), ev.INVALID, message, warning=True)
        self._object_notes = notes

    def refused(self, reasons: dict[str, str]) -> None:
        """A warning Event on each in-place node migctl refuses to act on, once per message."""
        for node, why in reasons.items():
            if self._node_notes.get(node) != why:
                self.events.emit(ev.node_ref(node), ev.IN_PLACE_REFUSED, why, warning=True)
        self._node_notes = dict(reasons)

    def would_start(self, start: Start, result: Plan, plan_id: str) -> None:
        """Dry run: the Event that says what this change would do."""
        node_plan = next(n for n in result.nodes if n.name == start.node)
        layout = ", ".join(f"GPU {g.index}: {g.current} -> {g.target}" for g in node_plan.gpus if g.changed)
        how = "in place (node agent)" if start.path.name == IN_PLACE else f"as {start.target.config}"
        evict = start.target.evict
        self.events.emit(
            ev.node_ref(start.node),
            ev.WOULD_RECONFIGURE,
            f"dry run, plan {plan_id}: would reconfigure ({layout}) {how}"
            + (f", evicting {', '.join(evict)}" if evict else ""),
        )

    def pod_events(self, result: Plan, plan_id: str, node: str, starting: bool) -> None:
        """One Event per pod per change of what migctl says about it (not one per reconcile)."""
        for a in result.assignments:
            if a.node != node:
                continue
            where = f"{a.profile} on node {a.node}" + (f" GPU {a.gpu}" if a.gpu is not None else "")
            verb = "would place" if self.settings.dry_run else ("planned" if starting else "planned (waiting)")
            self.note(a.pod, ev.PLANNED, f"{verb}: {where} (plan {plan_id})")

    def note(self, pod: str, reason: str, message: str) -> None:
        if self._pod_notes.get(pod) == message:
            return
        self._pod_notes[pod] = message
        if len(self._pod_notes) > MAX_NOTES:
            self._pod_notes.clear()
        self.events.emit(ev.pod_ref(pod), reason, message, warning=reason == ev.NOT_PLANNED)
