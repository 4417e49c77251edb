"""What kube-scheduler and the device plugin do without any MIG manager, and the per-GPU re-cut rules the
simulator's policies share: bind a pending pod to a free instance of the profile it asks for, place multi-GPU
pods on one node, re-cut the free part of a GPU (`relayout`, `option`).

Through the stock device plugin a pod asks for one MIG profile by name (`nvidia.com/mig-1g.10gb: 1`), and
kube-scheduler binds it only where that profile is free: a larger free instance does not serve it. The profile
is the pod's smallest (`Shapes.smallest`): what migctl's webhook writes for a VRAM request
(docs/vram-requests.md), and what a user of a static layout or of nos writes. Only the per-pod allocators
(HAMi, first-fit, best-fit, fgd-mig), which pick the instance themselves, may give a pod a larger one."""

from __future__ import annotations

from collections import Counter

from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.sim.mig import Sim
from migctl.sim.state import Cluster, Placement
from migctl.sim.workloads import Job


def multi_gpu(job: Job) -> bool:
    return job.num_gpu > 1 or job.whole


def bind_free(sim: Sim) -> None:
    """What kube-scheduler and the device plugin do without any MIG manager: each pending single-GPU pod, in
    queue order, takes a free instance of its profile on an open GPU (the first such GPU)."""
    for ji in list(sim.pending):
        bind_one(sim, ji)


def bind_one(sim: Sim, ji: int) -> bool:
    """Bind pending pod `ji` as kube-scheduler would (`bind_free`); whether it bound."""
    cl, job = sim.cl, sim.jobs[ji]
    if multi_gpu(job):
        pl = multi(cl, job, ji, "static", False)
        if pl is not None:
            sim.start(pl)
        return pl is not None
    p = cl.shapes.smallest(job)
    if p is None:
        return False
    gid = next((gid for gid, g in enumerate(cl.gpus) if g.free[p] > 0 and cl.open(gid)), None)
    if gid is not None:
        sim.start(Placement(ji, [(gid, p)]))
    return gid is not None


def relayout(cl: Cluster, gid: int, p: str, mode: str) -> CanonicalLayout | None:
    """New layout of GPU `gid` with a free `p`: only on idle GPUs (`idle`), or keeping used instances
    (`free-slices`). On a tracked GPU (`Cluster(track=True)`) the layout must also be reachable without moving an
    instance in use (`Cluster.spots_after`): NVML creates an instance only where its placement is free."""
    g = cl.gpus[gid]
    busy = sum(g.used.values()) > 0
    if busy and mode != "free-slices":
        return None
    candidates = []
    if mode == "free-slices":
        candidates.append(cl.shapes.completion(canonical(g.layout + Counter({p: 1}))))  # into unpartitioned slices
    candidates.append(cl.shapes.completion(canonical(g.used + Counter({p: 1}))))
    for lay in candidates:
        if lay is not None and (g.spots is None or not busy or cl.spots_after(gid, lay) is not None):
            return lay
    return None


def option(cl: Cluster, gid: int, fits: tuple[str, ...], mode: str) -> tuple[str | None, CanonicalLayout | None]:
    """Smallest fitting profile GPU `gid` can give: a free instance, or (dynamic modes) a re-cut of free slices.
    A static layout serves a pod only with its own profile (`fits[0]`: the pod asks for it by name)."""
    g = cl.gpus[gid]
    for p in fits[:1] if mode == "static" else fits:
        if g.free[p] > 0:
            return p, None
        if mode != "static":
            lay = relayout(cl, gid, p, mode)
            if lay is not None:
                return p, lay
    return None, None


def multi(cl: Cluster, job: Job, ji: int, mode: str, pick_best: bool) -> Placement | None:
    """Full-GPU units on one node: free full instances first, then idle GPUs a re-layout can give one."""
    full = cl.shapes.full.name
    best: tuple[int, Placement] | None = None
    for ids in cl.by_node:
        units: list[tuple[int, str]] = []
        lays: dict[int, CanonicalLayout] = {}
        for gid in ids:
            if cl.gpus[gid].free[full] > 0 and cl.open(gid):
                units.append((gid, full))
        for gid in ids:
            if len(units) >= job.num_gpu or mode == "static":
                break
            g = cl.gpus[gid]
            if g.free[full] == 0 and not g.used and cl.open(gid):
                lays[gid] = ((full, 1),)
                units.append((gid, full))
        if len(units) >= job.num_gpu:
            units = units[: job.num_gpu]
            used_ids = {u[0] for u in units}
            pl = Placement(ji, units, {k: v for k, v in lays.items() if k in used_ids})
            if not pick_best:
                return pl
            spare = sum(1 for gid in ids if not cl.gpus[gid].used) - job.num_gpu
            if best is None or spare < best[0]:
                best = (spare, pl)
    return None if best is None else best[1]
