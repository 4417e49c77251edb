"""Node objects -> planner `Node`s: capacity, taints, the current layout and what is in use, read strictly.

Split from `objects.py` (the snapshot): a node's GPU facts (labels, the agent's inventory, the model) come from
`node_gpus.py`, the one reader the fallback uses too; here they become the planner's node. A problem costs the
node only: skipped (unreadable, an unknown product) or frozen (a layout or usage that cannot be trusted), with
a warning naming the node and the field. `NodeContext` keeps, per snapshot, what many nodes share.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from migctl.adapters.fields import mapping, maps, short
from migctl.adapters.node_gpus import (
    NodeGpuFacts,
    diff,
    match_model,
    read_node_gpus,
    usage_from_inventory,
    with_instances,
)
from migctl.adapters.pods import meta_of, quantity_at
from migctl.core.hardware.catalog import Card, Catalog, GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, geometry
from migctl.core.hardware.naming import profile_from_resource
from migctl.core.migparted.apply import resolve_candidates
from migctl.core.migparted.config import MigPartedConfig
from migctl.core.model.cluster import Gpu, Node, Pod, Resources, Taint
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.inventory import Inventory
from migctl.core.model.node_ids import gpu_ids
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.core.text import label_values
from migctl.core.text.label_values import MAX_INSTANCES_PER_POD
from migctl.core.text.migparted_rules import NEWEST, DeviceId, Version
from migctl.core.text.quantity import parse_quantity, to_count
from migctl.errors import InputError
from migctl.wire import layout as layout_codec
from migctl.wire.names import GPU_COUNT as GFD_COUNT
from migctl.wire.names import GPU_MEMORY as GFD_MEMORY
from migctl.wire.names import GPU_PRODUCT as GFD_PRODUCT
from migctl.wire.names import (
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_MEMORY_SUFFIX,
    MIG_RESOURCE_PREFIX,
    WHOLE_GPU_RESOURCE,
    is_nvidia,
    opts_in_place,
)
from migctl.wire.versions import UnknownVersionError


def _live_model(model: GpuModel, labels: Mapping[str, str], where: str, ctx: NodeContext) -> GpuModel:
    """Apply GFD's per-profile memory labels (`nvidia.com/mig-<p>.memory`) and the GPU total; a label that is
    not a sane MiB count is ignored with a warning (the catalog's figure stays)."""
    memory: dict[str, int] = {}
    total_mib = None
    for key, value in labels.items():
        if not (key == GFD_MEMORY or (key.startswith(MIG_RESOURCE_PREFIX) and key.endswith(MIG_MEMORY_SUFFIX))):
            continue
        profile = profile_from_resource(key[: -len(MIG_MEMORY_SUFFIX)]) if key != GFD_MEMORY else None
        if key != GFD_MEMORY and not profile:
            continue
        try:
            mib = label_values.memory_mib(value)
        except ValueError as e:
            ctx.warn(where, f"label {key}: {e}; the catalog's memory is used")
            continue
        if profile:
            memory[profile] = mib
        else:
            total_mib = mib
    if not memory and total_mib is None:
        return model
    live = (id(model), tuple(sorted(memory.items())), total_mib)
    if live not in ctx.live_models:  # nodes of one model report the same memory: one live model for all of them
        ctx.live_models[live] = (model, model.with_live_memory(memory, total_mib))  # model kept: its id stays its own
    return ctx.live_models[live][1]


def _layout_from_annotation(raw: str, count: int) -> dict[int, GpuConfig]:
    """The GPUs of `migctl.io/layout` (the wire's codec) that this node has."""
    return {
        i: GpuConfig.mig(g.layout) if g.mig else GpuConfig.disabled()
        for i, g in layout_codec.decode(raw).items()
        if i < count
    }


def _extended(resource: str, raw: Any) -> int:
    """An allocatable extended resource: GPUs and MIG instances are bounded counts, others whole units."""
    try:
        value = parse_quantity(raw)
    except ValueError as e:  # the path spelled only when it is needed
        raise ValueError(f"status.allocatable[{resource}]: {e}") from e
    try:
        if resource == WHOLE_GPU_RESOURCE or profile_from_resource(resource):
            return to_count(value, MAX_INSTANCES_PER_POD, "per node")
        return to_count(value, 2**62)
    except ValueError as e:
        raise ValueError(f"status.allocatable[{resource}]: {e}") from e


def _impossible(model: GpuModel | None, configs: Mapping[int, GpuConfig], ctx: NodeContext) -> str:
    """Why a current layout cannot be on this model (an unknown profile, too many slices), or ""."""
    if model is None:
        return ""
    geo = ctx.geometry(model)
    valid = ctx.valid_layouts
    if all(not cfg.mig_enabled or (id(geo), cfg.layout) in valid for cfg in configs.values()):
        return ""  # every layout here was checked on another node
    for i, cfg in sorted(configs.items()):
        if cfg.mig_enabled:
            key = (id(geo), cfg.layout)  # a thousand nodes repeat a few hundred layouts
            if key not in ctx.layout_problems:
                ctx.layout_problems[key] = (geo, geo.problem(cfg.layout))  # geo kept: its id stays its own
            why = ctx.layout_problems[key][1]
            if not why:
                valid.add(key)
            if why:
                return f"current layout of GPU {i} ({cfg}) is impossible on {model.id}: {why}"
    return ""


@dataclass
class NodeContext:
    catalog: Catalog
    settings: PlannerSettings
    operator: GpuOperatorSettings
    mig_parted: MigPartedConfig | None
    mig_parted_source: str
    warnings: list[str]
    problems: list[tuple[str, str, str]] = field(default_factory=list)  # (kind, name, message)
    version: Version = NEWEST  # the mig-parted rules (`operator.mig_parted_version`, read once)
    # Per snapshot, shared by its nodes (never by snapshots: the catalog or settings may differ): a layout's
    # geometry problem, and the live model of a catalog model under the same memory labels.
    layout_problems: dict[tuple[int, CanonicalLayout], tuple[ModelGeometry, str | None]] = field(default_factory=dict)
    live_models: dict[tuple[int, tuple[tuple[str, int], ...], int | None], tuple[GpuModel, GpuModel]] = field(
        default_factory=dict
    )
    products: dict[tuple[str, int | None], GpuModel | None] = field(default_factory=dict)
    geometries: dict[int, tuple[GpuModel, ModelGeometry]] = field(default_factory=dict)
    unknown_gpus: dict[tuple[int, GpuConfig], Gpu] = field(default_factory=dict)
    counts: dict[tuple[str, Any, type], int] = field(default_factory=dict)  # allocatable extended resources
    ids: dict[tuple[int, str, int], tuple[GpuModel, list[tuple[int, list[DeviceId | str | None]]]]] = field(
        default_factory=dict
    )
    valid_layouts: set[tuple[int, CanonicalLayout]] = field(default_factory=set)  # (id of a kept geometry, layout)
    # whether a node's labels opt it into migctl's agent (re-cut the free part of busy GPUs): the reconcile's one
    # reading of the path (`reconcile.paths.path_of`), handed down by the caller
    in_place: Callable[[Mapping[str, str]], bool] | None = None

    def match_product(self, product: str, total_mib: int | None) -> GpuModel | None:
        """`Catalog.match_product`, once per product and total for all nodes."""
        key = (product, total_mib)
        if key not in self.products:
            self.products[key] = self.catalog.match_product(product, total_mib)
        return self.products[key]

    def extended(self, resource: str, raw: Any) -> int:
        """`_extended`, once per resource and value for all nodes (a value that raises is read every time)."""
        key = (resource, raw, type(raw))
        try:
            known = self.counts.get(key)
        except TypeError:  # a list or a map where a quantity belongs: read (and refused) the long way
            return _extended(resource, raw)
        if known is None:
            known = self.counts[key] = _extended(resource, raw)
        return known

    def gpu_ids(self, model: GpuModel, product: str, count: int) -> list[tuple[int, list[DeviceId | str | None]]]:
        """`node_ids.gpu_ids` of a node without the agent's inventory, once per model, product and count."""
        key = (id(model), product, count)
        if key not in self.ids:
            self.ids[key] = (model, gpu_ids(model, product, None, count))  # model kept: its id stays its own
        return self.ids[key][1]

    def unknown_gpu(self, index: int, config: GpuConfig) -> Gpu:
        """A GPU whose usage is unknown (frozen, no mutable parts), once per index and config for all nodes."""
        key = (index, config)
        if key not in self.unknown_gpus:
            self.unknown_gpus[key] = Gpu(index, config, None, None)
        return self.unknown_gpus[key]

    def geometry(self, model: GpuModel) -> ModelGeometry:
        """`geometry(model)`, once per model object (nodes of one model share their live model)."""
        if id(model) not in self.geometries:
            self.geometries[id(model)] = (model, geometry(model))  # model kept: its id stays its own
        return self.geometries[id(model)][1]

    def warn(self, where: str, message: str, kind: str = "") -> None:
        """A warning; with `kind` (Node, Pod, ConfigMap) also an object problem the controller reports on it."""
        self.warnings.append(f"{where}: {message}")
        if kind:
            self.problems.append((kind, where.split(" ", 1)[-1], message))


class Rank(IntEnum):
    """Why a node is frozen, by precedence: where several hold, the lowest rank is the one reported (`Freeze`)."""

    MIG_STATE = 0  # mig-manager's state label says a change is under way, or the last one failed
    IMPOSSIBLE = 1  # the current layout cannot be on this model
    LEFT_ALONE = 2  # another migctl version's layout record
    GPU_COUNT = 3  # GFD's GPU count unreadable, and no agent inventory says it
    LAYOUT_UNKNOWN = 4  # the current layout not resolved for every GPU, and no agent inventory says it
    DISAGREES = 5  # the recorded layout disagrees with the hardware
    MODE_PENDING = 6  # a MIG mode change waits for a GPU reset
    ADVERTISED = 7  # the device plugin's counts disagree with the layout
    USAGE_UNKNOWN = 8  # a running pod on the node is unreadable
    RECONFIGURING = 9  # migctl's own taint
    NOT_MIG_CAPABLE = 10


@dataclass
class Freeze:
    """The reasons a node must be left alone, each with its rank; `reason` is the one that wins. Precedence is
    the rank, not the order in which the reading steps find them, and nothing reads the text back."""

    found: dict[Rank, str] = field(default_factory=dict)

    def add(self, rank: Rank, why: str) -> None:
        self.found.setdefault(rank, why)

    def drop(self, rank: Rank) -> None:
        self.found.pop(rank, None)

    def holds(self, rank: Rank) -> bool:
        return rank in self.found

    @property
    def reason(self) -> str:
        return self.found[min(self.found)] if self.found else ""


@dataclass(frozen=True)
class Basics:
    """What any node object says whatever serves its GPUs: labels, capacity, taints, cordon."""

    labels: Mapping[str, str]
    allocatable: Resources
    taints: tuple[Taint, ...]
    unschedulable: bool


def basics(obj: Mapping[str, Any]) -> Basics:
    """A node's labels, allocatable CPU, memory and pods, taints; ValueError or TypeError naming the field."""
    spec, status = mapping(obj.get("spec"), "spec"), mapping(obj.get("status"), "status")
    alloc = mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
    allocatable = Resources(
        math.ceil(quantity_at(alloc.get("cpu", 0), "status.allocatable.cpu") * 1000),
        math.ceil(quantity_at(alloc.get("memory", 0), "status.allocatable.memory")),
        int(quantity_at(alloc.get("pods", 110), "status.allocatable.pods")),
    )
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
        for t in maps(spec.get("taints"), "spec.taints")
    )
    labels = mapping(meta_of(obj).get("labels"), "metadata.labels")
    return Basics({str(k): str(v) for k, v in labels.items()}, allocatable, taints, bool(spec.get("unschedulable")))


