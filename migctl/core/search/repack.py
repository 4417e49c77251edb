"""Repack: place a left-out pod by placing every pod of one node, or of two nodes, again together with it.

A capped depth-first search over their placements. It finds moves of several pods at once (two pods leaving a
GPU for free instances elsewhere, pods trading nodes for CPU) at a cost, so the planner grants it a share of
work only after tidy and in the polish (`budgets.py`). Mixed into `LocalSearch` (`local.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from migctl.core.search import budgets
from migctl.core.search.bins import Bin, Box, Item, instance_mib
from migctl.core.search.fits import Req
from migctl.core.search.state import SearchState


class Repack(SearchState):
    """The repack move, mixed into `LocalSearch`."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        super().__init__(candidates, budget)
        self.repacks = 0  # work left for `_repack` (off unless the caller grants some)
        self.repacked = 0  # pods `_repack` placed
        self._capacities: dict[int, tuple[int, int]] = {}
        self._spares: dict[int, tuple[int, tuple[int, int]]] = {}

    def _repack(self, u: Item) -> bool:
        """Place `u` by re-packing every pod of one node, or of two nodes, together with `u`: a depth-first
        search over their placements (`_fill`, capped). Finds what no move of one or two pods finds: several pods
        leaving a GPU together, or pods trading nodes so that the CPU left free lands where `u`'s GPU is. Nodes
        with the most free CPU are paired first; a pair that failed is not tried again until one of its nodes
        changes. All of it is charged to `repacks`."""
        for a in self._boxes(u):
            mine = [it for x in a.bins for it in x.items]
            others, work = self._partners(a)
            self.repacks -= work
            for b in sorted([None, *others], key=lambda x: (x is not None, 0 if x is None else -x.free.cpu_m)):
                if self.repacks <= 0:
                    return False
                self.repacks -= 1
                if not u.pod.requests.fits_in(a.free if b is None else a.free + b.free):
                    continue
                key = (self._kid(u), id(a), id(b))
                stamp = (a.version, -1 if b is None else b.version)
                if self._unpacked.get(key) == stamp or not self._roomy(u, [a] if b is None else [a, b]):
                    continue
                items = mine if b is None else mine + [it for x in b.bins for it in x.items]
                got = self._fill([u, *items], a.bins if b is None else a.bins + b.bins)
                if got is None:
                    self._unpacked[key] = stamp
                    continue
                for it in items:
                    self._move(it, None)
                for it, x in got:
                    self._move(it, x)
                return True
        return False

    def _roomy(self, u: Item, boxes: list[Box]) -> bool:
        """A necessary condition for `_fill`: the smallest instances that `u` and the pods of `boxes` could take
        anywhere add up to no more MiB and compute slices than those nodes' GPUs have."""
        mib, compute = self._slack(u)
        mib, compute = -mib, -compute
        for box in boxes:
            m, c = self._spare(box)
            mib += m
            compute += c
        return mib >= 0 and compute >= 0

    def _spare(self, box: Box) -> tuple[int, int]:
        """Capacity of the node's GPUs less the smallest instances its pods could take anywhere (by version)."""
        hit = self._spares.get(id(box))
        if hit is not None and hit[0] == box.version:
            return hit[1]
        m, c = self._capacity(box)
        for x in box.bins:
            for it in x.items:
                lm, lc = self._slack(it)
                m -= lm
                c -= lc
        self._spares[id(box)] = (box.version, (m, c))
        return m, c

    def _capacity(self, box: Box) -> tuple[int, int]:
        """Most MiB and compute slices the node's GPUs in the search can hold (fixed for the search)."""
        hit = self._capacities.get(id(box))
        if hit is None:
            caps = [x.shapes.capacity(x.base, x.reshape) for x in box.bins]
            hit = self._capacities[id(box)] = (sum(m for m, _ in caps), sum(c for _, c in caps))
        return hit

    def _fill(self, items: list[Item], bins: list[Bin]) -> list[tuple[Item, Bin]] | None:
        """A place on `bins` for every one of `items`, by depth-first search: the first item first, then the
        most constrained, each trying its own GPU first; GPUs in the same state on one node are tried once, and
        interchangeable pods take GPUs in list order. None when nothing is found within `budgets.REPACK_PROBES`."""
        reach = [[x for x in bins if x in self._reach(it)] for it in items]
        rest = sorted(
            range(1, len(items)), key=lambda i: (len(reach[i]), -instance_mib(items[i]), self._kid(items[i]), i)
        )
        order = [0, *rest]
        twin = [k > 1 and self._kid(items[order[k]]) == self._kid(items[order[k - 1]]) for k in range(len(order))]
        pos = {x: j for j, x in enumerate(bins)}
        reqs: dict[Bin, list[Req]] = {x: [] for x in bins}
        room = {x.box: x.box.free for x in bins}
        for it in items[1:]:
            assert it.at is not None, "only the first item is new"
            room[it.at.box] = room[it.at.box] + it.pod.requests
        chosen: list[Bin] = list(bins[:1]) * len(items)
        probes = budgets.REPACK_PROBES

        def go(k: int) -> bool:
            nonlocal probes
            if k == len(order):
                return True
            i = order[k]
            it = items[i]
            floor = pos[chosen[order[k - 1]]] if twin[k] else 0
            tried: set[tuple[int, tuple[Req, ...], int]] = set()
            for x in sorted(reach[i], key=lambda x: x is not it.at):
                key = (x.start, tuple(reqs[x]), id(x.box))
                if pos[x] < floor or key in tried or not it.pod.requests.fits_in(room[x.box]):
                    continue
                tried.add(key)
                if probes <= 0:
                    return False
                probes -= 1
                self.repacks -= 1
                r = it.req(x.shapes)
                assert r is not None, "candidates serve the pod"
                trial = sorted([*reqs[x], r])
                if x.shapes.fit(x.start, tuple(trial)) is None:
                    continue
                saved, reqs[x] = reqs[x], trial
                room[x.box] = room[x.box] - it.pod.requests
                chosen[i] = x
                if go(k + 1):
                    return True
                reqs[x] = saved
                room[x.box] = room[x.box] + it.pod.requests
            return False

        return [(items[i], chosen[i]) for i in order] if go(0) else None
