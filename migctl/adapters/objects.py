"""Kubernetes objects (as plain dicts: kubectl `-o yaml/json`, or the client's serialized form) -> planner models.

The same translation serves `migctl plan --snapshot FILE`, the live `migctl plan`, and the controller: the
adapter decides what each label, annotation and status field means; the core only sees plain models. A bad
object never aborts the whole snapshot: a broken pod becomes a per-pod rejection, a node with an unknown GPU a
warning, each naming the object and the field. Pods are translated in `pods.py`, typed field access is
`fields.py`, and files are read with bounded work by `safe_yaml.py`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from migctl.adapters.fields import mapping, maps, short
from migctl.adapters.memo import ConversionMemo, NodeOutcome, PodOutcome
from migctl.adapters.pods import Shapes, meta_of, pod_from_object, quantity_at
from migctl.adapters.safe_yaml import UnsafeInputError, load_documents
from migctl.core import label_values
from migctl.core.catalog import Catalog, GpuModel
from migctl.core.cluster import Gpu, Instance, Node, Pod, Resources, Snapshot, Taint
from migctl.core.geometry import CanonicalLayout, ModelGeometry, geometry
from migctl.core.inventory import Inventory, parse_inventory
from migctl.core.label_values import MAX_INSTANCES_PER_POD
from migctl.core.migparted import GpuConfig, MigPartedConfig, parse
from migctl.core.migparted_apply import resolve_candidates
from migctl.core.migparted_rules import NEWEST, DeviceId, Version
from migctl.core.naming import profile_from_resource
from migctl.core.node_ids import gpu_ids, model_by_pci
from migctl.core.quantity import parse_quantity, to_count
from migctl.core.settings import GpuOperatorSettings, PlannerSettings
from migctl.errors import InputError
from migctl.wire import layout as layout_codec
from migctl.wire.names import (
    ACTUATION,
    FALLBACK_SCHEDULER,
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
from migctl.wire.names import GPUS as INVENTORY_ANNOTATION

TERMINAL = ("Succeeded", "Failed")


@dataclass
class _Objects:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    configmaps: list[dict[str, Any]] = field(default_factory=list)


def load_objects(path: Path) -> list[dict[str, Any]]:
    """Read a `kubectl get ... -o yaml|json` List (or several YAML documents) from a file, with bounded work."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(str(path), f"cannot read the snapshot: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"not UTF-8 text ({e.reason} at byte {e.start}); expected YAML or JSON") from e
    try:
        docs = load_documents(text)
    except UnsafeInputError as e:
        raise InputError(str(path), f"refused: {e}") from e
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise InputError(str(path), f"not valid YAML or JSON ({e}); expected the output of kubectl get -o yaml") from e
    items: list[dict[str, Any]] = []
    for n, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(str(path), f"document {n}: expected a Kubernetes object or List, got {type(doc).__name__}")
        if "items" in doc:
            if not isinstance(doc["items"], list):
                raise InputError(str(path), f"document {n}: items: expected a list, got {type(doc['items']).__name__}")
            for i, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise InputError(str(path), f"items[{i}]: expected an object, got {type(item).__name__}")
                items.append(item)
        else:
            items.append(doc)
    return items


def _sort(objects: Iterable[Mapping[str, Any]], source: str) -> _Objects:
    out = _Objects()
    for i, obj in enumerate(objects):
        kind = obj.get("kind")
        if kind == "Pod":  # most objects: nothing here changes them, so a dict is kept as it is
            out.pods.append(obj if type(obj) is dict else dict(obj))
        elif kind == "Node":
            out.nodes.append(obj if type(obj) is dict else dict(obj))
        elif kind == "ConfigMap":
            out.configmaps.append(obj if type(obj) is dict else dict(obj))
        elif kind is None:
            raise InputError(source, f"items[{i}].kind: missing; expected Node, Pod or ConfigMap objects")
    return out


# ---------------------------------------------------------------------------------------------------------
# Nodes


def _total_mib(labels: Mapping[str, str]) -> int | None:
    """GFD's total memory label through the strict parser, to tell apart boards that share a product name; an
    unreadable one counts as absent here (`_live_model` warns about it)."""
    try:
        return label_values.memory_mib(labels[GFD_MEMORY]) if GFD_MEMORY in labels else None
    except ValueError:
        return None


def _live_model(model: GpuModel, labels: Mapping[str, str], where: str, ctx: _Ctx) -> GpuModel:
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


def _impossible(model: GpuModel | None, configs: Mapping[int, GpuConfig], ctx: _Ctx) -> str:
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
class _Ctx:
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