@dataclass(frozen=True)
class _Capacity:
    allocatable: Resources
    extended: Mapping[str, int]  # NVIDIA's resources and the VRAM resource, as counts
    taints: tuple[Taint, ...]
    unschedulable: bool


def _capacity(obj: Mapping[str, Any], ctx: NodeContext) -> _Capacity:
    """Allocatable, the GPU resources, the taints; ValueError or TypeError naming the field."""
    b = basics(obj)
    status = mapping(obj.get("status"), "status")
    alloc = mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
    extended = {
        str(k): ctx.extended(str(k), v)
        for k, v in alloc.items()
        if is_nvidia(str(k)) or k == ctx.settings.vram_resource
    }
    return _Capacity(b.allocatable, extended, b.taints, b.unschedulable)


def _gpu_model(
    facts: NodeGpuFacts, extended: Mapping[str, int], where: str, ctx: NodeContext
) -> tuple[bool, GpuModel | None, Card | None]:
    """(a GPU node migctl can read, its MIG model with live memory, its non-MIG card); a problem is reported."""
    if facts.inventory_error:
        ctx.warnings.append(f"{facts.inventory_error}; the node agent's inventory is ignored")
    model, card = match_model(facts, ctx.catalog, ctx.match_product)
    product, labels, inventory = facts.product, facts.labels, facts.inventory
    if product and model is None and card is None:
        ctx.warn(
            where,
            f"GPU product {short(product)} ({GFD_PRODUCT}) is not in the profile catalog; node skipped "
            "(add the model with --profiles-dir)",
            "Node",
        )
        return False, None, None
    if not product and (GFD_PRODUCT in labels or GFD_COUNT in labels):
        ctx.warn(where, f"label {GFD_PRODUCT} is empty or missing beside other GPU labels; node skipped", "Node")
        return False, None, None
    if not product and not any(k.startswith(MIG_RESOURCE_PREFIX) or k == WHOLE_GPU_RESOURCE for k in extended):
        return False, None, None  # not a GPU node
    if model is not None:
        model = _live_model(model, labels, where, ctx)
        if inventory is not None and (inventory.profiles or inventory.total_mib):
            model = model.with_live_memory(inventory.profiles, inventory.total_mib)  # NVML beats GFD labels
    return True, model, card


