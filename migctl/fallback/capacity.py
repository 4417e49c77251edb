"""VRAM capacity of GPUs without MIG, and the fallback's view of the cluster, from plain Kubernetes objects.

Per GPU: real memory (NVML through the agent's `migctl.io/gpus` annotation; else GFD's `nvidia.com/gpu.memory`;
else the catalog's prior) minus a per-GPU reserve, floored to whole units. The node advertises the sum of its
GPUs' units, so the default scheduler's node-level accounting and migctl's per-GPU accounting use the same
numbers. A GPU with MIG on (or switching to it) contributes nothing: MIG instances are served by MIG planning.

Without the agent, per-GPU MIG state is only known when no GPU of the node has MIG on (GFD and the device plugin
report node totals), so a node with some MIG GPUs needs the agent to get fallback capacity.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migctl.adapters.fields import mapping
from migctl.adapters.node_gpus import match_model, read_node_gpus
from migctl.adapters.objects import OBJECT_ERRORS, snapshot_from_objects
from migctl.adapters.pods import meta_of, pod_from_object
from migctl.adapters.requests import effective_of, holds_any
from migctl.adapters.views import allocatable, is_pod, node_view, pod_view
from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.settings import PlannerSettings
from migctl.core.text import label_values
from migctl.core.text.quantity import MIB, parse_quantity
from migctl.core.vram.board import VramGpu, VramNode
from migctl.core.vram.fit import VramPod
from migctl.wire.names import GPU_COUNT as GFD_COUNT
from migctl.wire.names import GPU_INDEX as GPU_INDEX_ANNOTATION
from migctl.wire.names import GPU_MEMORY as GFD_MEMORY
from migctl.wire.names import MIG_COUNT_SUFFIX, MIG_RESOURCE_PREFIX, WHOLE_GPU_RESOURCE


@dataclass(frozen=True)
class GpuMemory:
    index: int
    uuid: str | None
    memory_mib: int


@dataclass(frozen=True)
class NodeGpus:
    """A node's GPUs eligible for the fallback; `reason` says why there are none when it is a GPU node."""

    gpus: tuple[GpuMemory, ...] = ()
    source: str = ""
    reason: str = ""
    unreadable: bool = False  # the reason is a value migctl cannot read (warned about), not a node of another kind