def _node(
    obj: Mapping[str, Any], pods_on_node: Sequence[Pod], ctx: _Ctx, unreadable: Sequence[str] = ()
) -> Node | None:
    meta = meta_of(obj)
    name = str(meta.get("name") or "")
    where = f"node {name}"
    try:
        spec, status = mapping(obj.get("spec"), "spec"), mapping(obj.get("status"), "status")
        labels = {str(k): str(v) for k, v in mapping(meta.get("labels"), "metadata.labels").items()}
        annotations = mapping(meta.get("annotations"), "metadata.annotations")
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
    inventory = _inventory(annotations, name, ctx)
    product = labels.get(GFD_PRODUCT, "") or (inventory.gpus[0].name if inventory and inventory.gpus else "")
    model = ctx.match_product(product, _total_mib(labels)) if product else None
    if model is None:
        model = model_by_pci(ctx.catalog, inventory)
    card = ctx.catalog.match_card(product) if product and model is None else None
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

    frozen = ""
    count = 0
    if GFD_COUNT in labels:
        try:
            count = label_values.gpu_count(labels[GFD_COUNT])
        except ValueError as e:
            frozen = f"label {GFD_COUNT}: {e}"
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
            problem = "the recorded layout disagrees with the hardware (node agent): " + _diff(configs, hardware)
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
        from_hardware, why = _usage_from_inventory(inventory, mig_used, whole_used, pods_on_node)
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
        gpus = tuple(_with_instances(g, inventory) for g in gpus)
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


def _with_instances(gpu: Gpu, inventory: Inventory) -> Gpu:
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


def _inventory(annotations: Mapping[str, Any], node: str, ctx: _Ctx) -> Inventory | None:
    raw = annotations.get(INVENTORY_ANNOTATION)
    if not raw:
        return None
    try:
        return parse_inventory(str(raw), node)
    except InputError as e:
        ctx.warnings.append(f"{e}; the node agent's inventory is ignored")
        return None


def _diff(recorded: Mapping[int, GpuConfig], hardware: Mapping[int, GpuConfig]) -> str:
    keys = sorted(set(recorded) | set(hardware))
    parts = [
        f"GPU {i}: recorded {recorded.get(i, '<none>')}, hardware {hardware.get(i, '<none>')}"
        for i in keys
        if recorded.get(i) != hardware.get(i)
    ]
    return "; ".join(parts)


def _usage_from_inventory(
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


# ---------------------------------------------------------------------------------------------------------
# Snapshot


# Any of these from translating one object costs that object only (its own rejection or warning), never the
# snapshot: the precise messages come from the checks above, this is the net under them.
OBJECT_ERRORS = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError)