@dataclass(frozen=True)
class _Usage:
    used: Resources
    mig_used: Counter[str]
    whole_used: int
    gpu_pods: tuple[tuple[str, int, int | None], ...]


def _usage(pods_on_node: Sequence[Pod]) -> _Usage:
    """What the node's running pods hold: CPU, memory and pods, MIG instances by profile, whole GPUs."""
    used = Resources()
    mig_used: Counter[str] = Counter()
    whole_used = 0
    gpu_pods: list[tuple[str, int, int | None]] = []
    for p in pods_on_node:
        used = used + p.requests
        if p.gpu:
            gpu_pods.append((p.key, p.priority, p.gpu_index))
        for d in p.gpu:
            if d.kind == "profile":
                mig_used[d.profile] += d.count
            elif d.kind == "gpu":
                whole_used += d.count
    return _Usage(used, mig_used, whole_used, tuple(gpu_pods))


def _gpu_count(facts: NodeGpuFacts, where: str, freeze: Freeze, ctx: NodeContext) -> int:
    """How many GPUs: the agent's inventory, else GFD's count label (unreadable: frozen)."""
    count = facts.count or 0
    if facts.count_error:
        freeze.add(Rank.GPU_COUNT, f"label {GFD_COUNT}: {facts.count_error}")
        ctx.warn(where, f"label {GFD_COUNT}: {facts.count_error}; node frozen, its GPUs unknown", "Node")
    inventory = facts.inventory
    if inventory is not None and inventory.gpus:
        if count and count != len(inventory.gpus):
            ctx.warnings.append(
                f"{where}: {GFD_COUNT}={count} but the node agent sees {len(inventory.gpus)} GPUs; using the agent's"
            )
        count = len(inventory.gpus)
        freeze.drop(Rank.GPU_COUNT)  # the agent says what the label could not
    return count


