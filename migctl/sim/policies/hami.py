"""`hami`: HAMi v2.10's dynamic MIG: one instance created per pod at allocation, smallest fitting profile with a
free placement, 1g/3g placed high and the others low, destroyed when the pod leaves; no cluster planner.
Per-GPU NVML creation closes only that GPU for `Sim.create_s` (docs/simulation.md §2)."""

from __future__ import annotations

from collections.abc import Sequence

from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.sim.mig import Policy, Sim
from migctl.sim.scheduler import multi_gpu
from migctl.sim.state import Cluster, Placement


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
