"""Cluster state of the MIG simulator: layouts, instances in use, and the windows in which nothing lands.

Two kinds of window, because real systems pay two kinds of reconfiguration cost:
* node-wide (`NodeState.ready_at`): a relabel makes mig-manager stop the device plugin, GFD and DCGM on the whole
  node, and migctl taints the node, so no new pod lands on *any* of its GPUs until the reconfiguration ends
  (a device-plugin restart, as nos does after its NVML changes, is node-wide too);
* per GPU (`GpuState.ready_at`): an agent that creates one instance through NVML (HAMi v2.10) blocks only that
  GPU, and only for the creation.
Policies must not place on a GPU inside either window (`Cluster.open`); `apply` checks it.

A run of the in-place path (`Cluster(track=True)`) also knows where every instance sits and which job holds it
(`GpuState.spots`): a busy GPU is re-cut around the instances in use by the same rule the agent applies
(`migctl.core.inplace.reach.reach`), so an instance in use never moves. On DynamicMIG nodes (`sim/dra.py`) the
allocator, not a rule, picks each partition's placement: `make` creates it there and `drop_free` destroys the
partitions no pod holds any more.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.core.hardware.geometry import Placement as Spot
from migctl.core.inplace.reach import Around, reach
from migctl.sim.shapes import Shapes


@dataclass
class GpuState:
    node: int
    index: int
    layout: Counter[str]
    used: Counter[str] = field(default_factory=Counter)
    ready_at: float = 0.0  # an instance is being created on this GPU until then
    spots: dict[Spot, int | None] | None = None  # where each instance sits -> job holding it; tracked runs only

    def around(self) -> Around:
        """(in use, free) instances where they sit, sorted by start (`migctl.core.inplace.reach`)."""
        assert self.spots is not None, "placements are tracked only in runs of a policy that tracks them"
        ordered = sorted(self.spots.items(), key=lambda kv: (kv[0].start, kv[0].profile))
        return tuple(p for p, j in ordered if j is not None), tuple(p for p, j in ordered if j is None)

    @property
    def free(self) -> Counter[str]:
        return self.layout - self.used

    def key(self) -> tuple[object, ...]:
        """What a policy's per-GPU choice depends on: the counts, and on a tracked GPU where the instances in use sit
        (a re-cut must leave them where they are)."""
        if self.spots is None:
            return canonical(self.layout), canonical(self.used)
        return canonical(self.layout), canonical(self.used), self.around()


@dataclass
class NodeState:
    ready_at: float = 0.0  # reconfiguring (node-wide window) until then
    closed_from: float = -math.inf  # ... but open before this (a window narrowed to some GPUs: `Cluster.narrow`)
    windows: int = 0  # node-wide reconfigurations so far
    paused_s: float = 0.0  # seconds spent in them


@dataclass
class Placement:
    """A job's units (GPU id, profile) and the GPUs whose layout changes for it (counted on this placement)."""

    job: int
    gpus: list[tuple[int, str]]
    layouts: dict[int, CanonicalLayout] = field(default_factory=dict)