def _recorded_layout(
    facts: NodeGpuFacts, model: GpuModel, count: int, where: str, freeze: Freeze, ctx: NodeContext
) -> dict[int, GpuConfig]:
    """The current layout as migctl recorded it (`migctl.io/layout`) or as the mig-parted config the node's
    label names resolves on its GPUs; {} when unknown (frozen unless the hardware says it)."""
    labels, inventory = facts.labels, facts.inventory
    config_label = labels.get(MIG_CONFIG, "")
    raw = facts.annotations.get(ctx.operator.layout_annotation)
    configs: dict[int, GpuConfig] = {}
    try:
        if raw:
            configs = _layout_from_annotation(str(raw), count)
        elif config_label and ctx.mig_parted is not None:
            configs = resolve_candidates(  # by each GPU's own PCI id, as mig-parted matches it
                ctx.mig_parted,
                config_label,
                gpu_ids(model, facts.product, inventory, count)
                if inventory
                else ctx.gpu_ids(model, facts.product, count),
                ctx.mig_parted_source,
                ctx.version,
            )
    except UnknownVersionError as e:  # another migctl's record: never planned from, never overwritten
        freeze.add(Rank.LEFT_ALONE, f"left alone: {e}")
        ctx.warn(where, f"{e}; node left alone", "Node")
        return {}
    except (InputError, ValueError, TypeError, AttributeError) as e:
        ctx.warnings.append(f"{where}: current layout unreadable: {e}")
        configs = {}
    if len(configs) != count:
        if not freeze.found:
            freeze.add(
                Rank.LAYOUT_UNKNOWN,
                f"current layout unknown (label {MIG_CONFIG}={config_label or '<none>'} not resolved for all "
                f"{count} GPUs)",
            )
        return {}
    return configs