def gpu_units(memory_mib: int, reserve_mib: int, unit_bytes: int) -> int:
    """Whole units of one GPU's VRAM after the reserve (never negative)."""
    return max(0, (memory_mib - reserve_mib) * MIB // unit_bytes)


def node_units(gpus: NodeGpus, settings: FallbackSettings) -> int | None:
    """What the node advertises: the sum of its GPUs' units, or None (no resource) when it has no such GPU."""
    if not gpus.gpus:
        return None
    return sum(gpu_units(g.memory_mib, settings.reserve_mib_per_gpu, settings.unit_bytes) for g in gpus.gpus)


def node_gpus(node: Mapping[str, Any], catalog: Catalog) -> NodeGpus | None:
    """Eligible GPUs of a Node object (its GPU facts from `adapters/node_gpus.py`, the snapshot's reader); None
    when it is not a GPU node at all."""
    facts = read_node_gpus(node)
    if facts.has_inventory_annotation:
        if facts.inventory is None:
            return NodeGpus(source="agent", reason=f"unreadable inventory: {facts.inventory_error}", unreadable=True)
        inv = facts.inventory
        gpus = tuple(GpuMemory(g.index, g.uuid, g.memory_mib) for g in inv.gpus if not (g.mig_enabled or g.mig_pending))
        if inv.gpus and not gpus:
            return NodeGpus(source="agent", reason="every GPU has MIG on (or pending)")
        return NodeGpus(gpus, "agent") if inv.gpus else None
    labels, product = facts.labels, facts.product
    if not product:
        return None
    if facts.count is None:
        why = facts.count_error or "missing (expected a GPU count, 1..64)"
        return NodeGpus(source="gfd", reason=f"unreadable label {GFD_COUNT}: {why}", unreadable=True)
    model, card = match_model(facts, catalog)
    alloc = allocatable(node)
    mig_on = any(
        k.startswith(MIG_RESOURCE_PREFIX) and k.endswith(MIG_COUNT_SUFFIX) and _positive(v) for k, v in labels.items()
    ) or any(str(k).startswith(MIG_RESOURCE_PREFIX) and _positive(v) for k, v in alloc.items())
    if mig_on:
        return NodeGpus(source="gfd", reason="some GPUs have MIG on; per-GPU MIG state needs the node agent")
    if facts.total_error:
        return NodeGpus(source="gfd", reason=f"unreadable label {GFD_MEMORY}: {facts.total_error}", unreadable=True)
    if facts.total_mib is not None:
        mib = facts.total_mib
    elif card is not None or model is not None:
        mib = card.memory_mib if card is not None else model.memory_mib  # type: ignore[union-attr]
    else:
        return NodeGpus(source="gfd", reason=f"GPU product {product!r} has no {GFD_MEMORY} label and no catalog entry")
    return NodeGpus(tuple(GpuMemory(i, None, mib) for i in range(facts.count)), "gfd")


def _positive(value: object) -> bool:
    """A count label or resource above zero; an unreadable one counts as above zero (the safe side: MIG on)."""
    try:
        return parse_quantity(value) > 0
    except ValueError:
        return True


def vram_units(obj: Mapping[str, Any], resource: str) -> int:
    """A pod's effective request of `resource` (what the kube-scheduler accounts), in whole units; ValueError
    naming the field when it cannot be read (`adapters/requests.py`)."""
    return math.ceil(effective_of(obj, resource))


def _requests_mig_or_whole_gpus(resource: str) -> bool:
    return resource == WHOLE_GPU_RESOURCE or resource.startswith(MIG_RESOURCE_PREFIX)


@dataclass
class FallbackView:
    nodes: list[VramNode] = field(default_factory=list)
    pods: list[VramPod] = field(default_factory=list)
    capacity: dict[str, int | None] = field(default_factory=dict)  # node -> units to advertise (None: remove)
    warnings: list[str] = field(default_factory=list)


def fallback_view(
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    settings: FallbackSettings | None = None,
    planner: PlannerSettings | None = None,
    snapshot: Snapshot | None = None,
) -> FallbackView:
    """Fallback nodes (GPUs, per-GPU use from pod annotations) and the pending pods migctl must place.

    `snapshot`: the adapter's reading of the same `objects`, when the caller has one (`migctl plan` parses once)."""
    settings = settings or FallbackSettings()
    planner = planner or PlannerSettings()
    objs = list(objects)
    if snapshot is None:
        snapshot = snapshot_from_objects(objs, catalog, planner, source="fallback")
    by_name = {n.name: n for n in snapshot.nodes}
    view = FallbackView(warnings=list(snapshot.warnings))
    bound: dict[str, list[Mapping[str, Any]]] = {}
    for obj in objs:
        if not is_pod(obj):
            continue
        v = pod_view(obj)
        if v.deleting or v.finished:
            continue
        if not v.pending:
            bound.setdefault(v.node, []).append(obj)
        elif v.scheduler_name == settings.scheduler_name:
            key = v.key
            try:
                pod = pod_from_object(obj, planner)
                units = vram_units(obj, settings.resource)
            except OBJECT_ERRORS as e:
                view.warnings.append(f"pod {key}: invalid spec: {e}")
                continue
            view.pods.append(VramPod(pod, units, v.uid))
    last: dict[str, Mapping[str, Any]] = {}  # a node listed twice: the last copy counts, as in the snapshot
    for obj in objs:
        if obj.get("kind") == "Node":
            last[node_view(obj).name] = obj
    for name, obj in last.items():
        try:
            gpus = node_gpus(obj, catalog)
        except OBJECT_ERRORS as e:
            view.warnings.append(f"node {name}: unreadable ({e}); not a fallback node")
            continue
        if gpus is None:
            continue
        view.capacity[name] = node_units(gpus, settings)
        if not gpus.gpus:
            if gpus.unreadable:
                view.warnings.append(f"node {name}: {gpus.reason}")
            continue  # MIG nodes belong to MIG planning; only nodes with a GPU without MIG are fallback nodes
        node = by_name.get(name)
        if node is None:
            continue  # the snapshot already warned why (unknown product, unreadable status)
        view.nodes.append(_vram_node(node, gpus, bound.get(name, []), settings))
    return view


def _vram_node(node: Any, gpus: NodeGpus, pods: list[Mapping[str, Any]], settings: FallbackSettings) -> VramNode:
    used: dict[int, int] = {}
    unattributed = 0
    reason = gpus.reason
    indices = {g.index for g in gpus.gpus}
    for obj in pods:
        key = pod_view(obj).key
        try:
            gpu_pod = holds_any(obj, _requests_mig_or_whole_gpus)
            units = vram_units(obj, settings.resource)
            raw = mapping(meta_of(obj).get("annotations"), "metadata.annotations").get(GPU_INDEX_ANNOTATION)
        except OBJECT_ERRORS as e:  # it holds something we cannot read: the node's use is unknown, never free
            reason = reason or f"usage unknown: running pod {key} is unreadable ({e})"
            continue
        if not reason and gpu_pod:
            reason = "runs pods that request nvidia.com GPUs: which GPUs they hold is unknown"
        if units <= 0:
            continue
        index = label_values.gpu_index_or_none(raw)
        if index is not None and index in indices:
            used[index] = used.get(index, 0) + units
        else:
            unattributed += units
    vgpus = tuple(
        VramGpu(
            g.index,
            g.uuid,
            gpu_units(g.memory_mib, settings.reserve_mib_per_gpu, settings.unit_bytes),
            used.get(g.index, 0),
        )
        for g in gpus.gpus
    )
    return VramNode(node, vgpus, unattributed, gpus.source, reason)
