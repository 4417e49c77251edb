"""The fallback's free VRAM, kept sorted per placement signature, so that a best fit reads a few GPUs, not all.

`fit.fit` gives each pod the GPU with the least free VRAM that still holds it, on a node that passes the
static rules and has CPU, memory and a pod slot left. Asked of every GPU for every pod, that is pods × GPUs
(10,000 pods on 8,000 GPUs: 80 million reads, over a minute). Here the GPUs a signature may use are one list
sorted by (free, node, index): the best fit is the first entry at or above the request whose node has room, found
by bisection; a placement moves its GPU in the lists of the signatures that reach its node. The nodes are a second
list sorted by their total free, for the explanation of a pod no GPU holds. The answers are those of the scan.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from migctl.core.model.cluster import Node, Pod, Resources
from migctl.core.model.placement import NodeIndex, signature


@dataclass(frozen=True, slots=True)
class VramGpu:
    """One GPU without MIG: its capacity and the units attributed to pods placed on it (pod annotations)."""

    index: int
    uuid: str | None
    capacity: int
    used: int = 0


@dataclass(frozen=True)
class VramNode:
    """A node as the fallback sees it; `reason` non-empty means migctl must not place pods there."""

    node: Node
    gpus: tuple[VramGpu, ...]
    unattributed: int = 0  # units held by pods without a GPU annotation: they may sit on any GPU
    source: str = ""  # "agent" (NVML) or "gfd" (labels)
    reason: str = ""

    def free(self, gpu: VramGpu) -> int:
        return max(0, gpu.capacity - gpu.used - self.unattributed)


Entry = tuple[int, str, int]  # (free units, node name, GPU index) or (total free units, node name, GPU count)


class Board:
    """Free VRAM per GPU and per node as pods are placed, and per signature the GPUs and nodes it may use."""

    def __init__(self, nodes: Sequence[VramNode]) -> None:
        self.nodes = nodes
        self.free = {(n.node.name, g.index): n.free(g) for n in nodes for g in n.gpus}  # units, as pods take them
        self.node_free: dict[str, Resources] = {n.node.name: n.node.free for n in nodes}
        self.open = [n for n in nodes if not n.reason]  # nodes migctl may place on at all
        self.excluded: Counter[str] = Counter(n.reason for n in nodes if n.reason)
        self._index = NodeIndex([n.node for n in self.open])
        self._by_name = {n.node.name: n for n in self.open}
        self._gpu = {(n.node.name, g.index): g for n in self.open for g in n.gpus}
        self._total = {n.node.name: sum(self.free[(n.node.name, g.index)] for g in n.gpus) for n in self.open}
        self._sids: dict[tuple[object, ...], int] = {}
        self._fitting: list[list[VramNode]] = []  # per signature: open nodes that pass the static rules
        self._misfits: list[Counter[str]] = []  # and why the other open nodes fail them
        self._gpus: list[list[Entry]] = []  # per signature: (free, node, index) of its nodes' GPUs, sorted
        self._totals: list[list[Entry]] = []  # per signature: (total free, node, GPU count) of its nodes, sorted
        self._reach: dict[str, list[int]] = {}  # node name -> signatures whose lists hold it
        self._placed = 0  # placements so far: the stamp of `short`'s memo
        self._short: dict[tuple[int, Resources], tuple[int, int]] = {}

    def best(self, pod: Pod, units: int) -> tuple[VramNode, VramGpu] | None:
        """The GPU that leaves the least free VRAM after taking `units`, then the first node name and GPU index,
        on a node the pod may use that has its CPU, memory and pod slot; None when none holds it."""
        gpus = self._gpus[self._sid(pod)]
        for i in range(bisect_left(gpus, (units,)), len(gpus)):
            _, name, index = gpus[i]
            if pod.requests.fits_in(self.node_free[name]):
                return self._by_name[name], self._gpu[(name, index)]
        return None

    def take(self, pod: Pod, node: VramNode, gpu: VramGpu, units: int) -> int:
        """Place `units` of `pod` on the GPU; its free units after."""
        name = node.node.name
        before, total = self.free[(name, gpu.index)], self._total[name]
        after = self.free[(name, gpu.index)] = before - units
        self._total[name] = total - units
        self.node_free[name] = self.node_free[name] - pod.requests
        self._placed += 1
        for sid in self._reach.get(name, ()):
            _move(self._gpus[sid], (before, name, gpu.index), (after, name, gpu.index))
            _move(self._totals[sid], (total, name, len(node.gpus)), (total - units, name, len(node.gpus)))
        return after

    def fitting(self, pod: Pod) -> tuple[Counter[str], list[VramNode]]:
        """Why open nodes fail the pod's static rules, counted, and the open nodes that pass them (in order)."""
        sid = self._sid(pod)
        return self._misfits[sid], self._fitting[sid]

    def short(self, pod: Pod) -> int:
        """How many of the nodes that pass the pod's static rules lack its CPU, memory or pod slot now; the same
        until the next placement, so the left-out pods of one signature and request between two placements (large
        pods go first, and many of them are left out together) count the nodes once."""
        sid = self._sid(pod)
        key = (sid, pod.requests)
        hit = self._short.get(key)
        if hit is None or hit[0] != self._placed:
            room = self.node_free
            n = sum(1 for node in self._fitting[sid] if not pod.requests.fits_in(room[node.node.name]))
            hit = self._short[key] = (self._placed, n)
        return hit[1]

    def roomiest(self, pod: Pod) -> tuple[int, str, int] | None:
        """(free, node, index) of the GPU with the most free VRAM (then the first node and index) on a node the pod
        may use that has its CPU, memory and pod slot."""
        gpus = self._gpus[self._sid(pod)]
        top = next((e[0] for e in reversed(gpus) if pod.requests.fits_in(self.node_free[e[1]])), None)
        if top is None:
            return None
        return next(e for e in gpus[bisect_left(gpus, (top,)) :] if pod.requests.fits_in(self.node_free[e[1]]))

    def largest_node(self, pod: Pod) -> tuple[int, str, int] | None:
        """The greatest (total free, node, GPU count) of the nodes the pod may use that have its CPU, memory and
        pod slot."""
        totals = self._totals[self._sid(pod)]
        return next((e for e in reversed(totals) if pod.requests.fits_in(self.node_free[e[1]])), None)

    def _sid(self, pod: Pod) -> int:
        sig = signature(pod)
        sid = self._sids.get(sig)
        if sid is None:
            sid = self._sids[sig] = len(self._fitting)
            misfits, fitting = self._index.misfits(pod)
            nodes = [self.open[i] for i in fitting]
            self._fitting.append(nodes)
            self._misfits.append(misfits)
            self._gpus.append(
                sorted((self.free[(n.node.name, g.index)], n.node.name, g.index) for n in nodes for g in n.gpus)
            )
            self._totals.append(sorted((self._total[n.node.name], n.node.name, len(n.gpus)) for n in nodes))
            for n in nodes:
                self._reach.setdefault(n.node.name, []).append(sid)
        return sid


def _move(entries: list[Entry], old: Entry, new: Entry) -> None:
    del entries[bisect_left(entries, old)]
    insort(entries, new)
