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
from typing import Any

from migctl.adapters.fields import mapping, maps, short
from migctl.adapters.node_gpus import diff, match_model, read_node_gpus, usage_from_inventory, with_instances
from migctl.adapters.pods import meta_of, quantity_at
from migctl.core.hardware.catalog import Catalog, GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, geometry
from migctl.core.hardware.naming import profile_from_resource
from migctl.core.migparted.apply import resolve_candidates
from migctl.core.migparted.config import MigPartedConfig
from migctl.core.model.cluster import Gpu, Node, Pod, Resources, Taint
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.node_ids import gpu_ids
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.core.text import label_values
from migctl.core.text.label_values import MAX_INSTANCES_PER_POD
from migctl.core.text.migparted_rules import NEWEST, DeviceId, Version
from migctl.core.text.quantity import parse_quantity, to_count
from migctl.errors import InputError
from migctl.wire import layout as layout_codec
from migctl.wire.names import (
    ACTUATION,
    IN_PLACE,
    MIG_CAPABLE,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    MIG_MEMORY_SUFFIX,
    MIG_RESOURCE_PREFIX,
    WHOLE_GPU_RESOURCE,
    is_nvidia,
)
from migctl.wire.names import GPU_COUNT as GFD_COUNT
from migctl.wire.names import GPU_MEMORY as GFD_MEMORY
from migctl.wire.names import GPU_PRODUCT as GFD_PRODUCT
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
    in_place: Callable[[Mapping[str, str]], bool] | None = None  # the config's selector of in-place nodes

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


