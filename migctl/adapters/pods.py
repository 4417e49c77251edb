"""Pod objects -> planner `Pod`s: effective requests, GPU demand, scheduling constraints, read strictly.

Split from `objects.py` (nodes and the snapshot). Every quantity goes through `core/text/quantity.py`, every field
through `fields.py`, so a bad pod raises ValueError or TypeError naming the field and the value, and the caller
turns it into that pod's rejection (or, for a bound pod, into its node's unknown usage).
"""

from __future__ import annotations

import marshal
import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from migctl.adapters.fields import items, mapping, maps, short
from migctl.adapters.requests import ContainerRequests, effective, read_containers, read_overhead
from migctl.core.hardware.naming import profile_from_resource
from migctl.core.model.cluster import GpuDemand, Pod, Requirement, Resources, Term, Toleration
from migctl.core.model.demand import shared_instances
from migctl.core.model.settings import PlannerSettings
from migctl.core.text import label_values
from migctl.core.text.label_values import MAX_GPUS_PER_NODE, MAX_INSTANCES_PER_POD
from migctl.core.text.quantity import MIB, parse_quantity, to_count
from migctl.wire.names import GPU_INDEX as GPU_INDEX_ANNOTATION  # written by migctl's fallback scheduler
from migctl.wire.names import QUEUE_GATE, WHOLE_GPU_RESOURCE, is_nvidia

_INT = re.compile(r"^-?[0-9]{1,10}$")
_dumps = marshal.dumps


def meta_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata") or {}
    return meta if type(meta) is dict or isinstance(meta, Mapping) else {}  # a dict: no ABC check (28,000 a snapshot)


