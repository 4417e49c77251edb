"""A Node object's GPUs, read once for every component: the labels GFD writes, the node agent's inventory, the
product and its catalog entry, and what the agent's busy flags say of each GPU's use.

The snapshot (`nodes.py`) and the fallback (`fallback/capacity.py`) both ask which GPUs a node has; two readers
once disagreed (commit f26352a fixed a bug caused by exactly that). Each caller still decides what a problem
costs it (the snapshot freezes the node, the fallback leaves it out), from the one reading here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from migctl.adapters.fields import mapping
from migctl.adapters.pods import meta_of
from migctl.core.hardware.catalog import Card, Catalog, GpuModel
from migctl.core.model.cluster import Gpu, Instance, Pod
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.inventory import Inventory, parse_inventory
from migctl.core.model.node_ids import model_by_pci
from migctl.core.text import label_values
from migctl.errors import InputError
from migctl.wire.names import GPU_COUNT as GFD_COUNT
from migctl.wire.names import GPU_MEMORY as GFD_MEMORY
from migctl.wire.names import GPU_PRODUCT as GFD_PRODUCT
from migctl.wire.names import GPUS as INVENTORY_ANNOTATION


@dataclass(frozen=True)
class NodeGpuFacts:
    """What a Node object says about its GPUs, each value with why it is missing when it cannot be read."""

    name: str
    labels: Mapping[str, str]
    annotations: Mapping[str, Any]
    inventory: Inventory | None  # the node agent's (NVML), None when absent or unreadable
    inventory_error: str  # why the agent's annotation is unreadable ("" when it is absent or read)
    product: str  # GFD's product label, else the name of the agent's first GPU
    count: int | None  # GFD's count label; None when absent or unreadable
    count_error: str
    total_mib: int | None  # GFD's memory label (a GPU's total); None when absent or unreadable
    total_error: str

    @property
    def has_inventory_annotation(self) -> bool:
        return bool(self.annotations.get(INVENTORY_ANNOTATION))


def read_node_gpus(obj: Mapping[str, Any]) -> NodeGpuFacts:
    """The node's GPU facts; raises ValueError or TypeError naming the field when its metadata is not a map."""
    meta = meta_of(obj)
    name = str(meta.get("name") or "")
    labels = {str(k): str(v) for k, v in mapping(meta.get("labels"), "metadata.labels").items()}
    annotations = mapping(meta.get("annotations"), "metadata.annotations")
    inventory, inventory_error = None, ""
    raw = annotations.get(INVENTORY_ANNOTATION)
    if raw:
        try:
            inventory = parse_inventory(str(raw), name)
        except InputError as e:
            inventory_error = str(e)
    product = labels.get(GFD_PRODUCT, "") or (inventory.gpus[0].name if inventory and inventory.gpus else "")
    count, count_error = _read(label_values.gpu_count, labels, GFD_COUNT)
    total, total_error = _read(label_values.memory_mib, labels, GFD_MEMORY)
    return NodeGpuFacts(name, labels, annotations, inventory, inventory_error, product, count, count_error, total,
                        total_error)  # fmt: skip


def _read(parse: Callable[[object], int], labels: Mapping[str, str], key: str) -> tuple[int | None, str]:
    if key not in labels:
        return None, ""
    try:
        return parse(labels[key]), ""
    except ValueError as e:
        return None, str(e)


def match_model(
    facts: NodeGpuFacts, catalog: Catalog, match_product: Callable[[str, int | None], GpuModel | None] | None = None
) -> tuple[GpuModel | None, Card | None]:
    """The node's MIG model (by product and total memory, else by the agent's PCI id), or its non-MIG card.
    `match_product`: the catalog's, or a caller's memo of it."""
    match = match_product or catalog.match_product
    model = match(facts.product, facts.total_mib) if facts.product else None
    if model is None:
        model = model_by_pci(catalog, facts.inventory)
    card = catalog.match_card(facts.product) if facts.product and model is None else None
    return model, card


def diff(recorded: Mapping[int, GpuConfig], hardware: Mapping[int, GpuConfig]) -> str:
    """Where a recorded layout and the hardware's (the agent's) differ, per GPU."""
    keys = sorted(set(recorded) | set(hardware))
    parts = [
        f"GPU {i}: recorded {recorded.get(i, '<none>')}, hardware {hardware.get(i, '<none>')}"
        for i in keys
        if recorded.get(i) != hardware.get(i)
    ]
    return "; ".join(parts)


def usage_from_inventory(
    inventory: Inventory, mig_used: Counter[str], whole_used: int, pods: Sequence[Pod]
) -> tuple[dict[int, tuple[Counter[str], int]] | None, str]:
    """Per-GPU usage from NVML's busy flags, reconciled with what the node's pods hold.

    NVML sees processes, the scheduler sees allocations: a pod whose container has not started a CUDA process
    yet holds an instance that looks idle. Such a held-but-idle instance is attributed when only one GPU has an
    idle instance of that profile; when several could hold it, per-GPU usage stays unknown (None, why).
    """
    per_gpu: dict[int, tuple[Counter[str], int]] = {}
    idle: dict[int, Counter[str]] = {}
    for g in inventory.gpus:
        if g.mig_enabled:
            used, free = g.used(), g.idle()
            if used is None or free is None:
                return None, f"NVML cannot tell which MIG devices of GPU {g.index} run processes"
            per_gpu[g.index], idle[g.index] = (Counter(used), 0), Counter(free)
        else:
            annotated = any(p.gpu_index == g.index for p in pods)  # placed by migctl's fallback scheduler
            if g.busy is None and not annotated:
                return None, f"NVML cannot tell whether GPU {g.index} runs processes"
            busy = bool(g.busy) or annotated
            per_gpu[g.index], idle[g.index] = (Counter(), int(busy)), Counter({"": int(not busy)})
    held = [*mig_used.items(), ("", whole_used)]
    for profile, n in held:
        excess = n - sum(c[profile] if profile else w for c, w in per_gpu.values())
        if excess <= 0:
            continue
        holders = [i for i, c in idle.items() if c[profile] > 0]
        what = profile or "whole GPU"
        if len(holders) > 1:
            return None, f"pods hold {excess} {what} more than NVML sees busy, on one of GPUs {holders}"
        for i in holders:
            used, whole = per_gpu[i]
            if profile:
                used[profile] += min(excess, idle[i][profile])
            else:
                whole = 1
            per_gpu[i] = (used, whole)
    return per_gpu, ""


def with_instances(gpu: Gpu, inventory: Inventory) -> Gpu:
    """The GPU with its instances where they sit (in-place nodes): the in-place path keeps those in use fixed.

    An instance is in use when NVML or the pods say so. When pods hold more instances of a profile than are busy
    (held but no process yet) and the agent cannot say which, every idle instance of that profile counts as held:
    fixing one too many costs a reshape, moving a held one would break a pod.
    """
    info = inventory.gpu(gpu.index)
    if info is None or not info.mig_enabled:
        return gpu
    busy = Counter(d.profile for d in info.instances if d.busy)
    held = {p for p, n in (gpu.used or {}).items() if n > busy[p]}
    instances = tuple(
        Instance(d.profile, d.start, d.size, bool(d.busy) or d.profile in held)
        for d in sorted(info.instances, key=lambda d: d.start)
    )
    return replace(gpu, instances=instances)