class Cluster:
    def __init__(
        self, node_gpus: Sequence[int], model: GpuModel, initial: CanonicalLayout | None = None, track: bool = False
    ) -> None:
        self.shapes = Shapes(model)
        start = initial if initial is not None else ()  # MIG on, no instances: dynamic policies cut on demand
        self.gpus: list[GpuState] = []
        self.by_node: list[list[int]] = []
        self.nodes: list[NodeState] = []
        for n, count in enumerate(node_gpus):
            ids = []
            for i in range(count):
                ids.append(len(self.gpus))
                g = GpuState(n, i, Counter(dict(start)))
                if track:
                    g.spots = dict.fromkeys(self.shapes.geo.place(start) if start else ())
                self.gpus.append(g)
            self.by_node.append(ids)
            self.nodes.append(NodeState())
        self.total_mib = self.shapes.full_mib * len(self.gpus)
        self.now = 0.0

    def instance_mib(self, counter: Counter[str]) -> int:
        return self.shapes.instance_mib(counter)

    def node_open(self, n: int) -> bool:
        """No node-wide reconfiguration in progress: pods may land on its GPUs."""
        ns = self.nodes[n]
        return not ns.closed_from <= self.now < ns.ready_at

    def open(self, gid: int) -> bool:
        """A pod may land on this GPU now (neither its node nor the GPU itself is being reconfigured)."""
        g = self.gpus[gid]
        return g.ready_at <= self.now and self.node_open(g.node)

    def narrow(self, node: int, gids: Sequence[int], node_from: float) -> None:
        """Narrow the node's window, which `Sim.reconfigure` just opened, to the GPUs `gids` until it ends; the
        rest of the node closes only from `node_from` on (static-MIG DRA: DeviceTaintRules fence the changed GPUs,
        and the plugin's restart at the end holds every new pod of the node)."""
        ns = self.nodes[node]
        for gid in gids:
            self.gpus[gid].ready_at = max(self.gpus[gid].ready_at, ns.ready_at)
        ns.closed_from = node_from

    def relayout(self, gid: int, layout: CanonicalLayout) -> None:
        g = self.gpus[gid]
        new = Counter(dict(layout))
        assert not (g.used - new), f"re-layout of GPU {gid} would destroy instances in use"
        assert not new or self.shapes.geo.is_valid(layout), f"invalid layout {layout}"
        if g.spots is not None:
            spots = self.spots_after(gid, layout)
            assert spots is not None, f"GPU {gid} cannot reach {layout} without moving an instance in use"
            g.spots = spots
        g.layout = new

    def spots_after(self, gid: int, layout: CanonicalLayout) -> dict[Spot, int | None] | None:
        """Where the instances of `layout` would sit on a tracked GPU, its instances in use staying where they are
        (the agent's rule); None when it cannot be reached so."""
        g = self.gpus[gid]
        assert g.spots is not None
        used, free = g.around()
        moved = reach(self.shapes.geo, (used, free), layout)
        if moved is None:
            return None
        return {**{p: g.spots[p] for p in used}, **dict.fromkeys((*moved.keep, *moved.create))}

    def operations(self, gid: int, layout: CanonicalLayout) -> int:
        """GPU instances destroyed or created to reach `layout` on a tracked GPU (the agent's NVML work)."""
        g = self.gpus[gid]
        assert g.spots is not None
        moved = reach(self.shapes.geo, g.around(), layout)
        return 0 if moved is None else moved.operations

    def apply(self, pl: Placement, relayout: bool = True) -> None:
        """Take the placement's instances (after its re-layouts, when `relayout`)."""
        if relayout:
            for gid, lay in pl.layouts.items():
                self.relayout(gid, lay)
        for gid, p in pl.gpus:
            g = self.gpus[gid]
            assert g.free[p] > 0, f"no free {p} on GPU {gid}"
            g.used[p] += 1
            if g.spots is not None:  # the device plugin hands out some free instance: the lowest here
                spot = min((s for s, j in g.spots.items() if j is None and s.profile == p), key=lambda s: s.start)
                g.spots[spot] = pl.job

    def release(self, units: Sequence[tuple[int, str]], job: int | None = None) -> None:
        for gid, p in units:
            g = self.gpus[gid]
            used = g.used
            used[p] -= 1
            if used[p] <= 0:
                del used[p]
            if g.spots is not None:
                held = next(s for s, j in g.spots.items() if j == job and s.profile == p)
                g.spots[held] = None

    def make(self, gid: int, spot: Spot, job: int) -> None:
        """Create the partition `spot` on a tracked GPU for `job` at the placement an allocator chose (DynamicMIG:
        NVIDIA's driver makes what the scheduler allocated); its memory slices must be free."""
        g = self.gpus[gid]
        assert g.spots is not None, "partitions are made only on tracked GPUs"
        mask = ((1 << spot.size) - 1) << spot.start
        assert not any(((1 << s.size) - 1) << s.start & mask for s in g.spots), f"GPU {gid}: {spot} overlaps"
        layout = g.layout + Counter({spot.profile: 1})
        assert self.shapes.geo.is_valid(canonical(layout)), f"GPU {gid}: {canonical(layout)} is not a valid layout"
        g.spots[spot] = job
        g.layout = layout
        g.used[spot.profile] += 1

    def drop_free(self, gid: int) -> None:
        """Destroy the partitions of a tracked GPU that no job holds (DynamicMIG's unprepare of a claim)."""
        g = self.gpus[gid]
        assert g.spots is not None
        g.spots = {s: j for s, j in g.spots.items() if j is not None}
        g.layout = Counter(s.profile for s in g.spots)


def free_profile(g: GpuState, fits: tuple[str, ...]) -> str | None:
    """The smallest fitting profile with a free instance on `g`."""
    free = g.free
    for p in fits:
        if free[p] > 0:
            return p
    return None