def node_from_object(
    obj: Mapping[str, Any], pods_on_node: Sequence[Pod], ctx: NodeContext, unreadable: Sequence[str] = ()
) -> Node | None:
    meta = meta_of(obj)
    name = str(meta.get("name") or "")
    where = f"node {name}"
    try:
        spec, status = mapping(obj.get("spec"), "spec"), mapping(obj.get("status"), "status")
        facts = read_node_gpus(obj)
        alloc = mapping(status.get("allocatable") or status.get("capacity"), "status.allocatable")
        allocatable = Resources(
            math.ceil(quantity_at(alloc.get("cpu", 0), "status.allocatable.cpu") * 1000),
            math.ceil(quantity_at(alloc.get("memory", 0), "status.allocatable.memory")),
            int(quantity_at(alloc.get("pods", 110), "status.allocatable.pods")),
        )
        extended = {
            str(k): ctx.extended(str(k), v)
            for k, v in alloc.items()
            if is_nvidia(str(k)) or k == ctx.settings.vram_resource
        }
        taints = tuple(
            Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or "NoSchedule"))
            for t in maps(spec.get("taints"), "spec.taints")
        )
    except (ValueError, TypeError) as e:
        ctx.warn(where, f"{e}; node skipped", "Node")
        return None
    labels, annotations, inventory, product = facts.labels, facts.annotations, facts.inventory, facts.product
    if facts.inventory_error:
        ctx.warnings.append(f"{facts.inventory_error}; the node agent's inventory is ignored")
    model, card = match_model(facts, ctx.catalog, ctx.match_product)
    has_gpu_resources = any(k.startswith(MIG_RESOURCE_PREFIX) or k == WHOLE_GPU_RESOURCE for k in extended)
    if product and model is None and card is None:
        ctx.warn(
            where,
            f"GPU product {short(product)} ({GFD_PRODUCT}) is not in the profile catalog; node skipped "
            "(add the model with --profiles-dir)",
            "Node",
        )
        return None
    if not product and (GFD_PRODUCT in labels or GFD_COUNT in labels):
        ctx.warn(where, f"label {GFD_PRODUCT} is empty or missing beside other GPU labels; node skipped", "Node")
        return None
    if not product and not has_gpu_resources:
        return None  # not a GPU node
    if model is not None:
        model = _live_model(model, labels, where, ctx)
        if inventory is not None and (inventory.profiles or inventory.total_mib):
            model = model.with_live_memory(inventory.profiles, inventory.total_mib)  # NVML beats GFD labels

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
    mig_free = {}
    for res, n in extended.items():
        profile = profile_from_resource(res)
        if profile:
            mig_free[profile] = max(0, n - mig_used[profile])
    whole_free = max(0, extended.get(WHOLE_GPU_RESOURCE, 0) - whole_used)

    count = facts.count or 0
    frozen = f"label {GFD_COUNT}: {facts.count_error}" if facts.count_error else ""
    if frozen:
        ctx.warn(where, f"{frozen}; node frozen, its GPUs unknown", "Node")
    if inventory is not None and inventory.gpus:
        if count and count != len(inventory.gpus):
            ctx.warnings.append(
                f"{where}: {GFD_COUNT}={count} but the node agent sees {len(inventory.gpus)} GPUs; using the agent's"
            )
        count = len(inventory.gpus)
        if frozen.startswith(f"label {GFD_COUNT}"):
            frozen = ""
    gpus: tuple[Gpu, ...] = ()
    configs: dict[int, GpuConfig] = {}
    state = labels.get(MIG_CONFIG_STATE, "")
    config_label = labels.get(MIG_CONFIG, "")
    if model is not None and count:
        raw = annotations.get(ctx.operator.layout_annotation)
        try:
            if raw:
                configs = _layout_from_annotation(str(raw), count)
            elif config_label and ctx.mig_parted is not None:
                configs = resolve_candidates(  # by each GPU's own PCI id, as mig-parted matches it
                    ctx.mig_parted,
                    config_label,
                    gpu_ids(model, product, inventory, count) if inventory else ctx.gpu_ids(model, product, count),
                    ctx.mig_parted_source,
                    ctx.version,
                )
        except UnknownVersionError as e:  # another migctl's record: never planned from, never overwritten
            frozen = f"left alone: {e}"
            ctx.warn(where, f"{e}; node left alone", "Node")
            configs = {}
        except (InputError, ValueError, TypeError, AttributeError) as e:
            ctx.warnings.append(f"{where}: current layout unreadable: {e}")
            configs = {}
        if len(configs) != count and not frozen:
            frozen = (
                f"current layout unknown (label {MIG_CONFIG}={config_label or '<none>'} not resolved for all "
                f"{count} GPUs)"
            )
            configs = {}
    elif card is not None and count:
        configs = {i: GpuConfig.disabled() for i in range(count)}

    if inventory is not None and inventory.gpus and (model is not None or card is not None):
        hardware = {g.index: g.config for g in inventory.gpus}
        if configs and configs != hardware:
            problem = "the recorded layout disagrees with the hardware (node agent): " + diff(configs, hardware)
            ctx.warnings.append(f"{where}: {problem}")
            frozen = frozen or problem
        elif frozen.startswith("current layout unknown"):
            frozen = ""  # the hardware says what the labels could not
        configs = hardware
        pending = [g.index for g in inventory.gpus if g.mig_pending != g.mig_enabled]
        if pending:
            frozen = frozen or f"MIG mode change pending a GPU reset on GPU {', '.join(map(str, pending))}"

    impossible = _impossible(model, configs, ctx)
    if impossible:  # never planned from, never written into a target: the node keeps no GPUs in the plan
        ctx.warn(where, f"{impossible}; node frozen", "Node")
        frozen, configs = impossible, {}
    if configs:
        problem = _cross_check(model, configs, extended)
        if problem:
            ctx.warnings.append(f"{where}: {problem}")
            frozen = frozen or problem
    if unreadable:  # a running pod we cannot read holds something: the node's usage is unknown, never free
        frozen = frozen or f"usage unknown: running pod {unreadable[0]} is unreadable"
        mig_free, whole_free = {}, 0
    if state in ("pending", "rebooting"):
        frozen = f"reconfiguration in progress ({MIG_CONFIG_STATE}={state})"
    elif state == "failed":
        frozen = f"last reconfiguration failed ({MIG_CONFIG_STATE}=failed)"
    if any(t.key == ctx.settings.reconfigure_taint for t in taints):
        frozen = frozen or "migctl is reconfiguring it"
    if model is not None and labels.get(MIG_CAPABLE, "true") == "false":
        frozen = frozen or f"{MIG_CAPABLE}=false"

    usage_known = not unreadable and (not gpu_pods or (len(configs) == 1))
    from_hardware = None
    if inventory is not None and configs and set(configs) == {g.index for g in inventory.gpus}:
        from_hardware, why = usage_from_inventory(inventory, mig_used, whole_used, pods_on_node)
        if from_hardware is None and gpu_pods:
            ctx.warnings.append(f"{where}: per-GPU usage unknown: {why}")
    hardware_usage = from_hardware is not None and not unreadable
    usage_known = usage_known or bool(configs and hardware_usage)
    if configs and not usage_known:  # nothing in them changes: GPUs alike on any node are one object
        gpus = tuple(ctx.unknown_gpu(i, configs[i]) for i in sorted(configs))
    elif configs:
        per_gpu: dict[int, tuple[Mapping[str, int], int]] = {i: ({}, 0) for i in configs}
        if from_hardware is not None and hardware_usage:
            per_gpu = dict(from_hardware)
        elif gpu_pods and len(configs) == 1:
            (only,) = configs
            per_gpu[only] = (mig_used, whole_used)
        gpus = tuple(Gpu(i, configs[i], dict(per_gpu[i][0]), bool(per_gpu[i][1])) for i in sorted(configs))
    in_place = labels.get(ACTUATION) == IN_PLACE or (ctx.in_place is not None and ctx.in_place(labels))
    if in_place and inventory is not None and from_hardware is not None and hardware_usage:
        gpus = tuple(with_instances(g, inventory) for g in gpus)
    return Node(
        name=name,
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=allocatable,
        used=used,
        model=model,
        card=card,
        gpus=gpus,
        mig_free=mig_free,
        whole_free=whole_free,
        usage_known=usage_known and bool(gpus),
        frozen_reason=frozen,
        gpu_pods=tuple(gpu_pods),
        in_place=in_place,
    )


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
