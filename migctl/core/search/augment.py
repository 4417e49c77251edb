"""Augment: chains of moves of any length that place a pod the other moves left out.

At the end of every pass, and once more on the plan `plan()` keeps, each pod still left out looks for a chain:
it takes a GPU in place of `v1`, `v1` another in place of `v2`, and so on until one finds room. It is the
augmenting path of bipartite matching, searched breadth first with node resources tracked along the chain (swap
covers chains of one step; a fixed depth of two did not pay, docs/benchmarks.md). Where no chain keeps every pod
placed, **two-for-one** leaves out the chain's last pod if it has the new pod's priority, and keeps that only if
another left-out pod of at least that priority then finds a chain: what the left-out pod held, typically node
CPU, serves two pods that need less.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from migctl.core.model.cluster import Resources
from migctl.core.search import budgets
from migctl.core.search.bins import Bin, Box, Draft, Item
from migctl.core.search.state import SearchState

# an entry of `augment`'s search: (pod to move, its parent entry, the GPU it leaves to the parent's pod, node
# resources the chain up to here frees: negative where it takes more than it frees)
_Link = tuple[Item, int, "Bin | None", dict[Box, Resources]]


class Augment(SearchState):
    """The augment move, mixed into `LocalSearch`."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        super().__init__(candidates, budget)
        self.augments = 0  # work left for `augment` (off unless the caller grants some)
        self._dead: set[int] = set()  # pod kinds for which `augment` searched every chain and found none
        # (GPU, pod kind) that `augment` entered since the last kept chain: a chain through them was already
        # searched and found nothing (the bipartite matching argument; resources along a chain are ignored)
        self._explored: set[tuple[int, int]] = set()

    def augment_all(self, unplaced: list[Item], work: int) -> int:
        """`augment` each left-out pod, highest priority first, in rounds while one places a pod, within `work`
        fit checks; returns how many chains it kept. A pod for which every chain was searched and none found is
        not searched again (in a bipartite matching, a vertex without an augmenting path never gets one later)."""
        self.augments = work
        self.out = sorted(unplaced, key=lambda it: -it.pod.priority)
        kept = 0
        progress = True
        while progress and self.augments > 0:
            progress = False
            for u in list(self.out):
                if u.at is None and self.augments > 0 and self._kid(u) not in self._dead and self.augment(u):
                    kept += 1
                    progress = True
                    self.epoch += 1
                    self._explored = set()
            self.out = sorted((it for it in self.out if it.at is None), key=lambda it: -it.pod.priority)
        return kept

    def augment(self, u: Item, two_for_one: bool = True) -> bool:
        """Place `u` by a chain of moves of any length: `u` takes a GPU in place of a pod `v1`, `v1` takes another
        GPU in place of `v2`, and so on until one goes where there is room; every pod of the chain stays placed, so
        the pods placed per priority only grow. Chains are searched breadth first (shortest first), each (GPU,
        kind of pod) entered once since the last kept chain, also across searches, as augmenting paths are in a
        bipartite matching; what each step frees and takes on a node is carried along the chain, and a chain is
        checked as a whole before it is kept. A pod leaves its GPU or, when its node lacks CPU, memory or slots
        for the pod coming in, any GPU of that node. When no chain ends in room: the shortest one that ends by
        leaving out a pod of lower priority than `u`, the lowest such priority first; else, with `two_for_one`,
        one that leaves out a pod of `u`'s priority (`_two_for_one`). Capped by `budgets.AUGMENT_PROBES`."""
        probes = budgets.AUGMENT_PROBES
        chain: list[_Link] = [(u, -1, None, {})]
        seen = self._explored
        fallback: tuple[tuple[int, int], int] | None = None  # ((priority, entry), entry) of a pod to leave out
        evens: list[int] = []  # the first entries whose pods have `u`'s priority, for `_two_for_one`
        head = 0
        while head < len(chain):
            x, _, _, freed = chain[head]
            need = x.pod.requests
            for b in self.candidates(x):
                if b is x.at:
                    continue
                if probes <= 0 or self.augments <= 0:
                    return self._augment_drop(chain, fallback)
                probes -= 1
                self.augments -= 1
                delta = freed.get(b.box)
                room = b.box.free if delta is None else b.box.free + delta
                gpu_room = self._probe_one(b, x) is not None
                if need.fits_in(room):
                    if gpu_room:
                        d = self._chain_draft(chain, head, b)
                        if d is not None:
                            return self._commit(d)
                    pool = b.items  # a pod of this GPU must make room
                elif gpu_room:
                    pool = [it for y in b.box.bins for it in y.items]  # any pod of the node may free its CPU
                else:
                    pool = b.items  # a pod of this GPU must free both
                for v in pool:
                    key = (id(v.at), self._kid(v))
                    r = v.pod.requests
                    if (
                        key in seen
                        or need.cpu_m > room.cpu_m + r.cpu_m
                        or need.memory > room.memory + r.memory
                        or need.pods > room.pods + r.pods
                    ):
                        continue
                    if v.at is b:
                        probes -= 1
                        self.augments -= 1
                        if self._fits(b, [x], [v]) is None:
                            continue
                    elif not gpu_room:
                        continue
                    seen.add(key)
                    after = dict(freed)
                    after[b.box] = (Resources() if delta is None else delta) + r - need
                    chain.append((v, head, b, after))
                    if v.pod.priority < u.pod.priority:
                        rank = (v.pod.priority, len(chain) - 1)
                        if fallback is None or rank < fallback[0]:
                            fallback = (rank, len(chain) - 1)
                    elif v.pod.priority == u.pod.priority and len(evens) < budgets.TWO_FOR_ONE_TRIES:
                        evens.append(len(chain) - 1)
            head += 1
        if fallback is None:
            if two_for_one and any(self._two_for_one(chain, i) for i in evens):
                return True
            self._dead.add(self._kid(u))
        return self._augment_drop(chain, fallback)

    def _two_for_one(self, chain: list[_Link], i: int) -> bool:
        """The chain that ends by leaving out entry `i`'s pod `v`, of the priority of the pod it places: kept only
        if `augment` then places another left-out pod of at least `v`'s priority (`v` itself included), one more
        pod of that priority in all; otherwise undone. It frees what `v` held (typically node CPU) for two pods
        that need less, which no chain that keeps every pod placed can do."""
        v, parent, b, _ = chain[i]
        assert b is not None
        d = self._chain_draft(chain, parent, b, v)
        if d is None:
            return False
        before = [(it, it.at) for it in dict.fromkeys([*d.taken, *(it for it, _ in d.placed)])]
        dead = self._dead
        self._commit(d)
        self._dead, self._explored = set(), set()  # what found no chain before may find one now
        u = chain[0][0]
        for w in [v, *self.out]:
            if self.augments <= 0:
                break
            if w is u or w.at is not None or w.pod.priority < v.pod.priority or self._kid(w) in self._dead:
                continue
            if self.augment(w, two_for_one=False):
                self.out.append(v)
                return True
        for it, _ in before:
            self._move(it, None)
        for it, at in before:
            if at is not None:
                self._move(it, at)
        self._dead = dead
        self._explored = set()
        return False

    def _augment_drop(self, chain: list[_Link], fallback: tuple[object, int] | None) -> bool:
        """Keep `augment`'s chain that leaves out a lower-priority pod, if it found one and it holds together."""
        if fallback is None:
            return False
        i = fallback[1]
        v, parent, b, _ = chain[i]
        assert b is not None
        d = self._chain_draft(chain, parent, b, v)
        if d is None:
            return False
        self.out.append(v)
        return self._commit(d)

    def _chain_draft(self, chain: list[_Link], i: int, b: Bin, drop: Item | None = None) -> Draft | None:
        """The draft of `augment`'s chain that ends with entry `i`'s pod going to `b` (leaving `drop` out, when
        given); None when its moves, taken together, do not fit (two steps on one GPU or node)."""
        d = Draft()
        if drop is not None:
            d.take(drop)
        d.put(chain[i][0], b)
        while chain[i][1] >= 0:
            x, parent, to, _ = chain[i]
            assert to is not None
            d.take(x)
            d.put(chain[parent][0], to)
            i = parent
        for box in d.res:
            if not d.ok(box):
                return None
        for y in dict.fromkeys(to for _, to in d.placed):  # a GPU that only loses pods still fits
            self.augments -= 1
            if self._fits(y, d.adds(y), d.drops(y)) is None:
                return None
        return d
