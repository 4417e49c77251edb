"""Incremental conversion: the controller converts only the objects that changed since its last snapshot.

The API server gives every object a `uid` and a `resourceVersion` that changes with every write, so the pair
names one immutable version of an object. A pod's conversion depends on that version and the planner settings
only; a node's also on the pods bound to it (their usage) and on the mig-parted config its label names. The
memo keeps each conversion (the model, or the error it raised, and the warnings it gave) under exactly those
inputs, and drops what the last snapshot did not use, so a reconcile after one pod event converts one pod (and
the node it is bound to). Objects without a uid and resourceVersion (snapshot files) are converted every time.
The result is the same `Snapshot` a fresh conversion gives (tests/unit/adapters/test_incremental_snapshot.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from migctl.core.model.cluster import Node, Pod

Version = tuple[str, str]  # (uid, resourceVersion)


def version_of(obj: Mapping[str, Any]) -> Version | None:
    """The object's (uid, resourceVersion), or None when it lacks either (then it is never memoised)."""
    meta = obj.get("metadata")
    if type(meta) is not dict and not isinstance(meta, Mapping):
        return None
    uid, rv = meta.get("uid"), meta.get("resourceVersion")
    return (uid, rv) if isinstance(uid, str) and isinstance(rv, str) and uid and rv else None


class PodOutcome(NamedTuple):
    """`pod_from_object`'s result for one object version: the pod and its notes, or the error it raised (a
    named tuple: a snapshot makes one per pod)."""

    pod: Pod | None
    notes: tuple[str, ...]
    error: Exception | None = None
    doubts: tuple[tuple[str, str], ...] = ()  # a bound pod's unreadable values of resources that may hold a GPU


@dataclass(frozen=True)
class NodeOutcome:
    """`_node`'s result under its inputs: the node (None: skipped) and the warnings and problems it added."""

    inputs: tuple[Any, ...]
    mig_parted: object  # compared by identity: the parse is cached per text, so one text is one object
    node: Node | None
    warnings: tuple[str, ...]
    problems: tuple[tuple[str, str, str], ...]


@dataclass
class ConversionMemo:
    """What the last snapshot converted, for the next one. One per controller; not thread-safe (the
    controller reconciles one at a time). `converted` counts the conversions the last snapshot really did."""

    context: tuple[Any, ...] = ()
    pods: dict[Version, PodOutcome] = field(default_factory=dict)
    nodes: dict[Version, NodeOutcome] = field(default_factory=dict)
    converted: dict[str, int] = field(default_factory=dict)
    _used_pods: dict[Version, PodOutcome] = field(default_factory=dict)
    _used_nodes: dict[Version, NodeOutcome] = field(default_factory=dict)

    def begin(self, context: tuple[Any, ...]) -> None:
        """Start a snapshot; a different catalog or settings (`context`) invalidates everything."""
        if context != self.context:
            self.context, self.pods, self.nodes = context, {}, {}
        self._used_pods, self._used_nodes = {}, {}
        self.converted = {"Pod": 0, "Node": 0}

    def end(self) -> None:
        """Keep only what this snapshot used: deleted objects and old versions are forgotten."""
        self.pods, self.nodes = self._used_pods, self._used_nodes
        self._used_pods, self._used_nodes = {}, {}

    def pod(self, obj: Mapping[str, Any], convert: Callable[[], PodOutcome]) -> PodOutcome:
        version = version_of(obj)
        out = self.pods.get(version) if version else None
        if out is None:
            out = convert()
            self.converted["Pod"] = self.converted.get("Pod", 0) + 1
        if version:
            self._used_pods[version] = out
        return out

    def node(
        self,
        obj: Mapping[str, Any],
        inputs: tuple[Any, ...],
        mig_parted: object,
        convert: Callable[[], NodeOutcome],
    ) -> NodeOutcome:
        version = version_of(obj)
        out = self.nodes.get(version) if version else None
        if out is None or out.inputs != inputs or out.mig_parted is not mig_parted:
            out = convert()
            self.converted["Node"] = self.converted.get("Node", 0) + 1
        if version:
            self._used_nodes[version] = out
        return out
