"""The policies migctl is compared with (docs/simulation.md §2 says what each real system does and pays).

* static layouts (`static-*`): never change; pods take the smallest free instance that fits.
* `first-fit`, `best-fit`: smallest fitting instance on the first / tightest GPU, re-cutting the *free* part of a
  busy GPU through NVML when no free instance fits (more freedom than the stock mig-manager gives anyone).
* `hami`: HAMi v2.10's dynamic MIG: one instance created per pod at allocation, smallest fitting profile with a
  free placement, 1g/3g placed high and the others low, destroyed when the pod leaves; no cluster planner.
* `nos`: nebuly nos: batches unschedulable pods (10 s idle / 60 s), computes the cluster-wide lacking profiles,
  and per node (by name) re-cuts the *free* part of each GPU to the geometry providing most of them (ties at
  random: nos takes Go's map order; it has no waste or flexibility term); its agent
  deletes only free devices, creates the new ones through NVML and restarts the device plugin (node-wide).
Per-GPU NVML creation closes only that GPU for `Sim.create_s`; nos's device-plugin restart closes its node for a
drawn reconfiguration time, like a relabel.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from migctl.controller.guards import BatchWindow
from migctl.core.geometry import CanonicalLayout, canonical
from migctl.sim.mig import Policy, Sim
from migctl.sim.state import Cluster, GpuState, Placement
from migctl.sim.workloads import Job

NOS_BATCH_IDLE_S = 10.0  # nos batchWindowIdleSeconds
NOS_BATCH_TIMEOUT_S = 60.0  # nos batchWindowTimeoutSeconds


def multi_gpu(job: Job) -> bool:
    return job.num_gpu > 1 or job.whole


def bind_free(sim: Sim) -> None:
    """What kube-scheduler and the device plugin do without any MIG manager: each pending single-GPU pod, in
    queue order, takes the smallest free instance that covers it on an open GPU (the first such GPU)."""
    cl = sim.cl
    for ji in list(sim.pending):
        job = sim.jobs[ji]
        if multi_gpu(job):
            pl = multi(cl, job, ji, "static", False)
            if pl is not None:
                sim.start(pl)
            continue
        best: tuple[int, int, str] | None = None
        for p in cl.shapes.fitting(job.vram_mib):
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


class Greedy(Policy):
    """first-fit / best-fit on instances (free slices re-cut through NVML), and the static layouts (never re-cut)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.mode = "static" if name.startswith("static") else "free-slices"

    def step(self, sim: Sim) -> None:
        cl = sim.cl
        for ji in list(sim.pending):
            job = sim.jobs[ji]
            if multi_gpu(job):
                pl = multi(cl, job, ji, self.mode, self.name != "first-fit")
                if pl is not None:
                    sim.create(pl)
                continue
            fits = cl.shapes.fitting(job.vram_mib)
            choice: tuple[tuple[int, ...], int, str, CanonicalLayout | None] | None = None
            for gid, g in enumerate(cl.gpus):
                if not cl.open(gid):
                    continue
                p, lay = option(cl, g, fits, self.mode)
                if p is None:
                    continue
                if self.name == "first-fit":
                    choice = ((0,), gid, p, lay)
                    break
                after = (Counter(dict(lay)) if lay else g.layout) - g.used
                after[p] -= 1
                rank = (cl.shapes.mem[p], 1 if lay else 0, cl.instance_mib(after), gid)  # best fit: least left
                if choice is None or rank < choice[0]:
                    choice = (rank, gid, p, lay)
            if choice is None:
                continue
            _, gid, p, lay = choice
            sim.create(Placement(ji, [(gid, p)], {gid: lay} if lay else {}))


