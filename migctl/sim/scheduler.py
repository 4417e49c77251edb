"""What kube-scheduler and the device plugin do without any MIG manager, and the per-GPU re-cut rules the
simulator's policies share: bind a pending pod to the smallest free instance that covers it, place multi-GPU
pods on one node, re-cut the free part of a GPU (`relayout`, `option`)."""

from __future__ import annotations

from collections import Counter

from migctl.core.geometry import CanonicalLayout, canonical
from migctl.sim.mig import Sim
from migctl.sim.state import Cluster, GpuState, Placement
from migctl.sim.workloads import Job


def multi_gpu(job: Job) -> bool:
    return job.num_gpu > 1 or job.whole


def bind_free(sim: Sim, exact: bool = False) -> None:
    """What kube-scheduler and the device plugin do without any MIG manager: each pending single-GPU pod, in
    queue order, takes the smallest free instance that covers it on an open GPU (the first such GPU). `exact`:
    only its smallest profile, as a pod whose VRAM request migctl's webhook has rewritten to that profile asks
    (docs/vram-requests.md)."""
    cl = sim.cl
    for ji in list(sim.pending):
        job = sim.jobs[ji]
        if multi_gpu(job):
            pl = multi(cl, job, ji, "static", False)
            if pl is not None:
                sim.start(pl)
            continue
        best: tuple[int, int, str] | None = None
        fits = cl.shapes.fitting(job.vram_mib)
        for p in fits[:1] if exact else fits:
            for gid, g in enumerate(cl.gpus):
                if g.free[p] > 0 and cl.open(gid):
                    best = (cl.shapes.mem[p], gid, p)
                    break
            if best is not None:
                break
        if best is not None:
            sim.start(Placement(ji, [(best[1], best[2])]))


def relayout(cl: Cluster, g: GpuState, p: str, mode: str) -> CanonicalLayout | None:
    """New layout of `g` with a free `p`: only on idle GPUs (`idle`), or keeping used instances (`free-slices`)."""
    busy = sum(g.used.values()) > 0
    if busy and mode != "free-slices":
        return None
    if mode == "free-slices":
        grown = cl.shapes.completion(canonical(g.layout + Counter({p: 1})))  # add into unpartitioned slices
        if grown is not None:
            return grown
    return cl.shapes.completion(canonical(g.used + Counter({p: 1})))


def option(cl: Cluster, g: GpuState, fits: tuple[str, ...], mode: str) -> tuple[str | None, CanonicalLayout | None]:
    """Smallest fitting profile this GPU can give: a free instance, or (dynamic modes) a re-cut of free slices."""
    for p in fits:
        if g.free[p] > 0:
            return p, None
        if mode != "static":
            lay = relayout(cl, g, p, mode)
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