def snapshot_from_objects(
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    settings: PlannerSettings | None = None,
    operator: GpuOperatorSettings | None = None,
    source: str = "snapshot",
    memo: ConversionMemo | None = None,
    in_place: Callable[[Mapping[str, str]], bool] | None = None,
) -> Snapshot:
    """The planner's view of `objects`. With `memo` (the controller's), an object version converted for the
    last snapshot is not converted again (memo.py); the snapshot is the same either way. `in_place(labels)`:
    nodes the config's selector puts on the in-place path (besides those labelled migctl.io/actuation)."""
    settings = settings or PlannerSettings()
    operator = operator or GpuOperatorSettings()
    remembered = memo is not None  # without a memo (a snapshot file), nothing is looked up or kept
    memo = memo or ConversionMemo()
    memo.begin((catalog, settings, operator, in_place))
    catalog = catalog.readable_by(operator.mig_parted_version)  # never plan a name mig-manager cannot parse
    objs = _sort(objects, source)
    warnings: list[str] = []
    ctx = _Ctx(catalog, settings, operator, None, "", warnings, version=operator.mig_parted_version, in_place=in_place)
    rejected: list[tuple[str, str]] = []
    unreadable: dict[str, list[str]] = {}  # node -> running pods on it that cannot be read
    pods: list[Pod] = []
    shapes: Shapes = {}  # pods that request alike (replicas) are read once (`pod_from_object`)
    metas = [meta_of(o) for o in objs.pods]
    pod_keys = [f"{m.get('namespace') or 'default'}/{m.get('name') or '?'}" for m in metas]
    last = {k: i for i, k in enumerate(pod_keys)}  # a later copy wins (a snapshot of snapshots)
    for i, (key, obj, meta) in enumerate(zip(pod_keys, objs.pods, metas, strict=True)):
        if last[key] != i:
            ctx.warn(f"pod {key}", "listed more than once; the last copy counts", "Pod")
            continue
        if meta.get("deletionTimestamp"):
            continue
        outcome = (
            memo.pod(obj, lambda o=obj: _convert_pod(o, settings, shapes))  # type: ignore[misc]
            if remembered
            else _convert_pod(obj, settings, shapes)
        )
        if outcome.error is not None:
            e = outcome.error
            spec = obj.get("spec")
            bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
            status = obj.get("status")
            phase = status.get("phase") if isinstance(status, Mapping) else None
            if bound and phase not in TERMINAL:
                unreadable.setdefault(str(bound), []).append(key)
                ctx.warn(f"pod {key}", f"unreadable ({_why(e)}); node {bound}'s usage is unknown", "Pod")
            else:
                rejected.append((key, f"invalid pod spec: {_why(e)}"))
            continue
        pod = outcome.pod
        assert pod is not None
        for note in outcome.notes:
            ctx.warn(f"pod {key}", note, "Pod")
        if pod.phase in TERMINAL:
            continue
        if pod.pending and pod.scheduler_name == FALLBACK_SCHEDULER:
            continue  # placed by migctl's VRAM-unit scheduler on non-MIG GPUs, not by MIG planning
        pods.append(pod)
    for cm in objs.configmaps:
        meta = meta_of(cm)
        if meta.get("name") == operator.configmap_name and meta.get("namespace") == operator.configmap_namespace:
            mp_source = f"ConfigMap {operator.configmap_namespace}/{operator.configmap_name}[{operator.configmap_key}]"
            ctx.mig_parted_source = mp_source
            data = cm.get("data")
            if data is not None and not isinstance(data, Mapping):
                ctx.warn(
                    f"ConfigMap {operator.configmap_namespace}/{operator.configmap_name}",
                    f"data: expected an object, got {type(data).__name__}; current layouts come only from node "
                    "annotations",
                    "ConfigMap",
                )
                continue
            text = (data or {}).get(operator.configmap_key)
            if text is None:
                warnings.append(f"{mp_source}: key missing; current layouts come only from node annotations")
                continue
            try:
                ctx.mig_parted = parse(str(text), mp_source, operator.mig_parted_version)
                warnings.extend(f"{mp_source}: {why}" for why in ctx.mig_parted.skipped)
            except InputError as e:
                warnings.append(f"{e}; current layouts come only from node annotations")
                ctx.problems.append(("ConfigMap", f"{operator.configmap_namespace}/{operator.configmap_name}", str(e)))
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        if p.node:
            by_node.setdefault(p.node, []).append(p)
    nodes = []
    node_names = [str(meta_of(o).get("name")) for o in objs.nodes]
    last_node = {k: i for i, k in enumerate(node_names)}
    for i, (name, obj) in enumerate(zip(node_names, objs.nodes, strict=True)):
        if last_node[name] != i:
            ctx.warn(f"node {name}", "listed more than once; the last copy counts", "Node")
            continue
        on_node, cant_read = tuple(by_node.get(name, ())), tuple(unreadable.get(name, ()))
        try:
            done = memo.node(
                obj,
                (on_node, cant_read, ctx.mig_parted_source),
                ctx.mig_parted,
                lambda o=obj, p=on_node, u=cant_read: _convert_node(o, p, ctx, u),  # type: ignore[misc]
            )
        except OBJECT_ERRORS as e:
            ctx.warn(f"node {name}", f"unreadable ({_why(e)}); node skipped", "Node")
            continue
        warnings.extend(done.warnings)
        ctx.problems.extend(done.problems)
        if done.node is not None:
            nodes.append(done.node)
    memo.end()
    return Snapshot(tuple(nodes), tuple(pods), tuple(warnings), tuple(rejected), tuple(ctx.problems))


def _convert_pod(obj: Mapping[str, Any], settings: PlannerSettings, shapes: Shapes) -> PodOutcome:
    notes: list[str] = []
    try:
        return PodOutcome(pod_from_object(obj, settings, notes, shapes), tuple(notes))
    except OBJECT_ERRORS as e:
        return PodOutcome(None, (), e)


def _convert_node(obj: Mapping[str, Any], pods: tuple[Pod, ...], ctx: _Ctx, unreadable: tuple[str, ...]) -> NodeOutcome:
    """One node, its warnings and problems collected apart (the memo replays them when it reuses the node): the
    context's lists are swapped for the node's own while it is read (cheaper than a copy of the context)."""
    kept = ctx.warnings, ctx.problems
    ctx.warnings, ctx.problems = [], []
    try:
        node = _node(obj, pods, ctx, unreadable)
        return NodeOutcome(
            (pods, unreadable, ctx.mig_parted_source), ctx.mig_parted, node, tuple(ctx.warnings), tuple(ctx.problems)
        )
    finally:
        ctx.warnings, ctx.problems = kept


def _why(e: BaseException) -> str:
    """The error's own words: ours name the field; anything else at least its type (never a traceback)."""
    if isinstance(e, ValueError | TypeError) and str(e):
        return str(e)
    return f"{type(e).__name__}: {short(str(e))}"
