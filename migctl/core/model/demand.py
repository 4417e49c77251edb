"""Demand math: which profiles can serve a GPU request, and a pod's effective requests.

Kubernetes computes a pod's effective request per resource as the larger of (the sum over app containers) and
(the largest init container), plus pod overhead; extended resources such as `nvidia.com/mig-1g.10gb` follow the
same rule. The planner uses the result, so an init container that needs a whole GPU counts.

VRAM requests (`migctl.io/vram`) are not counted that way: each container that asks for VRAM gets an instance
of its own, so a pod's VRAM demand is a list of instances (`shared_instances`), the rule the admission webhook
follows when it writes the MIG resources (docs/vram-requests.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal

from migctl.core.hardware.catalog import GpuModel, Profile
from migctl.core.model.cluster import GpuDemand

WHOLE_GPU = "gpu"


def effective_requests(
    containers: Sequence[Mapping[str, Decimal]],
    init_containers: Sequence[tuple[Mapping[str, Decimal], bool]] = (),
    overhead: Mapping[str, Decimal] | None = None,
) -> dict[str, Decimal]:
    """Effective pod requests per resource, as the scheduler computes them.

    `init_containers` are `(requests, restartable)` in order; restartable ones are sidecars that keep running,
    so they add to the app containers and to every init container started after them.
    """
    sidecars: dict[str, Decimal] = {}
    init_peak: dict[str, Decimal] = {}
    for req, restartable in init_containers:
        if restartable:
            for k, v in req.items():
                sidecars[k] = sidecars.get(k, Decimal(0)) + v
            for k, v in sidecars.items():
                init_peak[k] = max(init_peak.get(k, Decimal(0)), v)
        else:
            for k, v in req.items():
                init_peak[k] = max(init_peak.get(k, Decimal(0)), v + sidecars.get(k, Decimal(0)))
    out: dict[str, Decimal] = dict(sidecars)
    for c in containers:
        for k, v in c.items():
            out[k] = out.get(k, Decimal(0)) + v
    for k, v in init_peak.items():
        out[k] = max(out.get(k, Decimal(0)), v)
    for k, v in (overhead or {}).items():
        out[k] = out.get(k, Decimal(0)) + v
    return out


def profiles_for(model: GpuModel, demand: GpuDemand) -> tuple[Profile, ...]:
    """Profiles of `model` that can serve one unit of `demand`, smallest memory first."""
    if demand.kind == "profile":
        return tuple(p for p in model.profiles if p.name == demand.profile)
    if demand.kind == "vram":
        fits = [p for p in model.base_profiles if p.memory_mib >= demand.vram_mib]
        return tuple(sorted(fits, key=lambda p: (p.memory_mib, p.compute_slices, p.name)))
    return ()


def need_mib(demand: GpuDemand, profile_mib: int, annotated: int | None) -> int:
    """What the pod really needs from one instance: the annotation, the VRAM request, or the whole instance."""
    if annotated is not None:
        return min(annotated, profile_mib)
    if demand.kind == "vram":
        return min(demand.vram_mib, profile_mib)
    return profile_mib


def largest_instance_mib(models: Iterable[GpuModel]) -> int:
    return max((p.memory_mib for m in models for p in m.base_profiles), default=0)


def shared_instances(inits: Sequence[tuple[int, bool]], apps: Sequence[int]) -> tuple[list[int], list[int]]:
    """The GPU instances a pod holds when each container with a VRAM request gets one, and which one each uses.

    `inits` are `(MiB, restartable)` in spec order, `apps` the app containers' MiB (0: no request). Returns
    (MiB each instance must hold, the instance index of each container: inits then apps; -1 without a request).

    App containers and sidecars (restartable init containers) run side by side: one instance each. A plain init
    container runs alone before the app containers, and the kubelet hands its device on to a later container of
    the same resource; Kubernetes counts it at max(init, sum of app containers + sidecars) for the pod's whole
    life. So a plain init container shares the largest instance of a container declared after it (a later
    sidecar or an app container), which grows to hold it: that instance's profile then covers both, and the
    effective request counts one instance, not two. Plain init containers with no later container share one
    instance of their own. `effective_requests` of the resulting profiles is exactly one per instance.
    """
    sizes: list[int] = []
    owner: list[int] = []  # the container position (inits then apps) that opened each instance
    where = [-1] * (len(inits) + len(apps))
    for pos, (mib, restartable) in enumerate(inits):
        if mib > 0 and restartable:
            where[pos] = len(sizes)
            sizes.append(mib)
            owner.append(pos)
    for i, mib in enumerate(apps):
        if mib > 0:
            where[len(inits) + i] = len(sizes)
            sizes.append(mib)
            owner.append(len(inits) + i)
    alone = -1  # the instance of plain init containers with no later container
    for pos, (mib, restartable) in enumerate(inits):
        if mib <= 0 or restartable:
            continue
        later = [k for k in range(len(sizes)) if owner[k] > pos]
        if later:
            k = max(later, key=lambda k: (sizes[k], -owner[k]))  # the largest; the first declared on a tie
        else:
            if alone < 0:
                alone = len(sizes)
                sizes.append(0)
                owner.append(-1)
            k = alone
        sizes[k] = max(sizes[k], mib)
        where[pos] = k
    return sizes, where
