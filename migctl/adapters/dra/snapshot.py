"""A DRA cluster in the planner's snapshot: nodes whose GPUs NVIDIA's DRA driver serves, and pods that ask through
ResourceClaims.

Why a second reading of nodes: on a DRA node the device plugin advertises nothing, so allocatable and GFD's
counts say nothing about MIG. The node's ResourceSlices say which GPUs and MIG devices exist (static MIG) or may
be made (DynamicMIG), and allocated claims say which are in use: an allocated device is in use whether or not a
process runs on it. The Node object still gives capacity, labels and taints (`nodes.capacity`).

What each mode becomes for the planner:
* static MIG: each GPU's MIG devices are its layout, the instances where their names place them, in use when
  allocated. The node is planned in place (free instances re-cut, used ones fixed) where migctl's agent runs
  there (opted in, `migctl.io/actuation=in-place`), else frozen: nothing else would re-cut it;
* DynamicMIG: a GPU holds only its allocated partitions, the rest is open to any placement; its re-cuts are
  made by the driver at allocation, steered by migctl's fences (`reconcile/step.py`).
A pod's claims become its GPU demand (`core/dra/claims.py`); a claim migctl cannot read costs only its pod, which
is rejected with the object, the field and why.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from migctl.adapters.dra.claims import ClaimReading, pod_claims, read_claims
from migctl.adapters.dra.deviceclasses import class_for_resource, extended_claim, read_device_classes
from migctl.adapters.dra.operator import OperatorReading, read_operator
from migctl.adapters.dra.slices import read_slices
from migctl.adapters.dra.taintrules import owned_rules, placement_fences
from migctl.adapters.nodes import NodeContext, basics
from migctl.adapters.views import as_mapping
from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec, claim_demand, merge
from migctl.core.dra.devices import DeviceId, DraGpu, Mode, NodePool, ObjectProblem
from migctl.core.hardware.catalog import Catalog
from migctl.core.hardware.naming import profile_from_resource
from migctl.core.model.cluster import Gpu, GpuDemand, Instance, Node, Pod
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.settings import PlannerSettings
from migctl.wire.names import ACTUATION, IN_PLACE

DRA_KINDS = frozenset(
    {"ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "DeviceTaintRule", "GPUCluster",
     "ClusterPolicy"}
)  # fmt: skip


@dataclass(frozen=True)
class DraReading:
    """Everything migctl reads of a cluster's DRA objects, for the snapshot and the reconcile's fences."""

    pools: Mapping[str, NodePool] = field(default_factory=dict)  # by node
    claims: ClaimReading = field(default_factory=lambda: ClaimReading({}))
    classes: Mapping[str, DeviceClassSpec] = field(default_factory=dict)
    operator: OperatorReading = field(default_factory=lambda: OperatorReading("none"))
    fences: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # node -> devices migctl's rules fence
    problems: tuple[ObjectProblem, ...] = ()
    queue: Mapping[str, tuple[ClaimSpec, ...]] = field(default_factory=dict)  # pending pod -> claims to allocate

    @property
    def allocated(self) -> frozenset[DeviceId]:
        return self.claims.in_use


def read_dra(objects: Iterable[Mapping[str, Any]], catalog: Catalog) -> DraReading:
    """The DRA objects among `objects`, read; each bad one is a problem that costs only itself."""
    by_kind: dict[str, list[Mapping[str, Any]]] = {k: [] for k in DRA_KINDS}
    for o in objects:
        kind = o.get("kind")
        if isinstance(kind, str) and kind in by_kind:
            by_kind[kind].append(o)
    slices = read_slices(by_kind["ResourceSlice"], catalog)
    claims = read_claims(by_kind["ResourceClaim"], by_kind["ResourceClaimTemplate"])
    classes = read_device_classes(by_kind["DeviceClass"])
    operator = read_operator([*by_kind["GPUCluster"], *by_kind["ClusterPolicy"]])
    return DraReading(
        pools={p.node: p for p in slices.pools},
        claims=claims,
        classes=classes.classes,
        operator=operator,
        fences=placement_fences(owned_rules(by_kind["DeviceTaintRule"])),
        problems=(*slices.problems, *claims.problems, *classes.problems, *operator.problems),
    )


# -- pods ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PodDemand:
    """A pod's DRA demand: its claims still to allocate (for first fit), their GPU demand, or why it cannot be
    planned. `allocated`: every claim of the pod is allocated already (it binds where they are: not planned)."""

    claims: tuple[ClaimSpec, ...] = ()
    gpu: tuple[GpuDemand, ...] = ()
    problem: str = ""
    allocated: bool = False


def pod_demand(obj: Mapping[str, Any], pod: Pod, dra: DraReading, catalog: Catalog) -> PodDemand | None:
    """The DRA demand of a pod that asks through claims or through an extended resource a DeviceClass maps (None:
    it does neither, the device plugin's reading stands)."""
    spec = as_mapping(obj.get("spec"))
    claimed = bool(spec.get("resourceClaims"))
    extended = _extended_claims(obj, pod, dra.classes)
    if not claimed and not extended:
        return None
    pending: list[ClaimSpec] = []
    allocated = False
    if claimed:
        pc = pod_claims(obj, dra.claims)
        if pc.problems:
            return PodDemand(problem="; ".join(map(str, pc.problems)))
        pending += pc.pending
        allocated = not pc.pending and bool(pc.allocated)
    pending += extended
    demands: list[GpuDemand] = []
    for c in pending:
        d = claim_demand(c, dra.classes, catalog)
        if d.problems:
            return PodDemand(claims=tuple(pending), problem="; ".join(map(str, d.problems)))
        if d.same_gpu and sum(g.count for g in d.gpu) > 1:
            return PodDemand(
                claims=tuple(pending),
                problem=f"claim {c.key}: a constraint keeps its {sum(g.count for g in d.gpu)} devices on one GPU "
                "(matchAttribute gpu.nvidia.com/parentUUID); migctl plans such claims' devices on one node, not on "
                "one GPU, so it leaves them to the scheduler",
            )
        demands += d.gpu
    return PodDemand(tuple(pending), merge(demands), allocated=allocated)


def _extended_claims(obj: Mapping[str, Any], pod: Pod, classes: Mapping[str, DeviceClassSpec]) -> list[ClaimSpec]:
    """The claims the scheduler makes for a pending pod's `nvidia.com/mig-*` requests that a DeviceClass serves
    (`extendedResourceName`, DRA extended resources): first fit reads them like any claim."""
    if not pod.pending or not classes:
        return []
    spec = as_mapping(obj.get("spec"))
    listed = spec.get("containers")
    containers: list[Any] = listed if isinstance(listed, list) else []
    out = []
    for ci, c in enumerate(containers):
        res = as_mapping(as_mapping(c).get("resources"))
        asked = res.get("limits") or res.get("requests") or {}
        for ri, (name, value) in enumerate(sorted(asked.items()) if isinstance(asked, Mapping) else ()):
            cls = class_for_resource(classes, str(name)) if profile_from_resource(str(name)) else None
            if cls is not None and str(value).isdigit():
                out.append(extended_claim(pod.namespace, pod.name, ci, ri, int(str(value)), cls))
    return out


def with_claims(
    pods: list[Pod],
    objs: Mapping[str, Mapping[str, Any]],
    dra: DraReading,
    catalog: Catalog,
    rejected: list[tuple[str, str]],
    ctx: NodeContext,
) -> tuple[list[Pod], DraReading]:
    """The pods with their claims' demand (a pending pod whose claims cannot be read is rejected, one whose claims
    are all allocated is about to bind and is left out), and the reading with the pending pods' claims."""
    for problem in dra.problems:
        kind, name, message = problem.as_tuple()
        ctx.warn(f"{kind} {name}", message, kind)
    by_claim: dict[str, list[DeviceId]] = {}
    for a in dra.claims.allocations:
        by_claim.setdefault(a.claim, []).append(a.device)
    minors = {d.id: d.minor for pool in dra.pools.values() for d in pool.devices}
    out: list[Pod] = []
    queue: dict[str, tuple[ClaimSpec, ...]] = {}
    for pod in pods:
        obj = objs.get(pod.key)
        demand = pod_demand(obj, pod, dra, catalog) if obj is not None else None
        if demand is None:
            out.append(pod)
            continue
        if pod.pending:
            if demand.problem:
                rejected.append((pod.key, demand.problem))
            elif not demand.allocated:
                out.append(replace(pod, gpu=demand.gpu))
                queue[pod.key] = demand.claims
            continue
        held = pod_claims(obj, dra.claims).allocated if obj is not None else ()
        specs = [dra.claims.claims[c] for c in held if c in dra.claims.claims]
        gpu = merge([g for c in specs for g in claim_demand(c, dra.classes, catalog).gpu])
        where = {minors.get(d) for c in held for d in by_claim.get(c, ())}
        index = next(iter(where)) if len(where) == 1 else None
        out.append(replace(pod, gpu=gpu or pod.gpu, gpu_index=index if index is not None else pod.gpu_index))
    return out, replace(dra, queue=queue)


# -- nodes -----------------------------------------------------------------------------------------------


def dra_node(
    obj: Mapping[str, Any] | None,
    pool: NodePool,
    pods_on_node: Iterable[Pod],
    dra: DraReading,
    settings: PlannerSettings,
    opted_in: Callable[[Mapping[str, str]], bool],
) -> tuple[Node | None, str]:
    """The planner's node for a DRA pool (and its Node object, when the snapshot has one); (None, why) when no GPU
    of it matches the catalog."""
    gpus = [g for g in pool.gpus if g.model is not None]
    if not gpus:
        return None, f"none of its {len(pool.gpus)} GPU(s) matches the profile catalog (ResourceSlice productName)"
    model = gpus[0].model
    assert model is not None
    cap = basics(obj) if obj is not None else None
    labels = cap.labels if cap is not None else {}
    in_use = dra.allocated
    planned: list[Gpu] = []
    free: Counter[str] = Counter()
    whole_free = 0
    for g in gpus:
        gpu, g_free, g_whole = _gpu(g, pool.mode, in_use)
        planned.append(gpu)
        free += g_free
        whole_free += g_whole
    on = tuple(pods_on_node)
    gpu_pods = tuple((p.key, p.priority, p.gpu_index) for p in on if p.gpu)
    frozen = ""
    if pool.mode is Mode.STATIC and not opted_in(labels):
        frozen = (
            f"a static-MIG DRA node: migctl re-cuts its MIG devices only where its agent runs (label "
            f"{ACTUATION}={IN_PLACE})"
        )
    if not pool.complete:
        frozen = frozen or f"NVIDIA's DRA driver is publishing its ResourceSlices (pool {pool.name} incomplete)"
    base = Node(
        name=pool.node,
        labels=labels,
        model=model,
        gpus=tuple(planned),
        mig_free=dict(free),
        whole_free=whole_free,
        usage_known=True,
        frozen_reason=frozen,
        gpu_pods=gpu_pods,
        in_place=True,
        dra="dynamic" if pool.mode is Mode.DYNAMIC else "static",
    )
    if cap is not None:
        base = replace(
            base, taints=cap.taints, unschedulable=cap.unschedulable, allocatable=cap.allocatable,
            used=sum((p.requests for p in on), start=base.used),
        )  # fmt: skip
    return base, ""


def _gpu(g: DraGpu, mode: Mode, in_use: frozenset[DeviceId]) -> tuple[Gpu, Counter[str], int]:
    """One GPU as the planner reads it, its free MIG devices by profile, whether its whole device is free."""
    whole = g.whole
    whole_taken = whole is not None and whole.id in in_use
    migs = [d for d in g.migs if d.profile]
    taken = [d for d in migs if d.id in in_use]
    if mode is Mode.DYNAMIC:
        if whole_taken:
            return Gpu(g.minor, GpuConfig.disabled(), {}, True, None), Counter(), 0
        shown = taken  # a partition exists only while allocated; the rest is open to any placement
        free: Counter[str] = Counter()
    else:
        if not migs and whole is not None:  # MIG off: the whole GPU is the device
            return Gpu(g.minor, GpuConfig.disabled(), {}, whole_taken, None), Counter(), int(not whole_taken)
        shown = migs
        free = Counter(d.profile for d in migs if d.id not in in_use and not d.taints)
    used = Counter(d.profile for d in taken)
    placed = all(d.placement is not None for d in shown)
    instances = (
        tuple(
            Instance(d.profile, d.placement.start, d.placement.size, d.id in in_use)
            for d in sorted(shown, key=lambda d: d.placement.start if d.placement else 0)
            if d.placement is not None
        )
        if placed
        else None
    )
    config = GpuConfig.mig(Counter(d.profile for d in shown))
    return Gpu(g.minor, config, dict(used), False, instances), free, 0
