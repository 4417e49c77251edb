"""Plain models of the cluster as the planner sees it: nodes with GPUs, pods with GPU demand.

Adapters (`migctl.adapters`) build these from Kubernetes objects; the simulator and the tests build them
directly. Nothing here knows about the Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Literal

from migctl.core.hardware.catalog import Card, GpuModel
from migctl.core.hardware.geometry import Placement
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.settings import PlannerSettings


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"  # or Exists
    value: str = ""
    effect: str = ""  # "" tolerates every effect

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if not self.key:
            return self.operator == "Exists"
        if self.key != taint.key:
            return False
        return self.operator == "Exists" or self.value == taint.value


@dataclass(frozen=True, slots=True)
class Requirement:
    """One node-selector requirement (matchExpressions or matchFields entry)."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op, present = self.operator, self.key in labels
        value = labels.get(self.key)
        if op == "In":
            return present and value in self.values
        if op == "NotIn":
            return not present or value not in self.values
        if op == "Exists":
            return present
        if op == "DoesNotExist":
            return not present
        if op in ("Gt", "Lt") and present and len(self.values) == 1:
            try:
                left, right = int(value or ""), int(self.values[0])
            except ValueError:
                return False
            return left > right if op == "Gt" else left < right
        return False


@dataclass(frozen=True, slots=True)
class Term:
    """A nodeSelectorTerm: all of its requirements must hold."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()  # only metadata.name is defined by Kubernetes

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term matches no objects (Kubernetes semantics)
        return all(r.matches(labels) for r in self.expressions) and all(
            r.matches({"metadata.name": node_name}) for r in self.fields
        )


@dataclass(frozen=True, slots=True)
class Resources:
    """Integer resources: CPU in millicores, memory in bytes, pod slots."""

    cpu_m: int = 0
    memory: int = 0
    pods: int = 0

    def __add__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m + other.cpu_m, self.memory + other.memory, self.pods + other.pods)

    def __sub__(self, other: Resources) -> Resources:
        return Resources(self.cpu_m - other.cpu_m, self.memory - other.memory, self.pods - other.pods)

    def fits_in(self, free: Resources) -> bool:
        return self.cpu_m <= free.cpu_m and self.memory <= free.memory and self.pods <= free.pods


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """One kind of GPU request of a pod, `count` times.

    kind `profile`: an exact MIG profile (`nvidia.com/mig-<p>`), on any model that has it.
    kind `vram`: any plain profile with at least `vram_mib` of memory (the VRAM resource).
    kind `gpu`: a whole GPU with MIG disabled (`nvidia.com/gpu`).
    """

    kind: Literal["profile", "vram", "gpu"]
    count: int = 1
    profile: str = ""
    vram_mib: int = 0

    def __str__(self) -> str:
        what = {"profile": self.profile, "vram": f"{self.vram_mib} MiB of VRAM", "gpu": "whole GPU"}[self.kind]
        return f"{self.count}×{what}" if self.count > 1 else what


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    priority: int = 0
    node: str | None = None  # bound node, None while pending
    phase: str = "Pending"
    requests: Resources = Resources(pods=1)
    gpu: tuple[GpuDemand, ...] = ()
    need_mib: int | None = None  # the real VRAM need (annotation), for waste accounting
    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: tuple[Term, ...] = ()  # required node affinity: any term
    tolerations: tuple[Toleration, ...] = ()
    unschedulable: bool = False  # PodScheduled=False, reason Unschedulable
    created: str = ""
    scheduler_name: str = "default-scheduler"
    gpu_index: int | None = None  # which GPU a running pod uses, when the node agent says so
    gated: bool = False  # carries migctl's queue gate (`wire.names.QUEUE_GATE`): kube-scheduler ignores it
    other_gates: bool = False  # carries another component's scheduling gate: not bound before that is lifted

    @cached_property
    def key(self) -> str:
        """`namespace/name`; cached, since the planner looks pods up by it many times per pod."""
        return f"{self.namespace}/{self.name}"

    @property
    def pending(self) -> bool:
        return self.node is None and self.phase == "Pending"

    @property
    def created_s(self) -> float | None:
        return epoch_s(self.created)

    @property
    def units(self) -> int:
        return sum(d.count for d in self.gpu)


@dataclass(frozen=True, slots=True)
class Instance:
    """One MIG instance where it sits, and whether something holds it (the node agent's inventory)."""

    profile: str
    start: int
    size: int
    in_use: bool

    @property
    def placement(self) -> Placement:
        return Placement(self.profile, self.start, self.size)


@dataclass(frozen=True)
class Gpu:
    """One GPU of a node: its current configuration and, when known, which instances are in use."""

    index: int
    config: GpuConfig
    used: Mapping[str, int] | None = None  # profile -> instances in use; None when unknown
    whole_used: bool | None = None  # for MIG-disabled GPUs; None when unknown
    # every instance with its placement and use, when the agent reports them; the in-place path reshapes the free
    # part of a busy GPU around the instances in use (`ModelGeometry.place_around`). None when unknown.
    instances: tuple[Instance, ...] | None = None

    @property
    def busy(self) -> bool | None:
        if self.config.mig_enabled:
            return None if self.used is None else sum(self.used.values()) > 0
        return self.whole_used


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Resources = Resources(cpu_m=64_000, memory=512 * 2**30, pods=110)
    used: Resources = Resources()
    model: GpuModel | None = None  # MIG-capable model (live memory applied)
    card: Card | None = None  # non-MIG card
    gpus: tuple[Gpu, ...] = ()
    mig_free: Mapping[str, int] = field(default_factory=dict)  # free MIG instances the scheduler can see
    whole_free: int = 0  # free nvidia.com/gpu
    usage_known: bool = True  # per-GPU occupancy known (no GPU pods, or the node agent reports it)
    frozen_reason: str = ""  # why migctl must not reconfigure this node now ("" = it may)
    gpu_pods: tuple[tuple[str, int, int | None], ...] = ()  # (pod key, priority, gpu index) of running GPU pods
    in_place: bool = False  # opted into the in-place path: the agent may re-cut the free part of busy GPUs
    # how the node's GPUs reach pods: "" the device plugin; "static" NVIDIA's DRA driver advertising the MIG devices
    # that exist; "dynamic" its DynamicMIG, which makes each claim's partition at allocation (every GPU's free part
    # is open to any placement: the plan's re-cuts there are fences that steer first-fit, not actuation)
    dra: Literal["", "static", "dynamic"] = ""

    @property
    def free(self) -> Resources:
        return self.allocatable - self.used

    def may_reconfigure(self, settings: PlannerSettings) -> bool:
        """Whether migctl may reshape this node's GPUs now: nothing freezes it and it is not excluded
        (`planner.exclude_label`). The one rule of the planner, the exact solver, the forecast term and the
        webhook's capacity view."""
        return not self.frozen_reason and self.labels.get(settings.exclude_label) != "true"


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[Node, ...]
    pods: tuple[Pod, ...]
    warnings: tuple[str, ...] = ()
    rejected: tuple[tuple[str, str], ...] = ()  # (pod key, why its spec could not be read)
    problems: tuple[tuple[str, str, str], ...] = ()  # (kind, name, what is wrong): objects skipped or frozen

    @cached_property
    def pending(self) -> tuple[Pod, ...]:
        """Pending GPU pods; cached (the snapshot is frozen): one plan asks for them a dozen times."""
        return tuple(p for p in self.pods if p.pending and p.gpu)

    @cached_property
    def mig_gpus(self) -> int:
        """GPUs of a MIG-capable model: the size the planner's size limits count (`ExactSettings`, search budgets)."""
        return sum(len(n.gpus) for n in self.nodes if n.model is not None)


def epoch_s(created: str) -> float | None:
    """A creationTimestamp (RFC 3339, as the API server writes it) in seconds since the epoch; None if unreadable."""
    try:
        stamp = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return None
    return stamp.timestamp() if stamp.tzinfo is not None else None
