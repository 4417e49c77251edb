"""Kubernetes objects (as plain dicts: kubectl `-o yaml/json`, or the client's serialized form) -> planner models.

The same translation serves `migctl plan --snapshot FILE`, the live `migctl plan`, and the controller: the
adapter decides what each label, annotation and status field means; the core only sees plain models. A bad
object never aborts the whole snapshot: a broken pod becomes a per-pod rejection, a node with an unknown GPU a
warning, each naming the object and the field.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import yaml

from migctl.core.catalog import Catalog, GpuModel
from migctl.core.cluster import Gpu, GpuDemand, Node, Pod, Requirement, Resources, Snapshot, Taint, Term, Toleration
from migctl.core.demand import effective_requests, shared_instances
from migctl.core.inventory import INVENTORY_ANNOTATION, Inventory, parse_inventory
from migctl.core.migparted import GpuConfig, MigPartedConfig, parse, resolve_candidates
from migctl.core.naming import WHOLE_GPU_RESOURCE, profile_from_resource
from migctl.core.node_ids import gpu_ids, model_by_pci
from migctl.core.quantity import MIB, parse_quantity
from migctl.core.settings import GpuOperatorSettings, PlannerSettings
from migctl.core.vram_fit import GPU_INDEX_ANNOTATION  # written by migctl's fallback scheduler before binding
from migctl.errors import InputError

# libyaml when present: snapshots and mig-parted configs with hundreds of entries parse ~10x faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_COUNT = "nvidia.com/gpu.count"
GFD_MEMORY = "nvidia.com/gpu.memory"
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"
TERMINAL = ("Succeeded", "Failed")
FALLBACK_SCHEDULER = "migctl"


@dataclass
class _Objects:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    configmaps: list[dict[str, Any]] = field(default_factory=list)


def load_objects(path: Path) -> list[dict[str, Any]]:
    """Read a `kubectl get ... -o yaml|json` List (or several YAML documents) from a file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(str(path), f"cannot read the snapshot: {e.strerror}") from e
    try:
        docs = [json.loads(text)] if text.lstrip().startswith("{") else list(yaml.load_all(text, Loader=_LOADER))
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise InputError(str(path), f"not valid YAML or JSON ({e}); expected the output of kubectl get -o yaml") from e
    items: list[dict[str, Any]] = []
    for n, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(str(path), f"document {n}: expected a Kubernetes object or List, got {type(doc).__name__}")
        if "items" in doc and isinstance(doc["items"], list):
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
        if kind == "Node":
            out.nodes.append(dict(obj))
        elif kind == "Pod":
            out.pods.append(dict(obj))
        elif kind == "ConfigMap":
            out.configmaps.append(dict(obj))
        elif kind is None:
            raise InputError(source, f"items[{i}].kind: missing; expected Node, Pod or ConfigMap objects")
    return out


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    return meta if isinstance(meta, Mapping) else {}


