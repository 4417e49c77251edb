"""`nos`: nebuly nos: batches unschedulable pods (10 s idle / 60 s), computes the cluster-wide lacking profiles,
and per node (by name) re-cuts the *free* part of each GPU to the geometry providing most of them (ties at
random: nos takes Go's map order; it has no waste or flexibility term); its agent deletes only free devices,
creates the new ones through NVML and restarts the device plugin, which closes its node for a drawn
reconfiguration time, like a relabel (docs/simulation.md §2). A geometry its agent could not create beside the
devices in use (placements, `Cluster.spots_after`) is not chosen.

`nos-stock` (an analysis variant, `busy=False`) is nos's partitioner confined to what the stock mig-manager
allows migctl: a GPU with an instance in use is never re-cut. It separates the planner from the mechanism
(docs/simulation.md section 4.3)."""

from __future__ import annotations

from collections import Counter

import numpy as np

from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.reconcile.guards import BatchWindow
from migctl.sim.mig import Policy, Sim
from migctl.sim.scheduler import bind_free
from migctl.sim.state import Placement

NOS_BATCH_IDLE_S = 10.0  # nos batchWindowIdleSeconds
NOS_BATCH_TIMEOUT_S = 60.0  # nos batchWindowTimeoutSeconds


class Nos(Policy):
    """nebuly nos's MIG partitioner and agent (anchors.md §1), as a policy."""

    name = "nos"

    def __init__(self, seed: int = 0, busy: bool = True) -> None:
        self.busy = busy  # re-cut the free part of busy GPUs (nos's agent); False: idle GPUs only (mig-manager)
        self.name = "nos" if busy else "nos-stock"  # as the run result names it
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
                if g.used and not self.busy:
                    free_after[gid] = g.free
                    continue
                have = sum(min(c, lacking[p]) for p, c in g.free.items())
                best: tuple[tuple[int, float], CanonicalLayout] | None = None
                for lay in shapes.layouts:  # geometries applicable without deleting a used device
                    after = Counter(dict(lay)) - g.used
                    if g.used - Counter(dict(lay)):
                        continue
                    rank = (-sum(min(c, lacking[p]) for p, c in after.items()), float(self.rng.random()))
                    if best is None or rank < best[0]:
                        if g.spots is not None and g.used and cl.spots_after(gid, lay) is None:
                            continue  # its agent cannot create these instances beside the ones in use
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
