"""What every actuator step shares: the API, the stop flag, the step hook, and the one write that moves a phase.

Split from actuator.py (the phases) and rollback.py (the ways out) so each stays small; see actuator.py's
docstring for the state machine itself.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migctl.adapters.kube.calls import Stopped
from migctl.adapters.kube.interface import ControllerApi, Obj
from migctl.adapters.views import as_mapping, node_view
from migctl.config import Config
from migctl.controller import events as ev
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.nodestate import PHASE_ANNOTATIONS, Target
from migctl.wire.names import LAST_ATTEMPT, MIG_CONFIG, PHASE, PHASE_SINCE, PLAN_ID, TARGET

log = logging.getLogger("migctl.controller.actuator")
Hook = Callable[[str, str], None]  # (node or ConfigMap name, step): tests and failpoints stop the process there


class NodeChanged(Exception):  # noqa: N818 - a signal
    """The node no longer looks like the plan assumed (or another actor holds it): do not start."""


def annotations_of(node: Obj) -> dict[str, str]:
    return dict(node_view(node).annotations)


def labels_of(node: Obj) -> dict[str, str]:
    return dict(node_view(node).labels)


def taints_of(node: Obj) -> list[Obj]:
    taints = as_mapping(node.get("spec")).get("taints")
    return [dict(t) for t in taints if isinstance(t, Mapping)] if isinstance(taints, list) else []


@dataclass
class ActuatorBase:
    """The shared state of one actuator (one instance serves many nodes, one worker thread each)."""

    kube: ControllerApi
    config: Config
    configmaps: ConfigMapWriter
    events: EventSink
    metrics: Metrics
    ledger: EvictionLedger
    stop: threading.Event
    hook: Hook | None = None
    clock: Callable[[], float] = time.time
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)  # (node, outcome, reason)

    @property
    def taint_key(self) -> str:
        return self.config.planner.reconfigure_taint

    @property
    def settings(self) -> Any:
        return self.config.controller

    def _tainted(self, node: Obj) -> bool:
        return any(t.get("key") == self.taint_key for t in taints_of(node))

    def _begin(self, name: str, target: Target, expect: Callable[[Obj], bool], phase: str, taint: bool = True) -> None:
        """One conditional write starts a change on any path: the taint (unless `taint` is False: the DRA path
        fences devices instead) and the phase annotations (`phase`, its start, the target), or NodeChanged when the
        node is already changing or no longer as planned."""

        def mutate(node: Obj) -> Obj | None:
            ann = annotations_of(node)
            if ann.get(PLAN_ID) == target.plan_id:
                return None  # our own earlier write went through (its response was lost)
            if ann.get(PHASE) or self._tainted(node):
                raise NodeChanged("already being reconfigured")
            if not expect(node):
                raise NodeChanged("changed since planning")
            now = f"{self.clock():.3f}"
            annotations = dict.fromkeys(PHASE_ANNOTATIONS)  # clears leftovers of an older change
            annotations.update({PLAN_ID: target.plan_id, PHASE: phase, PHASE_SINCE: now,
                                TARGET: target.to_json(), LAST_ATTEMPT: now})  # fmt: skip
            if not taint:
                return {"metadata": {"annotations": annotations}}
            taints = [*taints_of(node), {"key": self.taint_key, "value": "true", "effect": "NoSchedule"}]
            return {"metadata": {"annotations": annotations}, "spec": {"taints": taints}}

        self.kube.update_node(name, mutate, what="taint" if taint else "begin")
        self.metrics.started.inc()

    def _step(self, node: str, step: str) -> None:
        if self.stop.is_set():
            raise Stopped(f"stopping before {step} on {node}")
        if self.hook is not None:
            self.hook(node, step)

    def _sleep(self) -> None:
        if self.stop.wait(self.settings.poll_interval_s):
            raise Stopped("stopping while waiting")

    def _log(self, target: Target | None, node: str, msg: str, *args: object, level: int = logging.INFO) -> None:
        log.log(level, msg, *args, extra={"plan_id": target.plan_id if target else "", "node": node})

    def _owned(self, node: Obj, target: Target) -> None:
        plan = annotations_of(node).get(PLAN_ID)
        if plan != target.plan_id:
            raise NodeChanged(f"node is held by plan {plan!r}, not {target.plan_id}")

    def _label_moved(self, node: Obj, target: Target) -> bool:
        """The config label is no longer the one before the change (migctl set or toggled it)."""
        return labels_of(node).get(MIG_CONFIG) != target.previous_config

    def _set_phase(self, name: str, target: Target, phase: str, extra: Obj | None = None, force: bool = False) -> Obj:
        """Write the phase (and `extra` metadata) if it is not already there; `force` rewrites it anyway (a
        phase-since that could not be read). The Event is sent only when this call wrote."""
        wrote: list[bool] = []

        def mutate(node: Obj) -> Obj | None:
            wrote.clear()
            self._owned(node, target)
            if annotations_of(node).get(PHASE) == phase and not force:
                return None  # already there (a retried write whose response was lost)
            patch: Obj = {"metadata": {"annotations": {PHASE: phase, PHASE_SINCE: f"{self.clock():.3f}"}}}
            for k, v in (extra or {}).items():
                patch["metadata"].setdefault(k, {}).update(v)
            wrote.append(True)
            return patch

        node = self.kube.update_node(name, mutate, what=f"phase {phase}")
        if wrote:
            self.events.emit(ev.node_ref(name), ev.PHASE, f"plan {target.plan_id}: phase {phase}")
            self._log(target, name, "phase %s", phase)
        return node
