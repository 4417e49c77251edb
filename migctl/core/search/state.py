"""What every move of the local search shares: its state, fit probes against the memo, moving pods, and the
caches of where each kind of pod can go.

`LocalSearch` (`local.py`) is this with its moves; tidy and trade (`tidy.py`), repack (`repack.py`), augment
(`augment.py`) and reshuffle (`reshuffle.py`) are mixed in from their own modules because they work on the same
state.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

from migctl.core.search.bins import Bin, Box, Draft, Item, pod_kind, reqs_of
from migctl.core.search.fits import Fit


class SearchState:
    """The local search's state and primitives. Moves are probed first (memoised fits, no state change) and
    applied only when they improve; every kept change bumps `epoch`, which retires cached answers."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        self.candidates = candidates  # the GPUs in a pod's reach that can serve it
        self.budget = budget  # probes left
        self.out: list[Item] = []  # pods left out, highest priority first
        self.epoch = 0  # bumped on every kept change: cached answers of older epochs are stale
        self._spots: dict[tuple[int, int], tuple[int, list[Bin]]] = {}
        self._reach_sets: dict[int, set[Bin]] = {}
        self._ids: dict[tuple[object, ...], int] = {}  # interned kinds: keys then hash one small int
        self._box_lists: dict[int, list[Box]] = {}
        self._smallest: dict[int, tuple[int, int]] = {}
        self._unpacked: dict[tuple[int, int, int], tuple[int, ...]] = {}  # (kind, node, node) -> versions tried

    def _intern(self, key: tuple[object, ...]) -> int:
        return self._ids.setdefault(key, len(self._ids))

    def _kid(self, it: Item) -> int:
        """Interned `pod_kind` of the pod (cached on the item)."""
        if it.kid < 0:
            it.kid = self._intern(pod_kind(it))
        return it.kid

    def _probe(self, b: Bin, add: Sequence[Item], drop: Sequence[Item] = ()) -> Fit | None:
        self.budget -= 1
        return self._fits(b, add, drop)

    def _fits(self, b: Bin, add: Sequence[Item], drop: Sequence[Item] = ()) -> Fit | None:
        """`_probe` without the budget charge, for moves with their own share of work (`augment`)."""
        if not drop and len(add) == 1:
            return self._probe_one(b, add[0])
        adds, drops = reqs_of(add, b.shapes), reqs_of(drop, b.shapes)
        if adds is None or drops is None:
            return None
        return b.probe(adds, drops)

    def _probe_one(self, b: Bin, it: Item) -> Fit | None:
        """`_probe(b, [it])` without the budget charge: the fit of one pod more, the most common probe, memoised
        on the GPU per request until its pods change (`Bin.plus`)."""
        r = it.req(b.shapes)
        if r is None:
            return None
        hit = b.plus.get(r, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        i = bisect_right(b.reqs, r)
        got = b.plus[r] = b.shapes.fit(b.start, (*b.reqs[:i], r, *b.reqs[i:]))
        return got

    def _move(self, it: Item, to: Bin | None) -> None:
        """Take `it` off its GPU (if any) and put it on `to` (or leave it out)."""
        if it.at is not None:
            home = it.at
            home.set([x for x in home.items if x is not it])
            home.box.free = home.box.free + it.pod.requests
            home.box.version += 1
            it.at = None
        if to is not None:
            to.set([*to.items, it])
            to.box.free = to.box.free - it.pod.requests
            to.box.version += 1

    def spots(self, v: Item) -> list[Bin]:
        """GPUs other than its own where `v` would fit as things stand (cached until the next kept change)."""
        key = (id(v.at), self._kid(v))
        hit = self._spots.get(key)
        if hit is not None and hit[0] == self.epoch:
            return hit[1]
        out = []
        at, need = v.at, v.pod.requests
        for b in self.candidates(v):
            free = b.box.free
            if b is at or need.cpu_m > free.cpu_m or need.memory > free.memory or need.pods > free.pods:
                continue
            self.budget -= 1  # a `_probe`
            if self._probe_one(b, v) is not None:
                out.append(b)
        self._spots[key] = (self.epoch, out)
        return out

    def _reach(self, it: Item) -> set[Bin]:
        key = self._kid(it)
        if key not in self._reach_sets:
            self._reach_sets[key] = set(self.candidates(it))
        return self._reach_sets[key]

    def _place(self, it: Item, d: Draft, avoid: Bin | None = None) -> Bin | None:
        """Cheapest GPU for `it` once draft `d` is applied: where it fitted before on nodes the draft leaves alone,
        or any GPU of a node it changes (not the GPU `it` comes from)."""
        best: tuple[tuple[int, float], Bin] | None = None
        reach = self._reach(it)
        where = [x for x in self.spots(it) if x.box not in d.res]
        # the draft's nodes are few: their GPUs in reach (the order does not matter, GPU orders break ties)
        where += [x for box in d.res for x in box.bins if x in reach and x is not it.at]
        for x in where:
            if x is avoid or not it.pod.requests.fits_in(d.room(x.box)):
                continue
            f = self._probe(x, [*d.adds(x), it], d.drops(x))
            if f is not None and (best is None or (f[0] - x.cost, x.order) < best[0]):
                best = ((f[0] - x.cost, x.order), x)
        return None if best is None else best[1]

    def _commit(self, d: Draft) -> bool:
        for it in d.taken:
            self._move(it, None)
        for it, to in d.placed:
            self._move(it, to)
        return True

    def _keep(self, best: tuple[object, Draft] | None) -> bool:
        return best is not None and self._commit(best[1])

    def _partners(self, a: Box) -> tuple[list[Box], int]:
        """Other nodes that some pod of node `a` could use, in the order first seen, and the lookups that took
        (for the caller's work share); None, for node `a` alone, is the caller's to add."""
        seen: dict[Box, None] = {}
        work = 0
        for x in a.bins:
            for it in x.items:
                boxes = self._boxes(it)
                work += len(boxes)
                seen.update(dict.fromkeys(boxes))
        seen.pop(a, None)
        return list(seen), work

    def _boxes(self, it: Item) -> list[Box]:
        """Nodes with a GPU in the pod's reach, in order (cached per kind)."""
        k = self._kid(it)
        hit = self._box_lists.get(k)
        if hit is None:
            hit = self._box_lists[k] = list(dict.fromkeys(x.box for x in self.candidates(it)))
        return hit

    def _slack(self, it: Item) -> tuple[int, int]:
        """Smallest MiB and compute slices of any instance that can serve `it` on any GPU in its reach."""
        k = self._kid(it)
        hit = self._smallest.get(k)
        if hit is None:
            got = [x.shapes.least(r) for x in self._reach(it) if (r := it.req(x.shapes)) is not None]
            hit = self._smallest[k] = (min(m for m, _ in got), min(c for _, c in got)) if got else (0, 0)
        return hit
