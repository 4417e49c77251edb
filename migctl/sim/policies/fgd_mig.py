"""`fgd-mig`: FGD (Weng et al., ATC'23) on MIG instances, re-cutting free slices through NVML like `first-fit`.

A pod goes where the expected fragmentation w.r.t. the trace's profile mix grows least. frag_m(g) = MiB of free
instances too small for profile m, or all free MiB of g when neither a free instance nor a re-cut of its free
slices can host m (the FGD measure with MIG feasibility, workloads.md §2). The mix is read from the whole trace,
which makes it an oracle input.
"""

from __future__ import annotations

from collections import Counter

from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.sim.mig import Policy, Sim
from migctl.sim.scheduler import multi, multi_gpu, relayout
from migctl.sim.state import Cluster, Placement

_Key = tuple[CanonicalLayout, CanonicalLayout]


class FgdMig(Policy):
    name = "fgd-mig"

    def __init__(self, target: Counter[str]) -> None:
        total = sum(target.values()) or 1
        self.mix = [(p, n / total) for p, n in sorted(target.items())]
        self.cache: dict[_Key, float] = {}

    def _frag(self, cl: Cluster, layout: Counter[str], used: Counter[str]) -> float:
        k = (canonical(layout), canonical(used))
        hit = self.cache.get(k)
        if hit is not None:
            return hit
        free = layout - used
        spare = cl.shapes.full_mib - cl.instance_mib(used)  # free instances + unpartitioned memory
        out = 0.0
        mem = cl.shapes.mem
        for p, w in self.mix:
            need = mem[p]
            hostable = any(free[q] > 0 and mem[q] >= need for q in free)
            if hostable or cl.shapes.completion(canonical(used + Counter({p: 1}))) is not None:
                out += w * sum(mem[q] * c for q, c in free.items() if mem[q] < need)
            else:
                out += w * spare
        self.cache[k] = out
        return out

    def step(self, sim: Sim) -> None:
        cl = sim.cl
        for ji in list(sim.pending):
            job = sim.jobs[ji]
            if multi_gpu(job):
                pl = multi(cl, job, ji, "free-slices", True)
                if pl is not None:
                    sim.create(pl)
                continue
            fits = cl.shapes.fitting(job.vram_mib)
            seen: dict[tuple[object, ...], tuple[float, str, CanonicalLayout | None] | None] = {}
            best: tuple[tuple[float, int], int, str, CanonicalLayout | None] | None = None
            for gid, g in enumerate(cl.gpus):
                if not cl.open(gid):
                    continue
                k = g.key()
                if k not in seen:
                    opt: tuple[float, str, CanonicalLayout | None] | None = None
                    before = self._frag(cl, g.layout, g.used)
                    for p in fits:
                        cands: list[CanonicalLayout | None] = []
                        if g.free[p] > 0:
                            cands.append(None)
                        lay = relayout(cl, gid, p, "free-slices")
                        if lay is not None:
                            cands.append(lay)
                        for c in cands:
                            layout = Counter(dict(c)) if c else g.layout
                            d = self._frag(cl, layout, g.used + Counter({p: 1})) - before
                            d += cl.shapes.mem[p] - job.vram_mib  # internal waste counts as fragmentation too
                            if opt is None or (d, c is not None) < (opt[0], opt[2] is not None):
                                opt = (d, p, c)
                    seen[k] = opt
                opt = seen[k]
                if opt is None:
                    continue
                rank = (opt[0], 1 if opt[2] else 0)
                if best is None or rank < best[0]:
                    best = (rank, gid, opt[1], opt[2])
            if best is None:
                continue
            _, gid, p, lay = best
            sim.create(Placement(ji, [(gid, p)], {gid: lay} if lay else {}))