def _q(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


# ---------------------------------------------------------------------------------------------------------
# Pods


def _container_requests(c: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    res = c.get("resources") or {}
    merged: dict[str, Any] = dict(res.get("limits") or {})  # requests default to limits
    merged.update(res.get("requests") or {})
    return {k: _q(v, f"{where}.resources[{k}]") for k, v in merged.items()}


def _terms(pod_spec: Mapping[str, Any]) -> tuple[Term, ...]:
    na = ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for t in na.get("nodeSelectorTerms") or []:
        exprs = tuple(
            Requirement(e["key"], e["operator"], tuple(str(v) for v in e.get("values") or ()))
            for e in t.get("matchExpressions") or []
        )
        fields = tuple(
            Requirement(e["key"], e["operator"], tuple(str(v) for v in e.get("values") or ()))
            for e in t.get("matchFields") or []
        )
        terms.append(Term(exprs, fields))
    return tuple(terms)


def _to_int(value: Decimal, where: str) -> int:
    if value != value.to_integral_value() or value < 0:
        raise ValueError(f"{where}: {value} is not a whole non-negative count")
    return int(value)


def _vram_demands(
    containers: Sequence[Mapping[str, Decimal]], inits: Sequence[tuple[Mapping[str, Decimal], bool]], res: str
) -> list[GpuDemand]:
    """One instance per container with a VRAM request, plain init containers sharing (`shared_instances`)."""

    def mib(r: Mapping[str, Decimal]) -> int:
        return max(0, math.ceil(r.get(res, Decimal(0)) / MIB))

    sizes, _ = shared_instances([(mib(r), restartable) for r, restartable in inits], [mib(r) for r in containers])
    return [GpuDemand("vram", n, vram_mib=m) for m, n in sorted(Counter(sizes).items())]


def pod_from_object(obj: Mapping[str, Any], settings: PlannerSettings) -> Pod:
    """Translate one Pod; raises ValueError naming the field on nonsense (the caller records a rejection)."""
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    containers = [_container_requests(c, f"spec.containers[{i}]") for i, c in enumerate(spec.get("containers") or [])]
    inits = [
        (_container_requests(c, f"spec.initContainers[{i}]"), c.get("restartPolicy") == "Always")
        for i, c in enumerate(spec.get("initContainers") or [])
    ]
    overhead = {k: _q(v, f"spec.overhead[{k}]") for k, v in (spec.get("overhead") or {}).items()}
    eff = effective_requests(containers, inits, overhead)
    demands: list[GpuDemand] = []
    for res, value in sorted(eff.items()):
        if value == 0:
            continue
        profile = profile_from_resource(res)
        if profile is not None:
            demands.append(GpuDemand("profile", _to_int(value, f"resources[{res}]"), profile=profile))
        elif res == WHOLE_GPU_RESOURCE:
            demands.append(GpuDemand("gpu", _to_int(value, f"resources[{res}]")))
        elif res == settings.vram_resource:
            if value <= 0:
                raise ValueError(f"resources[{res}]: {value} is not a positive amount of memory")
            demands.extend(_vram_demands(containers, inits, res))
    need = None
    annotations = meta.get("annotations") or {}
    if settings.vram_annotation in annotations:
        raw = annotations[settings.vram_annotation]
        need = math.ceil(_q(raw, f"metadata.annotations[{settings.vram_annotation}]") / MIB)
    scheduled: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        priority=int(spec.get("priority") or 0),
        node=spec.get("nodeName") or None,
        phase=str(status.get("phase") or "Pending"),
        requests=Resources(math.ceil(eff.get("cpu", Decimal(0)) * 1000), math.ceil(eff.get("memory", Decimal(0))), 1),
        gpu=tuple(demands),
        need_mib=need,
        node_selector=_node_selector(spec),
        affinity=_terms(spec),
        tolerations=_tolerations(spec),
        unschedulable=scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable",
        created=str(meta.get("creationTimestamp") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        gpu_index=_gpu_index(annotations),
    )


def _node_selector(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((str(k), str(v)) for k, v in (spec.get("nodeSelector") or {}).items()))


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(t.get("key") or "", t.get("operator") or "Equal", str(t.get("value") or ""), t.get("effect") or "")
        for t in spec.get("tolerations") or []
    )


def placement_from_object(obj: Mapping[str, Any]) -> Pod:
    """Only what decides where a pod may run (nodeSelector, required node affinity, tolerations): for the
    admission webhook, which must place a pod whose resources it is about to rewrite. Raises ValueError (or
    KeyError, TypeError) on a malformed affinity, as `pod_from_object` does."""
    meta, spec = _meta(obj), obj.get("spec") or {}
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        node_selector=_node_selector(spec),
        affinity=_terms(spec),
        tolerations=_tolerations(spec),
    )


def _gpu_index(annotations: Mapping[str, Any]) -> int | None:
    """The GPU migctl's fallback scheduler chose for the pod (annotation), if any.

    A garbled value counts as unknown rather than rejecting the pod: a rejected running pod would drop out of
    its node's accounting.
    """
    raw = str(annotations.get(GPU_INDEX_ANNOTATION, ""))
    return int(raw) if raw.isdigit() else None


# ---------------------------------------------------------------------------------------------------------
# Nodes