def _with_hardware(
    configs: dict[int, GpuConfig], inventory: Inventory, where: str, freeze: Freeze, ctx: NodeContext
) -> dict[int, GpuConfig]:
    """The agent's inventory is the hardware: it wins over the record, which is checked against it."""
    hardware = {g.index: g.config for g in inventory.gpus}
    if configs and configs != hardware:
        problem = "the recorded layout disagrees with the hardware (node agent): " + diff(configs, hardware)
        ctx.warnings.append(f"{where}: {problem}")
        freeze.add(Rank.DISAGREES, problem)
    elif freeze.holds(Rank.LAYOUT_UNKNOWN):
        freeze.drop(Rank.LAYOUT_UNKNOWN)  # the hardware says what the labels could not
    pending = [g.index for g in inventory.gpus if g.mig_pending != g.mig_enabled]
    if pending:
        freeze.add(Rank.MODE_PENDING, f"MIG mode change pending a GPU reset on GPU {', '.join(map(str, pending))}")
    return hardware


def _state_freezes(
    facts: NodeGpuFacts, cap: _Capacity, model: GpuModel | None, freeze: Freeze, ctx: NodeContext
) -> None:
    """mig-manager's state label, migctl's taint, GFD's MIG-capable label."""
    state = facts.labels.get(MIG_CONFIG_STATE, "")
    if state in ("pending", "rebooting"):
        freeze.add(Rank.MIG_STATE, f"reconfiguration in progress ({MIG_CONFIG_STATE}={state})")
    elif state == "failed":
        freeze.add(Rank.MIG_STATE, f"last reconfiguration failed ({MIG_CONFIG_STATE}=failed)")
    if any(t.key == ctx.settings.reconfigure_taint for t in cap.taints):
        freeze.add(Rank.RECONFIGURING, "migctl is reconfiguring it")
    if model is not None and facts.labels.get(MIG_CAPABLE, "true") == "false":
        freeze.add(Rank.NOT_MIG_CAPABLE, f"{MIG_CAPABLE}=false")


def node_from_object(
    obj: Mapping[str, Any], pods_on_node: Sequence[Pod], ctx: NodeContext, unreadable: Sequence[str] = ()
) -> Node | None:
    """One Node object as the planner's node, in named steps: capacity, the GPU model, what the pods hold, the
    GPU count, the current layout (the record, then the hardware), the checks that freeze it, per-GPU usage."""
    name = str(meta_of(obj).get("name") or "")
    where = f"node {name}"
    try:
        cap = _capacity(obj, ctx)
        facts = read_node_gpus(obj)
    except (ValueError, TypeError) as e:
        ctx.warn(where, f"{e}; node skipped", "Node")
        return None
    gpu_node, model, card = _gpu_model(facts, cap.extended, where, ctx)
    if not gpu_node:
        return None
    usage = _usage(pods_on_node)
    mig_free = {
        profile: max(0, n - usage.mig_used[profile])
        for res, n in cap.extended.items()
        if (profile := profile_from_resource(res))
    }
    whole_free = max(0, cap.extended.get(WHOLE_GPU_RESOURCE, 0) - usage.whole_used)

    freeze = Freeze()
    count = _gpu_count(facts, where, freeze, ctx)
    inventory = facts.inventory
    configs: dict[int, GpuConfig] = {}
    if model is not None and count:
        configs = _recorded_layout(facts, model, count, where, freeze, ctx)
    elif card is not None and count:
        configs = {i: GpuConfig.disabled() for i in range(count)}
    if inventory is not None and inventory.gpus and (model is not None or card is not None):
        configs = _with_hardware(configs, inventory, where, freeze, ctx)
    impossible = _impossible(model, configs, ctx)
    if impossible:  # never planned from, never written into a target: the node keeps no GPUs in the plan
        ctx.warn(where, f"{impossible}; node frozen", "Node")
        freeze.add(Rank.IMPOSSIBLE, impossible)
        configs = {}
    if configs and (problem := _cross_check(model, configs, cap.extended)):
        ctx.warnings.append(f"{where}: {problem}")
        freeze.add(Rank.ADVERTISED, problem)
    if unreadable:  # a running pod we cannot read holds something: the node's usage is unknown, never free
        freeze.add(Rank.USAGE_UNKNOWN, f"usage unknown: running pod {unreadable[0]} is unreadable")
        mig_free, whole_free = {}, 0
    _state_freezes(facts, cap, model, freeze, ctx)

    in_place = ctx.in_place(facts.labels) if ctx.in_place is not None else opts_in_place(facts.labels)
    gpus, usage_known = _per_gpu(configs, inventory, usage, pods_on_node, bool(unreadable), in_place, where, ctx)
    return Node(
        name=name,
        labels=facts.labels,
        taints=cap.taints,
        unschedulable=cap.unschedulable,
        allocatable=cap.allocatable,
        used=usage.used,
        model=model,
        card=card,
        gpus=gpus,
        mig_free=mig_free,
        whole_free=whole_free,
        usage_known=usage_known and bool(gpus),
        frozen_reason=freeze.reason,
        gpu_pods=usage.gpu_pods,
        in_place=in_place,
    )


