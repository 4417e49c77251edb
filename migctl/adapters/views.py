"""Typed views of the objects the components read besides the snapshot: a Node's metadata and taints, a Pod's
identity and state (the Lease's is `lease.py`). Each rule of reading them lives here once.

Why views and not the raw dicts: "is this pod pending", "the pod's key", "has this node migctl's taint" and
"is this Lease fresh" were each written in several modules with different defaults. Nothing outside `adapters/`
indexes a Kubernetes object; the components read these.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migctl.adapters.fields import mapping
from migctl.adapters.pods import queue_gate_at


def as_mapping(value: Any) -> Mapping[str, Any]:
    """Lenient: what is not an object reads as empty (the strict readers are `fields.py`'s, for the snapshot)."""
    return value if isinstance(value, Mapping) else {}


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return as_mapping(obj.get("metadata"))


def _strings(value: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in as_mapping(value).items()}


@dataclass(frozen=True)
class NodeView:
    name: str
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taint_keys: frozenset[str] = frozenset()
    deleting: bool = False

    def tainted(self, key: str) -> bool:
        return key in self.taint_keys


def node_view(obj: Mapping[str, Any]) -> NodeView:
    meta = _meta(obj)
    taints = as_mapping(obj.get("spec")).get("taints")
    keys = frozenset(str(t.get("key")) for t in taints if isinstance(t, Mapping)) if isinstance(taints, list) else ()
    return NodeView(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        taint_keys=frozenset(keys),
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class PodView:
    """A pod's identity and state. `namespace` defaults to `default`, as the API server does."""

    namespace: str
    name: str
    uid: str = ""
    node: str = ""  # spec.nodeName; "" while not bound
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    gated: bool = False  # carries migctl's queue gate
    deleting: bool = False
    scheduler_name: str = "default-scheduler"
    gates_readable: bool = True  # spec.schedulingGates absent or a list
    generate_name: str = ""  # metadata.generateName (a pod at admission may have no name yet)
    phase: str = "Pending"  # status.phase

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        """Not bound to a node yet: the one reading of "pending" for everything but the planner's own."""
        return not self.node

    @property
    def finished(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    def opted_out(self, key: str, namespace_labels: Mapping[str, Mapping[str, str]]) -> bool:
        """Left out of planning and eviction: the pod annotated, or its namespace labelled, `key=true`."""
        return self.annotations.get(key) == "true" or namespace_labels.get(self.namespace, {}).get(key) == "true"


def pod_view(obj: Mapping[str, Any]) -> PodView:
    meta, spec = _meta(obj), as_mapping(obj.get("spec"))
    gated = queue_gate_at(spec) is not None
    return PodView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        node=str(spec.get("nodeName") or ""),
        labels=_strings(meta.get("labels")),
        annotations=_strings(meta.get("annotations")),
        gated=gated,
        deleting=bool(meta.get("deletionTimestamp")),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        gates_readable=spec.get("schedulingGates") is None or isinstance(spec.get("schedulingGates"), list),
        generate_name=str(meta.get("generateName") or ""),
        phase=str(as_mapping(obj.get("status")).get("phase") or "Pending"),
    )


def allocatable(node: Mapping[str, Any]) -> Mapping[str, Any]:
    """A node's allocatable (else its capacity) as written, strictly: TypeError naming the field."""
    status = mapping(node.get("status"), "status")
    return mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")


def is_pod(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") == "Pod"