class Hami(Policy):
    """HAMi v2.10 dynamic MIG: an instance per pod, created at allocation at a concrete placement; no planner.

    Node choice binpack (most memory in use) and GPU choice spread (least in use), the chart's defaults
    (`nodeSchedulerPolicy: binpack`, `gpuSchedulerPolicy: spread`)."""

    name = "hami"

    def __init__(self, cl: Cluster) -> None:
        geo = cl.shapes.geo
        self.masks = {p: geo.masks[p] for p in cl.shapes.mem}
        slices = {p.name: p.compute_slices for p in cl.shapes.model.base_profiles}
        self.high = {p: slices[p] in (1, 3) for p in cl.shapes.mem}  # 1g/3g take the highest free placement
        self.taken: dict[int, list[tuple[int, int]]] = {}  # job -> (gpu, placement mask) per unit
        self.occupied = [0] * len(cl.gpus)
        self.keys = [canonical(g.layout) for g in cl.gpus]  # each GPU's layout (= its pods' instances)
        self._slots: dict[tuple[int, CanonicalLayout, str], int | None] = {}

    def _slot(self, cl: Cluster, gid: int, p: str) -> int | None:
        """The placement mask a new `p` instance would take on this GPU, or None (cached: the occupied mask and
        the layout decide it)."""
        k = (self.occupied[gid], self.keys[gid], p)
        if k in self._slots:
            return self._slots[k]
        out = None
        if cl.shapes.geo.is_valid(canonical([*self.keys[gid], (p, 1)])):
            free = [m for m in self.masks[p] if not m & self.occupied[gid]]
            if free:
                out = max(free) if self.high[p] else min(free)
        self._slots[k] = out
        return out

    def step(self, sim: Sim) -> None:
        cl = sim.cl
        use = [cl.instance_mib(g.used) for g in cl.gpus]
        node_use = [sum(use[gid] for gid in ids) for ids in cl.by_node]
        for ji in list(sim.pending):
            job = sim.jobs[ji]
            fits = (cl.shapes.full.name,) if job.whole else cl.shapes.fitting(job.vram_mib)
            if not fits:
                continue
            units: list[tuple[int, str, int]] = []
            if multi_gpu(job):
                for ids in sorted(range(len(cl.by_node)), key=lambda n: (-node_use[n], n)):
                    got = [(gid, fits[0], m) for gid in cl.by_node[ids] if cl.open(gid)
                           for m in [self._slot(cl, gid, fits[0])] if m is not None]  # fmt: skip
                    if len(got) >= job.num_gpu:
                        units = got[: job.num_gpu]
                        break
            else:
                for p in fits:
                    cands = [gid for gid in range(len(cl.gpus)) if cl.open(gid) and self._slot(cl, gid, p) is not None]
                    if cands:
                        gid = min(cands, key=lambda i: (-node_use[cl.gpus[i].node], use[i], i))
                        slot = self._slot(cl, gid, p)
                        assert slot is not None
                        units = [(gid, p, slot)]
                        break
            if not units:
                continue
            layouts = {}
            for gid, p, m in units:
                layouts[gid] = self.keys[gid] = canonical([*self.keys[gid], (p, 1)])
                self.occupied[gid] |= m
                use[gid] += cl.shapes.mem[p]
                node_use[cl.gpus[gid].node] += cl.shapes.mem[p]
            self.taken[ji] = [(gid, m) for gid, _, m in units]
            sim.create(Placement(ji, [(gid, p) for gid, p, _ in units], layouts))

    def released(self, sim: Sim, job: int, units: Sequence[tuple[int, str]]) -> None:
        """HAMi's reconciler destroys the GI/CI of a pod that is gone."""
        for (gid, p), (_, m) in zip(units, self.taken.pop(job, []), strict=True):
            g = sim.cl.gpus[gid]
            g.layout[p] -= 1
            if g.layout[p] <= 0:
                del g.layout[p]
            self.occupied[gid] &= ~m
            self.keys[gid] = canonical(g.layout)


class Nos(Policy):
    """nebuly nos's MIG partitioner and agent (anchors.md §1), as a policy."""

    name = "nos"

    def __init__(self, seed: int = 0) -> None:
        self.window = BatchWindow(NOS_BATCH_IDLE_S, NOS_BATCH_TIMEOUT_S)
        self.rng = np.random.default_rng(seed)  # ties between geometries: Go map order in nos, random here
        self.due: float | None = None

    def wake(self, sim: Sim) -> float | None:
        return self.due

    def step(self, sim: Sim) -> None:
        bind_free(sim)
        cl = sim.cl
        if sim.windows:  # no new plan while an agent has not reported its plan as applied
            self.due = None
            return
        if not sim.packing:  # packing runs (no departures) have no timeline to batch over
            ready, self.due = self.window.observe(frozenset(map(str, sim.pending)), sim.now)
            if not ready:
                return
        shapes = cl.shapes
        lacking: Counter[str] = Counter()
        for ji in sim.pending:
            p = shapes.smallest(sim.jobs[ji])
            if p is not None:
                lacking[p] += sim.jobs[ji].num_gpu
        for g in cl.gpus:
            lacking -= g.free  # cluster-wide: a free slice anywhere counts as "not lacking" (as in nos)
        if not lacking:
            return
        order = sorted(
            sim.pending, key=lambda i: (-sim.jobs[i].priority, shapes.mem.get(shapes.smallest(sim.jobs[i]) or "", 0), i)
        )
        taken: set[int] = set()
        for n, ids in enumerate(cl.by_node):
            if not cl.node_open(n) or not lacking:
                continue
            before = Counter(lacking)
            layouts: dict[int, CanonicalLayout] = {}
            free_after: dict[int, Counter[str]] = {}
            for gid in ids:
                g = cl.gpus[gid]
                have = sum(min(c, lacking[p]) for p, c in g.free.items())
                best: tuple[tuple[int, float], CanonicalLayout] | None = None
                for lay in shapes.layouts:  # geometries applicable without deleting a used device
                    after = Counter(dict(lay)) - g.used
                    if g.used - Counter(dict(lay)):
                        continue
                    rank = (-sum(min(c, lacking[p]) for p, c in after.items()), float(self.rng.random()))
                    if best is None or rank < best[0]:
                        best = (rank, lay)
                if best is not None and -best[0][0] > have and best[1] != canonical(g.layout):
                    layouts[gid] = best[1]
                    free_after[gid] = Counter(dict(best[1])) - g.used
                    lacking -= free_after[gid]
                else:
                    free_after[gid] = g.free
            if not layouts:
                continue
            placements: list[Placement] = []
            for ji in order:
                if ji in taken:
                    continue
                job = sim.jobs[ji]
                p = shapes.smallest(job)
                if p is None:
                    continue
                slots = [gid for gid in ids if free_after[gid][p] > 0]
                if len(slots) >= job.num_gpu and (job.num_gpu == 1 or p == shapes.full.name):
                    units = [(gid, p) for gid in slots[: job.num_gpu]]
                    for gid, q in units:
                        free_after[gid][q] -= 1
                    placements.append(Placement(ji, units))
                    taken.add(ji)
            if placements:  # commit the node only if at least one pod fits it
                sim.reconfigure(n, layouts, placements)
            else:
                lacking = before  # reverted: this node's new slices serve no pod