def _live_model(model: GpuModel, labels: Mapping[str, str]) -> GpuModel:
    """Apply GFD's per-profile memory labels (`nvidia.com/mig-<p>.memory`) and the GPU total."""
    memory: dict[str, int] = {}
    for key, value in labels.items():
        if key.startswith("nvidia.com/mig-") and key.endswith(".memory"):
            profile = profile_from_resource(key[: -len(".memory")])
            if profile and value.isdigit() and int(value) > 0:
                memory[profile] = int(value)
    total = labels.get(GFD_MEMORY, "")
    total_mib = int(total) if total.isdigit() and int(total) > 0 else None
    if not memory and total_mib is None:
        return model
    return model.with_live_memory(memory, total_mib)


def _layout_from_annotation(raw: str, count: int) -> dict[int, GpuConfig]:
    data = json.loads(raw)
    out: dict[int, GpuConfig] = {}
    for idx, g in (data.get("gpus") or {}).items():
        i = int(idx)
        if i < count:
            out[i] = GpuConfig.mig(g.get("layout") or {}) if g.get("mig", True) else GpuConfig.disabled()
    return out


@dataclass
class _Ctx:
    catalog: Catalog
    settings: PlannerSettings
    operator: GpuOperatorSettings
    mig_parted: MigPartedConfig | None
    mig_parted_source: str
    warnings: list[str]


def _node(obj: Mapping[str, Any], pods_on_node: Sequence[Pod], ctx: _Ctx) -> Node | None:
    meta, spec, status = _meta(obj), obj.get("spec") or {}, obj.get("status") or {}
    name = str(meta.get("name") or "")
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    annotations = meta.get("annotations") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    where = f"node {name}"
    try:
        allocatable = Resources(
            math.ceil(_q(alloc.get("cpu", 0), "status.allocatable.cpu") * 1000),
            math.ceil(_q(alloc.get("memory", 0), "status.allocatable.memory")),
            int(_q(alloc.get("pods", 110), "status.allocatable.pods")),
        )
        extended = {
            k: int(_q(v, f"status.allocatable[{k}]"))
            for k, v in alloc.items()
            if k.startswith("nvidia.com/") or k == ctx.settings.vram_resource
        }
    except ValueError as e:
        ctx.warnings.append(f"{where}: {e}; node skipped")
        return None
    taints = tuple(
        Taint(t.get("key") or "", str(t.get("value") or ""), t.get("effect") or "NoSchedule")
        for t in spec.get("taints") or []
    )
    inventory = _inventory(annotations, name, ctx)
    product = labels.get(GFD_PRODUCT, "") or (inventory.gpus[0].name if inventory and inventory.gpus else "")
    total = labels.get(GFD_MEMORY, "")
    model = ctx.catalog.match_product(product, int(total) if total.isdigit() else None) if product else None
    if model is None:
        model = model_by_pci(ctx.catalog, inventory)
    card = ctx.catalog.match_card(product) if product and model is None else None
    has_gpu_resources = any(k.startswith("nvidia.com/mig-") or k == WHOLE_GPU_RESOURCE for k in extended)
    if product and model is None and card is None:
        ctx.warnings.append(
            f"{where}: GPU product {product!r} ({GFD_PRODUCT}) is not in the profile catalog; node skipped "
            "(add the model with --profiles-dir)"
        )
        return None
    if not product and not has_gpu_resources:
        return None  # not a GPU node
    if model is not None:
        model = _live_model(model, labels)
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

    count_label = labels.get(GFD_COUNT, "")
    count = int(count_label) if count_label.isdigit() else 0
    if inventory is not None and inventory.gpus:
        if count and count != len(inventory.gpus):
            ctx.warnings.append(
                f"{where}: {GFD_COUNT}={count} but the node agent sees {len(inventory.gpus)} GPUs; using the agent's"
            )
        count = len(inventory.gpus)
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
                    gpu_ids(model, product, inventory, count),
                    ctx.mig_parted_source,
                    ctx.operator.mig_parted_version,
                )
        except (InputError, ValueError, TypeError, AttributeError) as e:
            ctx.warnings.append(f"{where}: current layout unreadable: {e}")
            configs = {}
        if len(configs) != count:
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

    if configs:
        problem = _cross_check(model, configs, extended)
        if problem:
            ctx.warnings.append(f"{where}: {problem}")
            frozen = frozen or problem
    if state in ("pending", "rebooting"):
        frozen = f"reconfiguration in progress ({MIG_CONFIG_STATE}={state})"
    elif state == "failed":
        frozen = f"last reconfiguration failed ({MIG_CONFIG_STATE}=failed)"
    if any(t.key == ctx.settings.reconfigure_taint for t in taints):
        frozen = frozen or "migctl is reconfiguring it"
    if model is not None and labels.get(MIG_CAPABLE, "true") == "false":
        frozen = frozen or f"{MIG_CAPABLE}=false"

    usage_known = not gpu_pods or (len(configs) == 1)
    from_hardware = None
    if inventory is not None and configs and set(configs) == {g.index for g in inventory.gpus}:
        from_hardware, why = _usage_from_inventory(inventory, mig_used, whole_used, pods_on_node)
        if from_hardware is None and gpu_pods:
            ctx.warnings.append(f"{where}: per-GPU usage unknown: {why}")
    if configs:
        per_gpu: dict[int, tuple[Counter[str], int]] = {i: (Counter(), 0) for i in configs}
        if from_hardware is not None:
            per_gpu, usage_known = from_hardware, True
        elif gpu_pods and len(configs) == 1:
            (only,) = configs
            per_gpu[only] = (mig_used, whole_used)
        gpus = tuple(
            Gpu(
                i,
                configs[i],
                dict(per_gpu[i][0]) if usage_known else None,
                bool(per_gpu[i][1]) if usage_known else None,
            )
            for i in sorted(configs)
        )
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
    )


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
    expected: Counter[str] = Counter()
    for cfg in configs.values():
        for name, n in cfg.layout:
            expected[name] += n
    advertised = {profile_from_resource(k): v for k, v in extended.items() if profile_from_resource(k) and v > 0}
    if not advertised:
        return ""  # the device plugin has not reported yet (or is paused): nothing to compare
    if dict(expected) != advertised:
        return f"allocatable MIG resources {dict(sorted(advertised.items()))} disagree with the layout {dict(expected)}"
    return ""


