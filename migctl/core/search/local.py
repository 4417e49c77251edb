"""Local search after the greedy: move placed pods to make room for pods the greedy left out, then to strand
less memory.

The greedy commits each pod to a GPU as it goes, so a pod that comes later may find every GPU it could use
filled by pods that had other places to go, or its node's CPU taken by them. This pass works on a plain model
of the greedy's result (GPUs as bins of single-instance pods, nodes as boxes of CPU/memory/pod slots) and, for
each left-out pod `u`, highest priority first, tries in turn:

1. **insert**: the GPU where `u` adds the least stranded memory, among those whose pods plus `u` still fit one
   valid layout (any layout if the GPU is idle and may be reshaped), on a node with room;
2. **swap**: put `u` in place of one placed pod `v` (of any priority) on that GPU or node, and move `v` to
   another GPU; or, if `v` has nowhere to go, fill the room `v` leaves with another left-out pod of at least
   `v`'s priority;
3. **evacuate**: move every pod of one GPU elsewhere and give the GPU to `u`;
4. **drop**: the first swap found whose `v` has a lower priority than `u`, leaving `v` out (the objective ranks
   one pod of a higher priority above any number of lower ones); failing that, evacuate a GPU that holds only
   lower-priority pods and leave out those that find no other place (fewest first). Dropped pods then get their
   own turn.

When a round changes nothing, **repack** gets a turn for each left-out pod `u`, highest priority first: every
pod of `u`'s node, or of that node and one other, is placed again together with `u` by a capped depth-first
search; it is kept when all of them fit. It finds moves of several pods at once (two pods leaving a GPU for free
instances elsewhere, pods trading nodes for CPU) at a cost, so the planner grants it a share of work only after
tidy and in the polish.

Every kept move improves the pods placed per priority, so the search ends; rounds repeat while they change
something. Then **tidy** moves single pods to GPUs where they strand less (objective 2), and where no single move
helps, exchanges pods (one takes the place of one or all pods of another GPU, and they go to their cheapest
GPUs). Since that often moves a pod into a smaller instance, the left-out pods get one more search. **trade**
lets a left-out pod of the lowest priority still left out take the place of a placed pod of the same priority
where that strands less. Every planner pass runs search, tidy, search with repack; the best plan's polish runs
tidy (with more probes for exchanges), search with a larger repack share, tidy again if repack placed pods,
trade, and last **reshuffle** (`reshuffle.py`): nodes, alone and in pairs, placed again at the least stranded
memory. At the end of every pass, and once more on the plan `plan()` keeps, **augment** (`augment.py`) looks for
chains of moves of any length that place the pods still left out.

The search works on the plain model of `bins.py`; a GPU's fit for a set of pods is exact and memoised
(`fits.py`). Moves are drafted and probed against the memo before anything changes. The work is capped by a
count of probes, not by time, so the result stays deterministic.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from migctl.core.objective import Stranding, stranding
from migctl.core.search.augment import Augment
from migctl.core.search.bins import Bin, Draft, Item, pod_kind
from migctl.core.search.repack import Repack
from migctl.core.search.reshuffle import Reshuffle
from migctl.core.search.tidy import Tidy


class LocalSearch(Tidy, Repack, Augment, Reshuffle):
    """Improve a greedy result in place: see the module docstring. Moves are probed first (memoised fits, no
    state change) and applied only when they improve."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        super().__init__(candidates, budget)
        self._failed: dict[int, int] = {}  # pod kind -> epoch when no move helped it
        self._filler_cache: tuple[object, dict[int, list[tuple[Item, int]]]] = (None, {})

    def run(self, unplaced: list[Item]) -> list[Item]:
        """Place what it can of `unplaced` (highest priority first, in the given order within a priority), in
        rounds until a round changes nothing; returns the pods still left out (lower-priority pods it dropped
        included)."""
        self.out = sorted(unplaced, key=lambda it: -it.pod.priority)
        progress = True
        while progress and self.budget > 0:
            progress = False
            for u in list(self.out):
                if u.at is not None or self.budget <= 0 or self._failed.get(self._kid(u)) == self.epoch:
                    continue
                if self.insert(u) or self.eject(u):
                    progress = True
                    self.epoch += 1
                else:
                    self._failed[self._kid(u)] = self.epoch
            self.out = sorted((it for it in self.out if it.at is None), key=lambda it: -it.pod.priority)
            if not progress and self.repacks > 0:
                for u in list(self.out):
                    if u.at is None and self.repacks > 0 and self._repack(u):
                        self.repacked += 1
                        progress = True
                        self.epoch += 1
                self.out = [it for it in self.out if it.at is None]
        return self.out

    def insert(self, u: Item) -> bool:
        """Put `u` on the GPU where it adds the least cost; False when none has room."""
        best: tuple[tuple[Stranding, float], Bin] | None = None
        for b in self.candidates(u):
            if not u.pod.requests.fits_in(b.box.free):
                continue
            f = self._probe(b, [u])
            if f is not None:
                rank = (stranding(f[0] - b.cost, f[1] and not b.reshaped), b.order)  # what it adds, then GPU order
                if best is None or rank < best[0]:
                    best = (rank, b)
        if best is None:
            return False
        self._move(u, best[1])
        return True

    def eject(self, u: Item) -> bool:
        """Make room for `u`: swap, evacuate, or drop (module docstring); True when a move was kept."""
        fallback: Draft | None = None  # the first move that leaves out a lower-priority pod, if nothing better
        for b in self.candidates(u):
            for v in self._victims(u, b):
                if self.budget <= 0:
                    return False
                d = self._try(u, b, v)
                if d is True:
                    return True
                if d is not False and fallback is None:
                    fallback = d
        for b in self.candidates(u):
            if self.budget <= 0:
                return False
            if len(b.items) > 1 and self._evacuate(u, b, False) is not None:
                return True
        if fallback is not None:
            self.out.append(fallback.taken[0])
            return self._commit(fallback)
        # last resort: evacuate a GPU, leaving out the lower-priority pods that find no other place (fewest first)
        best: tuple[tuple[int, float], Draft, list[Item]] | None = None
        for b in self.candidates(u):
            if self.budget <= 0 or not b.items or any(v.pod.priority >= u.pod.priority for v in b.items):
                continue
            got = self._evacuate(u, b, True)
            if got is not None and (best is None or (len(got[1]), b.order) < best[0]):
                best = ((len(got[1]), b.order), got[0], got[1])
        if best is not None:
            self.out.extend(best[2])
            return self._commit(best[1])
        return False

    def _victims(self, u: Item, b: Bin) -> list[Item]:
        """Pods whose leaving could make room for `u` on `b`: on the same GPU, or anywhere on the node when the
        node lacks CPU, memory or slots. Interchangeable pods are tried once."""
        pool = b.items if u.pod.requests.fits_in(b.box.free) else [it for x in b.box.bins for it in x.items]
        out: list[Item] = []
        seen: set[tuple[object, ...]] = set()
        for v in pool:
            key = (id(v.at), self._kid(v))
            if key not in seen:
                seen.add(key)
                out.append(v)
        return out

    def _try(self, u: Item, b: Bin, v: Item) -> Draft | bool:
        """Put `u` on `b` in place of `v`; keep it (True) if `v` finds another GPU or another left-out pod of at
        least `v`'s priority fits in the room `v` leaves. Otherwise, when `v` has a lower priority than `u`, the
        draft that leaves `v` out, for the caller to keep if nothing better turns up."""
        self.budget -= 1
        assert v.at is not None
        # the draft's own checks, without building it: most candidates fail here
        room = b.box.free + v.pod.requests if v.at.box is b.box else b.box.free
        if not u.pod.requests.fits_in(room) or self._probe(b, [u], [v] if v.at is b else []) is None:
            return False
        d = Draft()
        d.take(v)
        d.put(u, b)
        z = self._place(v, d)
        if z is not None:
            d.put(v, z)
            return self._commit(d)
        home = v.at
        # another left-out pod in the room v leaves on its GPU
        assert home is not None
        tried: set[tuple[object, ...]] = set()
        room = d.room(home.box)
        for w, rest in self._fillers(v.pod.priority):
            if w is u:
                continue
            key = (w.req(home.shapes), rest)  # interchangeable here: same instance sizes, same rest
            if key in tried or key[0] is None or not w.pod.requests.fits_in(room):
                continue
            tried.add(key)
            if home in self._reach(w) and self._probe(home, [*d.adds(home), w], d.drops(home)) is not None:
                d.put(w, home)
                self.out.append(v)
                return self._commit(d)
        return d if v.pod.priority < u.pod.priority else False

    def _fillers(self, priority: int) -> list[tuple[Item, int]]:
        """The left-out pods of at least `priority` that could fill a room, in order, two per kind (one may be
        the pod being placed; later ones of a kind would only repeat a probe), with their kinds less demand and
        need. Cached until the list of left-out pods changes."""
        stamp = (id(self.out), len(self.out), self.epoch)
        if self._filler_cache[0] != stamp:
            self._filler_cache = (stamp, {})
        by_priority = self._filler_cache[1]
        if priority not in by_priority:
            seen: dict[int, int] = {}
            out = []
            for w in self.out:
                k = self._kid(w)
                if w.at is None and w.pod.priority >= priority and seen.get(k, 0) < 2:
                    seen[k] = seen.get(k, 0) + 1
                    out.append((w, self._intern(pod_kind(w)[2:])))
            by_priority[priority] = out
        return by_priority[priority]

    def _evacuate(self, u: Item, b: Bin, drop: bool) -> tuple[Draft, list[Item]] | None:
        """Move every pod off `b` to other GPUs (largest first), then put `u` on it: frees a whole GPU when the
        pods on it are each small enough to fit elsewhere. Without `drop` the move is kept at once; with it, pods
        that fit nowhere are left out, and the draft and those pods are returned for the caller to choose."""
        d = Draft()
        for v in b.items:
            d.take(v)
        d.put(u, b)
        if not d.ok(b.box) or self._probe(b, [u], b.items) is None:
            return None
        left: list[Item] = []
        for v in sorted(b.items, key=lambda it: (-b.shapes.mib[it.profile], it.pod.key)):
            z = self._place(v, d, avoid=b)
            if z is not None:
                d.put(v, z)
            elif drop:
                left.append(v)
            else:
                return None
        if not drop:
            self._commit(d)
        return d, left
