"""`first-fit`, `best-fit` and the static layouts (`static-*`).

* static layouts never change; a pod takes a free instance of its own profile (it asks for it by name).
* `first-fit`, `best-fit`: smallest fitting instance on the first / tightest GPU, re-cutting the *free* part of a
  busy GPU through NVML when no free instance fits (more freedom than the stock mig-manager gives anyone), where
  the new instance can sit beside the ones in use (`scheduler.relayout` on a tracked GPU).
"""

from __future__ import annotations

from collections import Counter

from migctl.core.hardware.geometry import CanonicalLayout
from migctl.sim.mig import Policy, Sim
from migctl.sim.scheduler import multi, multi_gpu, option
from migctl.sim.state import Placement


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
                p, lay = option(cl, gid, fits, self.mode)
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