# ---------------------------------------------------------------------------------------------------------
# Snapshot


def snapshot_from_objects(
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    settings: PlannerSettings | None = None,
    operator: GpuOperatorSettings | None = None,
    source: str = "snapshot",
) -> Snapshot:
    settings = settings or PlannerSettings()
    operator = operator or GpuOperatorSettings()
    catalog = catalog.readable_by(operator.mig_parted_version)  # never plan a name mig-manager cannot parse
    objs = _sort(objects, source)
    warnings: list[str] = []
    rejected: list[tuple[str, str]] = []
    pods: list[Pod] = []
    for obj in objs.pods:
        meta = _meta(obj)
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or '?'}"
        if meta.get("deletionTimestamp"):
            continue
        try:
            pod = pod_from_object(obj, settings)
        except (ValueError, KeyError, TypeError) as e:
            rejected.append((key, f"invalid pod spec: {e}"))
            continue
        if pod.phase in TERMINAL:
            continue
        if pod.pending and pod.scheduler_name == FALLBACK_SCHEDULER:
            continue  # placed by migctl's VRAM-unit scheduler on non-MIG GPUs, not by MIG planning
        pods.append(pod)
    mig_parted, mp_source = None, ""
    for cm in objs.configmaps:
        meta = _meta(cm)
        if meta.get("name") == operator.configmap_name and meta.get("namespace") == operator.configmap_namespace:
            mp_source = f"ConfigMap {operator.configmap_namespace}/{operator.configmap_name}[{operator.configmap_key}]"
            text = (cm.get("data") or {}).get(operator.configmap_key)
            if text is None:
                warnings.append(f"{mp_source}: key missing; current layouts come only from node annotations")
                continue
            try:
                mig_parted = parse(str(text), mp_source, operator.mig_parted_version)
                warnings.extend(f"{mp_source}: {why}" for why in mig_parted.skipped)
            except InputError as e:
                warnings.append(f"{e}; current layouts come only from node annotations")
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        if p.node:
            by_node.setdefault(p.node, []).append(p)
    ctx = _Ctx(catalog, settings, operator, mig_parted, mp_source, warnings)
    nodes = []
    for obj in objs.nodes:
        node = _node(obj, by_node.get(str(_meta(obj).get("name")), []), ctx)
        if node is not None:
            nodes.append(node)
    return Snapshot(tuple(nodes), tuple(pods), tuple(warnings), tuple(rejected))
