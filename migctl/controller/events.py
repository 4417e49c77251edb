"""Kubernetes Events (core/v1) on nodes and pods, so `kubectl describe` shows what migctl did and why.

Best effort: a failed Event is logged, never fatal. Events are the one write dry-run still makes (they say what
migctl would do). Node Events go to the `default` namespace, as the kubelet's do.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable

from migctl.adapters.events import event_body
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import EventApi, Obj

log = logging.getLogger(__name__)
COMPONENT = "migctl"

# Reasons (docs/operations.md lists them)
PLANNED = "MigctlPlanned"
NOT_PLANNED = "MigctlNotPlanned"
WOULD_RECONFIGURE = "MigctlWouldReconfigure"
HELD = "MigctlHeld"
RECONFIGURING = "MigctlReconfiguring"
PHASE = "MigctlPhase"
EVICTED = "MigctlEvicted"
RECONFIGURED = "MigctlReconfigured"
ROLLED_BACK = "MigctlRolledBack"
NEEDS_ATTENTION = "MigctlNeedsAttention"
IN_PLACE_REFUSED = "MigctlInPlaceRefused"  # an in-place node where mig-manager or another MIG manager runs
GATE_LIFTED = "MigctlGateLifted"  # the queue gate lifted: why, and the node the pod is pinned to
INVALID = "MigctlInvalid"  # an object migctl cannot read: which field, which value, what was expected


def object_ref(kind: str, name: str) -> Obj:
    """A reference to a Pod (`ns/name`), Node or ConfigMap (`ns/name`) for an Event."""
    if kind == "Pod":
        return pod_ref(name)
    if kind == "Node":
        return node_ref(name)
    namespace, _, short = name.partition("/")
    return {"kind": kind, "name": short, "namespace": namespace, "apiVersion": "v1"}


def node_ref(name: str, uid: str | None = None) -> Obj:
    return {"kind": "Node", "name": name, "uid": uid or name, "apiVersion": "v1"}


def pod_ref(key: str, uid: str | None = None) -> Obj:
    namespace, _, name = key.partition("/")
    ref: Obj = {"kind": "Pod", "name": name, "namespace": namespace, "apiVersion": "v1"}
    if uid:
        ref["uid"] = uid
    return ref


class EventSink:
    """Writes Events; `sent` keeps the last few for tests and debugging."""

    def __init__(
        self, kube: EventApi, instance: str | None = None, pod_uid: Callable[[str], str | None] | None = None
    ) -> None:
        """`pod_uid(key)`: the uid of a pod by `namespace/name` (the controller's watched pods). `kubectl describe
        pod` selects Events by involvedObject uid, so a pod Event without one is never shown there."""
        self.kube = kube
        self.instance = instance or socket.gethostname()
        self.sent: list[tuple[str, str, str]] = []  # (object, reason, message)
        self.pod_uid = pod_uid or (lambda key: None)

    def emit(self, ref: Obj, reason: str, message: str, warning: bool = False) -> None:
        if ref["kind"] == "Pod" and not ref.get("uid"):
            uid = self.pod_uid(f"{ref.get('namespace')}/{ref['name']}")
            ref = {**ref, "uid": uid} if uid else ref
        namespace = ref.get("namespace") or "default"
        body = event_body(ref, reason, message, COMPONENT, self.instance, warning)
        what = f"{ref['kind']} {namespace + '/' if ref['kind'] == 'Pod' else ''}{ref['name']}"
        self.sent.append((what, reason, message))
        del self.sent[:-500]
        try:
            self.kube.create_event(namespace, body)
        except KubeError as e:
            log.warning("could not record event %s on %s: %s", reason, what, e)