def _per_gpu(
    configs: Mapping[int, GpuConfig],
    inventory: Inventory | None,
    usage: _Usage,
    pods_on_node: Sequence[Pod],
    unreadable: bool,
    in_place: bool,
    where: str,
    ctx: NodeContext,
) -> tuple[tuple[Gpu, ...], bool]:
    """Each GPU with what is in use on it (the agent's inventory, or the node's pods where it has one GPU), and
    whether the node's usage is known; on an in-place node, every instance where it sits."""
    usage_known = not unreadable and (not usage.gpu_pods or (len(configs) == 1))
    from_hardware = None
    if inventory is not None and configs and set(configs) == {g.index for g in inventory.gpus}:
        from_hardware, why = usage_from_inventory(inventory, usage.mig_used, usage.whole_used, pods_on_node)
        if from_hardware is None and usage.gpu_pods:
            ctx.warnings.append(f"{where}: per-GPU usage unknown: {why}")
    hardware_usage = from_hardware is not None and not unreadable
    usage_known = usage_known or bool(configs and hardware_usage)
    if not configs:
        return (), usage_known
    if not usage_known:  # nothing in them changes: GPUs alike on any node are one object
        return tuple(ctx.unknown_gpu(i, configs[i]) for i in sorted(configs)), usage_known
    per_gpu: dict[int, tuple[Mapping[str, int], int]] = {i: ({}, 0) for i in configs}
    if from_hardware is not None and hardware_usage:
        per_gpu = dict(from_hardware)
    elif usage.gpu_pods and len(configs) == 1:
        (only,) = configs
        per_gpu[only] = (usage.mig_used, usage.whole_used)
    gpus = tuple(Gpu(i, configs[i], dict(per_gpu[i][0]), bool(per_gpu[i][1])) for i in sorted(configs))
    if in_place and inventory is not None and from_hardware is not None and hardware_usage:
        gpus = tuple(with_instances(g, inventory) for g in gpus)
    return gpus, usage_known


def offers(obj: Mapping[str, Any], resource: str) -> bool:
    """Whether a Node object offers `resource` (allocatable, else capacity, above zero): only then can a pod on
    it hold a device of it. Unreadable counts as offered (the safe side)."""
    try:
        status = mapping(obj.get("status"), "status")
        alloc = mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
        return resource in alloc and parse_quantity(alloc[resource]) > 0
    except (TypeError, ValueError):
        return True


def _cross_check(model: GpuModel | None, configs: Mapping[int, GpuConfig], extended: Mapping[str, int]) -> str:
    """The device plugin's counts must agree with the layout we believe in (stale zeros are ignored)."""
    if model is None:
        return ""
    expected: dict[str, int] = {}
    for cfg in configs.values():
        for name, n in cfg.layout:
            expected[name] = expected.get(name, 0) + n
    advertised = {p: v for k, v in extended.items() if (p := profile_from_resource(k)) and v > 0}
    if not advertised:
        return ""  # the device plugin has not reported yet (or is paused): nothing to compare
    if dict(expected) != advertised:
        return f"allocatable MIG resources {dict(sorted(advertised.items()))} disagree with the layout {dict(expected)}"
    return ""
