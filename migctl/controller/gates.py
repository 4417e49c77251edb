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
The controller lifts every migctl gate it finds whether `controller.queue_gate` is on or not (turning it off
releases everyone). A lift that fails (API error) is logged and decided again at the next reconcile; it never
stops the reconcile. Each lift gets a pod Event (`MigctlGateLifted`) and counts in `migctl_queue_gate_lifts`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection, Iterable
from typing import Protocol

from migctl.adapters.kube.calls import Stopped
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import Obj
from migctl.adapters.pods import queue_gate_at
from migctl.controller import events as ev
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.controller.reconcile import Action, Start
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.queue_claims import NONE, claim, claimed, collisions
from migctl.core.queue_gate import CLAIMED, FREE, OVERDUE, STARTED, Lift, lifts, release_all
from migctl.wire.names import HOSTNAME, QUEUE_GATE

log = logging.getLogger("migctl.controller.gates")

RELEASED = "migctl is paused or in dry run: it holds nobody"
UNPLANNED = "migctl does not plan it (opted out, or its spec cannot be read)"
LABELS = {
    CLAIMED: "claimed", FREE: "free", STARTED: "started", OVERDUE: "overdue", RELEASED: "released",
    UNPLANNED: "unplanned",
}  # fmt: skip
TAINTED_STEPS = frozenset({"tainted", "in-place-tainted"})  # the actuator's steps right after its taint write


class GateApi(Protocol):
    def lift_gate(self, namespace: str, name: str, hostname: str | None = None) -> str: ...


def unplanned(objects: Iterable[Obj], known: Collection[str]) -> list[str]:
    """Pending pods that carry migctl's gate and are not in `known` (the snapshot's pods and the reserved ones)."""
    out = []
    for obj in objects:
        if obj.get("kind") != "Pod":
            continue
        spec = obj.get("spec") or {}
        if not spec.get("nodeName") and queue_gate_at(spec) is not None:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if key not in known:
                out.append(key)
    return sorted(out)


class Gates:
    """The lifting, and the `STARTED` lifts that wait for their node's taint (node -> lifts)."""

    def __init__(self, metrics: Metrics, events: EventSink, max_hold_s: float) -> None:
        self.metrics, self.events, self.max_hold_s = metrics, events, max_hold_s
        self.kube: GateApi | None = None  # the leader's term-bound API (set when it starts leading)
        self.waiting: dict[str, tuple[list[Lift], str | None]] = {}  # node -> (lifts, its hostname label)
        self.claims = NONE  # this reconcile's (`claim`)
        self._lock = threading.Lock()

    def claim(self, snapshot: Snapshot, on: bool) -> Snapshot:
        """The queue's claims of this reconcile (none unless `on`: the gate is on and migctl acts), and the
        snapshot with the claimed pods bound, which the plan is made on."""
        self.claims = claim(snapshot) if on else NONE
        return claimed(snapshot, self.claims)

    def defer(self, actions: list[Action], snapshot: Snapshot, plan: Plan) -> list[Action]:
        """`actions` less the starts whose change could destroy an instance a pod claimed now may get: they wait
        for the next reconcile (the lifts' pod events trigger it), which sees those pods bound."""
        wait = collisions(snapshot, plan, self.claims)
        for node in sorted(wait):
            log.info("node %s: change waits a reconcile for the pods released to its free instances", node)
        return [a for a in actions if not (isinstance(a, Start) and a.node in wait)]

    def reconcile(
        self,
        snapshot: Snapshot,
        plan: Plan,
        starting: Collection[str],
        now: float,
        release: bool,
        strays: Iterable[str],
        in_flight: Collection[str],
    ) -> list[Lift]:
        """Lift what the rule releases now; keep the `STARTED` lifts of `starting` for their node's taint.
        `release`: paused or dry run. `strays`: gated pods the snapshot does not hold (`unplanned`). Returns the
        lifts decided (the tests read them)."""
        decided = release_all(snapshot.pods, RELEASED) if release else lifts(
            snapshot, plan, starting, now, self.max_hold_s, self.claims
        )  # fmt: skip
        decided += [Lift(key, None, UNPLANNED) for key in strays]
        hostnames = {n.name: n.labels.get(HOSTNAME) for n in snapshot.nodes}
        later: dict[str, list[Lift]] = {}
        with self._lock:
            self.waiting = {n: w for n, w in self.waiting.items() if n in in_flight}  # a worker that never tainted
        for lift in decided:
            if lift.reason == STARTED and lift.node is not None:
                later.setdefault(lift.node, []).append(lift)
            elif not self._lift(lift, hostnames.get(lift.node) if lift.node else None):
                break
        with self._lock:
            self.waiting.update({n: (ls, hostnames.get(n)) for n, ls in later.items()})
        return decided

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
            log.info("pod %s: node %s has no %s label; lifting its gate without a pin", lift.pod, lift.node, HOSTNAME)
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
        log.info("pod %s: queue gate lifted: %s%s", lift.pod, lift.reason, pin, extra={"node": lift.node or ""})
        self.metrics.gate_lifts.labels(LABELS.get(lift.reason, "other")).inc()
        self.events.emit(ev.pod_ref(lift.pod), ev.GATE_LIFTED, f"queue gate {QUEUE_GATE} lifted: {lift.reason}{pin}")
        return True