def quantity_at(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


# ---------------------------------------------------------------------------------------------------------
# Pods


_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


def _requirements(value: Any, where: str) -> tuple[Requirement, ...]:
    """Node selector requirements; a missing key or an unknown operator names the field (the API server refuses
    both, so a snapshot that has them was edited by hand)."""
    out = []
    for i, e in enumerate(maps(value, where)):
        key, op = e.get("key"), e.get("operator")
        if not isinstance(key, str) or not key:
            raise ValueError(f"{where}[{i}].key: {short(key)}; expected a label key")
        if op not in _OPERATORS:
            raise ValueError(f"{where}[{i}].operator: {short(op)}; expected one of {', '.join(_OPERATORS)}")
        values = items(e.get("values"), f"{where}[{i}].values")
        out.append(Requirement(key, str(op), tuple(str(v) for v in values)))
    return tuple(out)


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_TERMS_AT = f"spec.affinity.nodeAffinity.{_REQUIRED}"


def _terms(pod_spec: Mapping[str, Any]) -> tuple[Term, ...]:
    affinity = pod_spec.get("affinity")
    if affinity is None:
        return ()  # most pods: nothing to read
    affinity = mapping(affinity, "spec.affinity")
    na = mapping(mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity").get(_REQUIRED), _TERMS_AT)
    terms = []
    for i, t in enumerate(maps(na.get("nodeSelectorTerms"), f"{_TERMS_AT}.nodeSelectorTerms")):
        at = f"{_TERMS_AT}.nodeSelectorTerms[{i}]"
        exprs = _requirements(t.get("matchExpressions"), f"{at}.matchExpressions")
        terms.append(Term(exprs, _requirements(t.get("matchFields"), f"{at}.matchFields")))
    return tuple(terms)


def _to_int(value: Decimal, where: str, maximum: int) -> int:
    try:
        return to_count(value, maximum, "per pod: more than any node offers")
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from e


def _vram_demands(
    containers: Sequence[Mapping[str, Decimal]], inits: Sequence[tuple[Mapping[str, Decimal], bool]], res: str
) -> list[GpuDemand]:
    """One instance per container with a VRAM request, plain init containers sharing (`shared_instances`)."""

    def mib(r: Mapping[str, Decimal]) -> int:
        return max(0, math.ceil(r.get(res, _ZERO) / MIB))

    sizes, _ = shared_instances([(mib(r), restartable) for r, restartable in inits], [mib(r) for r in containers])
    if len(sizes) == 1:
        return [GpuDemand("vram", 1, vram_mib=sizes[0])]
    return [GpuDemand("vram", n, vram_mib=m) for m, n in sorted(Counter(sizes).items())]


_ZERO = Decimal(0)


Shapes = dict[bytes, tuple[tuple[GpuDemand, ...], Resources]]


Doubts = list[tuple[str, str]]  # (resource, why its value cannot be read) of a bound pod


def holds_devices(resource: str, vram: str) -> bool:
    """Whether a resource may stand for GPU devices (or a share of one): nvidia.com resources and the VRAM
    resource. A bound pod's unreadable value of one may hold a device, where its node offers that resource."""
    return resource == vram or is_nvidia(resource)


def _requests(
    spec: Mapping[str, Any], notes: list[str] | None, doubts: Doubts | None, vram: str
) -> tuple[tuple[GpuDemand, ...], Resources]:
    """The pod's GPU demand and its CPU, memory and pod-slot request, from its containers and overhead.

    Without `notes` (a pending pod) any value that cannot be read raises. With them (a bound pod, which holds
    what it holds), it is read resource by resource: an unreadable value of a resource that may hold a GPU
    device goes to `doubts` (the snapshot asks its node whether it offers that resource), any other to `notes`,
    and the pod counts by the values that can be read."""
    apps, inits = read_containers(spec)
    for c in (*apps, *inits):
        for res in c.unreadable:
            if notes is None or doubts is None:
                raise ValueError(c.problem(res))
            if holds_devices(res, vram):
                doubts.append((res, c.problem(res)))
            else:
                notes.append(f"{c.problem(res)}; ignored (it holds no GPU)")
    eff = effective(apps, inits, read_overhead(spec))
    demands: list[GpuDemand] = []
    for res, value in sorted(eff.items()):
        if not value:
            continue
        try:
            demands.extend(_demand(res, value, apps, inits, vram))
        except ValueError as e:
            if notes is None or doubts is None:
                raise
            doubts.append((res, str(e)))
    cpu_m, memory = math.ceil(eff.get("cpu", _ZERO) * 1000), math.ceil(eff.get("memory", _ZERO))
    return tuple(demands), Resources(cpu_m, memory, 1)


def _demand(
    res: str, value: Decimal, apps: Sequence[ContainerRequests], inits: Sequence[ContainerRequests], vram: str
) -> list[GpuDemand]:
    """The GPU demand of one resource's effective request; ValueError naming it when it cannot be one."""
    profile = profile_from_resource(res)
    if profile is not None:
        return [GpuDemand("profile", _to_int(value, f"resources[{res}]", MAX_INSTANCES_PER_POD), profile=profile)]
    if res == WHOLE_GPU_RESOURCE:
        return [GpuDemand("gpu", _to_int(value, f"resources[{res}]", MAX_GPUS_PER_NODE))]
    if res == vram:
        if value <= 0:
            raise ValueError(f"resources[{res}]: {value} is not a positive amount of memory")
        return _vram_demands([c.values for c in apps], [(c.values, c.restartable) for c in inits], res)
    return []


def _shape(spec: Mapping[str, Any]) -> bytes | None:
    """What `_requests` reads of a pod, as a key: the containers' resources (and each init container's
    restartPolicy) in `marshal`'s encoding, when there is no overhead; None when they hold something marshal
    cannot write (not a plain dict, list, str, number, bool or None). marshal writes each value with its type
    and reads it back exactly, so equal keys are equal readings: `1`, `1.0` and `true` differ, as they do to
    the parser (and C writes the key faster than Python builds a tuple of the pairs and their types)."""
    if spec.get("overhead") is not None:
        return None
    containers, inits = spec.get("containers"), spec.get("initContainers")
    try:
        return _dumps(
            (
                None if containers is None else [c.get("resources") for c in containers],
                None if inits is None else [(c.get("resources"), c.get("restartPolicy")) for c in inits],
            )
        )
    except (AttributeError, TypeError, ValueError):  # not a list of objects, or not plain values: the long way
        return None


def pod_from_object(
    obj: Mapping[str, Any],
    settings: PlannerSettings,
    notes: list[str] | None = None,
    shapes: Shapes | None = None,
    doubts: Doubts | None = None,
) -> Pod:
    """Translate one Pod; raises ValueError/TypeError naming the field on nonsense (the caller records a
    rejection). A bad `migctl.io/vram` annotation (the real need) only matters to a pending pod: on a bound pod,
    with `notes` given, it is noted there and the pod still counts by its resources (it holds them); so is an
    unreadable value of a resource that holds no GPU, and one of a resource that may (`doubts`, see
    `_requests`).

    A snapshot holds thousands of pods, so the common case (fields absent or of the right type) is read without
    building the paths that only an error message needs; and with `shapes` (one dict per snapshot and planner
    settings) pods whose containers request alike (replicas) have their requests read once. Only a reading
    that raised nothing and noted nothing is kept there: any problem is found, and said, for every pod."""
    meta, spec = meta_of(obj), mapping(obj.get("spec"), "spec")
    status = mapping(obj.get("status"), "status")
    bound = spec.get("nodeName")
    lenient = notes if bound else None
    doubted: Doubts | None = None if lenient is None else (doubts if doubts is not None else [])
    key = _shape(spec) if shapes is not None else None
    known = shapes.get(key) if shapes is not None and key is not None else None
    if known is None:
        said = _said(lenient, doubted)
        known = _requests(spec, lenient, doubted, settings.vram_resource)
        if shapes is not None and key is not None and _said(lenient, doubted) == said:
            shapes[key] = known  # only a reading that noted nothing is shared
    demands, requests = known
    annotations = mapping(meta.get("annotations"), "metadata.annotations")
    need = None
    if demands and settings.vram_annotation in annotations:  # the real need matters only to a GPU pod
        where = f"metadata.annotations[{settings.vram_annotation}]"
        try:
            value = quantity_at(annotations[settings.vram_annotation], where)
            if value <= 0:
                raise ValueError(f"{where}: {value} is not a positive amount of memory (expected e.g. 6Gi)")
            need = math.ceil(value / MIB)
        except ValueError:
            if notes is None or not bound:
                raise
            notes.append(f"{where}: {short(annotations[settings.vram_annotation])} unreadable; ignored")
    conditions = status.get("conditions")
    scheduled: Mapping[str, Any] = {}
    for c in () if conditions is None else maps(conditions, "status.conditions"):
        if c.get("type") == "PodScheduled":
            scheduled = c
            break
    priority = spec.get("priority") or 0
    if type(priority) is not int:  # exactly int (a bool is not a priority): the common case, checked once
        if isinstance(priority, str) and _INT.match(priority):
            priority = int(priority)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError(f"spec.priority: {short(priority)} is not a 32-bit integer")
    if abs(priority) > 2**31:
        raise ValueError(f"spec.priority: {short(priority)} is not a 32-bit integer")
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        priority=priority,
        node=str(bound) if bound else None,
        phase=str(status.get("phase") or "Pending"),
        requests=requests,
        gpu=demands,
        need_mib=need,
        node_selector=_node_selector(spec),
        affinity=_terms(spec),
        tolerations=_tolerations(spec),
        unschedulable=scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable",
        created=str(meta.get("creationTimestamp") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        gpu_index=_gpu_index(annotations),
        gated=False if bound else _gated(spec),
        other_gates=False if bound else _other_gates(spec),
    )


def _gated(spec: Mapping[str, Any]) -> bool:
    """Whether `spec.schedulingGates` holds migctl's queue gate. Read strictly (each gate an object with a
    non-empty string `name`): a malformed list is that pod's rejection, naming the field. A bound pod's gates are
    never read (the API server allows none once a pod has a node, and they cannot matter then)."""
    gates = spec.get("schedulingGates")
    if gates is None:
        return False
    for i, g in enumerate(maps(gates, "spec.schedulingGates")):
        name = g.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"spec.schedulingGates[{i}].name: {short(name)}; expected a gate name")
    return queue_gate_at(spec) is not None


def _other_gates(spec: Mapping[str, Any]) -> bool:
    """Whether `spec.schedulingGates` holds a gate other than migctl's (Kueue's admission gate, say): such a pod
    is not bound when migctl lifts its own, so the queue never claims an instance for it. Called after `_gated`,
    which has read the list strictly."""
    gates = spec.get("schedulingGates") or []
    return any(g.get("name") != QUEUE_GATE for g in gates)


def queue_gate_at(spec: Mapping[str, Any]) -> int | None:
    """Where migctl's queue gate sits in `spec.schedulingGates`; None when it is not there or the list is not
    one. Lenient, for the webhook and the lifting, which must not fail on another component's odd gate."""
    gates = spec.get("schedulingGates")
    if not isinstance(gates, list):
        return None
    return next((i for i, g in enumerate(gates) if isinstance(g, Mapping) and g.get("name") == QUEUE_GATE), None)


def gpu_demand(obj: Mapping[str, Any], vram_resource: str) -> tuple[GpuDemand, ...]:
    """A pending pod's GPU demand as the planner reads it (the one request parser); raises ValueError or
    TypeError naming the field when a request cannot be read. For the webhook, which gates profile pods."""
    return _requests(mapping(obj.get("spec"), "spec"), None, None, vram_resource)[0]


def _said(notes: list[str] | None, doubts: Doubts | None) -> tuple[int, int]:
    return (len(notes) if notes is not None else 0, len(doubts) if doubts is not None else 0)


def _node_selector(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    if spec.get("nodeSelector") is None:
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in mapping(spec.get("nodeSelector"), "spec.nodeSelector").items()))


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    if spec.get("tolerations") is None:
        return ()
    return tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in maps(spec.get("tolerations"), "spec.tolerations")
    )


def placement_from_object(obj: Mapping[str, Any]) -> Pod:
    """Only what decides where a pod may run (nodeSelector, required node affinity, tolerations): for the
    admission webhook, which must place a pod whose resources it is about to rewrite. Raises ValueError or
    TypeError naming the field on a malformed affinity, as `pod_from_object` does."""
    meta, spec = meta_of(obj), mapping(obj.get("spec"), "spec")
    return Pod(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        node_selector=_node_selector(spec),
        affinity=_terms(spec),
        tolerations=_tolerations(spec),
    )


def _gpu_index(annotations: Mapping[str, Any]) -> int | None:
    """The GPU migctl's fallback scheduler chose for the pod (annotation), if any."""
    if not annotations:
        return None
    return label_values.gpu_index_or_none(annotations.get(GPU_INDEX_ANNOTATION))
