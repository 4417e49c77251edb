"""The queue gate, live: each reconcile lifts the gates the rule (`core/queue_gate.py`) releases.

The webhook gates pods that ask for MIG profiles (`migctl.io/queue`); kube-scheduler ignores a gated pod. Each
reconcile, before the plan, the queue claims what free instances serve as they are (`core/queue_claims.py`), and
the plan is made with those pods bound (`claim`); a change that could destroy an instance a claimed pod may get
waits for the next reconcile (`defer`). Then, with the snapshot before the burst rule (the rule needs every gated
pod) and the plan:
* a pod the queue claimed, or that an instance of its profile serves now, first in kube-scheduler's queue order,
  is released and pinned to that instance's node;
* a pod the plan serves with a change that starts now (`STARTED`) waits for that node's taint: the worker that
  starts the change lifts it right after its taint write (`on_step`, the actuator's `tainted` steps), so the
  pinned pod can never bind to the node before migctl's taint keeps it off until the new instance exists;
* paused or dry run: every gated pod is released (a migctl that does not act holds nobody);
* a gated pod the snapshot does not hold (opted out of planning, a spec it cannot read) is released: no plan will
  ever serve it, and no pod may wait on a plan that cannot.
Which pods to lift is decided in the reconcile's one step (`reconcile/step.py`); this module only carries it
out. The controller lifts every migctl gate it finds whether `controller.queue_gate` is on or not (turning it off
releases everyone). A lift that fails (API error) is logged and decided again at the next reconcile; it never
stops the reconcile. Each lift gets a pod Event (`MigctlGateLifted`) and counts in `migctl_queue_gate_lifts`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable, Mapping
from typing import Protocol

from migctl.adapters.kube.calls import Stopped
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import Obj
from migctl.adapters.views import is_pod, pod_view
from migctl.controller import events as ev
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.core.queue_gate import STARTED, Lift
from migctl.wire.names import QUEUE_GATE

log = logging.getLogger("migctl.controller.gates")

TAINTED_STEPS = frozenset({"tainted", "in-place-tainted"})  # the actuator's steps right after its taint write


class GateApi(Protocol):
    def lift_gate(self, namespace: str, name: str, hostname: str | None = None) -> str: ...


def unplanned(objects: Iterable[Obj], known: Collection[str]) -> list[str]:
    """Pending pods that carry migctl's gate and are not in `known` (the snapshot's pods and the reserved ones)."""
    views = (pod_view(o) for o in objects if is_pod(o))
    return sorted(v.key for v in views if v.pending and v.gated and v.key not in known)


class Gates:
    """The lifting, and the `STARTED` lifts that wait for their node's taint (node -> lifts)."""

    def __init__(self, metrics: Metrics, events: EventSink) -> None:
        self.metrics, self.events = metrics, events
        self.kube: GateApi | None = None  # the leader's term-bound API (set when it starts leading)
        self.waiting: dict[str, tuple[list[Lift], str | None]] = {}  # node -> (lifts, its hostname label)
        self._lock = threading.Lock()

    def apply(self, lifts: Iterable[Lift], hostnames: Mapping[str, str | None], in_flight: Collection[str]) -> None:
        """Lift what the reconcile decided now; keep the `STARTED` lifts for their node's taint (`on_step`).
        `hostnames`: each node's hostname label, the pin's value."""
        later: dict[str, list[Lift]] = {}
        with self._lock:
            self.waiting = {n: w for n, w in self.waiting.items() if n in in_flight}  # a worker that never tainted
        for lift in lifts:
            if lift.why == STARTED and lift.node is not None:
                later.setdefault(lift.node, []).append(lift)
            elif not self._lift(lift, hostnames.get(lift.node) if lift.node else None):
                break
        with self._lock:
            self.waiting.update({n: (ls, hostnames.get(n)) for n, ls in later.items()})

    def on_step(self, node: str, step: str) -> None:
        """The actuator's step hook: right after the taint write of a change, lift the pods it starts for."""
        if step not in TAINTED_STEPS:
            return
        with self._lock:
            waiting, hostname = self.waiting.pop(node, ([], None))
        for lift in waiting:
            if not self._lift(lift, hostname):
                break

    def _lift(self, lift: Lift, hostname: str | None) -> bool:
        """One lift; False when the API refuses every write now (leadership lost, shutting down)."""
        kube = self.kube
        if kube is None:
            return False
        namespace, _, name = lift.pod.partition("/")
        if lift.node is not None and not hostname:
            log.info("pod %s: node %s has no hostname label; lifting its gate without a pin", lift.pod, lift.node)
            hostname = None
        try:
            outcome = kube.lift_gate(namespace, name, hostname if lift.node else None)
        except Stopped:
            return False
        except KubeError as e:
            log.warning("pod %s: could not lift the queue gate (%s); the next reconcile decides again", lift.pod, e)
            return True
        if outcome != "lifted":
            log.debug("pod %s: no queue gate to lift (%s)", lift.pod, outcome)
            return True
        pin = f"; pinned to node {lift.node}" if lift.node and hostname else ""
        log.info("pod %s: queue gate lifted: %s%s", lift.pod, lift.text, pin, extra={"node": lift.node or ""})
        self.metrics.gate_lifts.labels(str(lift.why)).inc()
        self.events.emit(ev.pod_ref(lift.pod), ev.GATE_LIFTED, f"queue gate {QUEUE_GATE} lifted: {lift.text}{pin}")
        return True
