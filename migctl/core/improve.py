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

from migctl.core.augment import Augment
from migctl.core.bins import Bin, Box, Draft, Item, excess_mib, held_mib, instance_mib, pod_kind, stranded_mib
from migctl.core.fits import Req
from migctl.core.reshuffle import Reshuffle

REPACK_PROBES = 300  # fit checks per node or node pair that `_repack` tries


class LocalSearch(Augment, Reshuffle):
    """Improve a greedy result in place: see the module docstring. Moves are probed first (memoised fits, no
    state change) and applied only when they improve."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        super().__init__(candidates, budget)
        self._failed: dict[int, int] = {}  # pod kind -> epoch when no move helped it
        self._filler_cache: tuple[object, dict[int, list[tuple[Item, int]]]] = (None, {})
        self.repacks = 0  # work left for `_repack` (off unless the caller grants some)
        self.repacked = 0  # pods `_repack` placed
        self._capacities: dict[int, tuple[int, int]] = {}
        self._spares: dict[int, tuple[int, tuple[int, int]]] = {}

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

    def tidy(self, placed: list[Item], probes: int, chain_probes: int = 0, moved_singles: bool = True) -> bool:
        """Objective 2: move single pods to GPUs where they strand less memory (instance waste plus unusable
        memory of reshaped GPUs), most wasteful first, in rounds until nothing moves or `probes` (at most what is
        left of the budget) are spent. When no single move helps, exchanges (`_chain`) get up to `chain_probes`
        of that per round. Objective 2 only, so it gets a fixed share: on thousands of GPUs finding each pod
        kind's candidate GPUs alone would take the whole budget. `moved_singles=False`: an earlier tidy already
        found no single move, so start with exchanges. False when `probes` ran out before it was done."""
        stop = self.budget - min(self.budget, probes)
        moved = True
        singles = moved_singles
        while moved and self.budget > stop:
            moved = False
            for v in sorted(placed, key=lambda it: (-excess_mib(it), it.pod.key)) if singles else ():
                home = v.at
                if home is None or self.budget <= stop:
                    continue
                left = self._probe(home, [], [v])
                assert left is not None, "a subset of what fits still fits"
                gain = home.cost - left[0]
                best: tuple[tuple[int, float], Bin] | None = None
                for x in self.spots(v):
                    if x is home or not v.pod.requests.fits_in(x.box.free):
                        continue
                    f = self._probe(x, [v])
                    if f is not None and f[0] - x.cost < gain and (best is None or (f[0] - x.cost, x.order) < best[0]):
                        best = ((f[0] - x.cost, x.order), x)
                if best is not None:
                    self._move(v, best[1])
                    self.epoch += 1
                    moved = True
            singles = True
            if not moved:
                chain_stop = max(stop, self.budget - chain_probes)
                for v in sorted(placed, key=lambda it: (-excess_mib(it), it.pod.key)):
                    if self.budget <= chain_stop:
                        break
                    if v.at is not None and excess_mib(v) > 0 and self._chain(v, chain_stop):
                        self.epoch += 1
                        moved = True
        return self.budget > stop

    def trade(self, probes: int) -> None:
        """Objective 2 among equals, the last step: a left-out pod takes the place of a placed pod of the same
        priority where that strands less memory, and the placed pod is left out instead. Only pods of the lowest
        priority still left out trade: the pods placed per priority stay the same, and no pod of a lower priority
        is left out that the larger pods now placed could have crowded out."""
        stop = self.budget - min(self.budget, probes)
        traded = True
        while traded and self.budget > stop and self.out:
            traded = False
            lowest = min(it.pod.priority for it in self.out)
            for u in [it for it in self.out if it.pod.priority == lowest]:
                if self.budget <= stop:
                    break
                if u.at is None and self._trade(u):
                    self.epoch += 1
                    traded = True

    def _trade(self, u: Item) -> bool:
        """Put left-out `u` in place of the same-priority pod whose exchange lowers stranded memory most."""
        best: tuple[tuple[int, float], Bin, Item] | None = None
        for b in self.candidates(u):
            before = held_mib(b)
            seen: set[int] = set()
            for v in b.items:
                k = self._kid(v)
                if v.pod.priority != u.pod.priority or k in seen:
                    continue
                seen.add(k)
                if not u.pod.requests.fits_in(b.box.free + v.pod.requests) or self._probe(b, [u], [v]) is None:
                    continue
                items = [x for x in b.items if x is not v] + [u]
                f = b.fit(items)
                assert f is not None, "probed above"
                delta = stranded_mib(b, items, f) - before
                if delta < 0 and (best is None or (delta, b.order) < best[0]):
                    best = ((delta, b.order), b, v)
        if best is None:
            return False
        _, b, v = best
        self._move(v, None)
        self._move(u, b)
        self.out = [v if it is u else it for it in self.out]
        return True

    def _chain(self, v: Item, stop: int) -> bool:
        """One step deeper than tidy's single move: `v` takes the place of one pod `w` on another GPU, or of all
        of that GPU's pods, and they go to their cheapest places (`v`'s old GPU included); kept when the memory
        stranded on the GPUs involved goes down. Finds what lowers objective 2 where no pod can move alone, such
        as a large pod in an oversized instance whose right-sized GPU is held by small pods that fit elsewhere."""
        home = v.at
        assert home is not None
        left = self._probe(home, [], [v])
        assert left is not None, "a subset of what fits still fits"
        gain = home.cost - left[0]
        best: tuple[tuple[int, float, int], Draft] | None = None
        for y in self.candidates(v):
            if y is home or not y.items:
                continue
            groups: dict[int, list[Item]] = {}
            for w in y.items:
                groups.setdefault(self._kid(w), [w])
            moves = list(groups.values())
            if len(y.items) > 1:
                moves.append(sorted(y.items, key=lambda it: (-y.shapes.mib[it.profile], it.pod.key)))
            for group in moves:
                if self.budget <= stop:
                    return self._keep(best)
                d = Draft()
                d.take(v)
                for w in group:
                    d.take(w)
                d.put(v, y)
                if not d.ok(y.box):
                    continue
                f = self._probe(y, [v], group)
                needs = sum(y.shapes.mib[w.profile] - excess_mib(w) for w in group)
                if f is None or f[0] - y.cost + needs >= gain:
                    continue  # a displaced pod mostly costs its need where it goes (a pruning rule, not a bound)
                touched = [home, y]
                for w in group:
                    z = self._place(w, d, avoid=y)
                    if z is None:
                        break
                    d.put(w, z)
                    touched.append(z)
                else:
                    delta = 0
                    for b in dict.fromkeys(touched):
                        g = self._probe(b, d.adds(b), d.drops(b))
                        if g is None:
                            break
                        delta += g[0] - b.cost
                    else:
                        if delta < 0 and (best is None or (delta, y.order, len(group)) < best[0]):
                            best = ((delta, y.order, len(group)), d)
        return self._keep(best)

    def insert(self, u: Item) -> bool:
        """Put `u` on the GPU where it adds the least cost; False when none has room."""
        best: tuple[tuple[int, bool, float], Bin] | None = None
        for b in self.candidates(u):
            if not u.pod.requests.fits_in(b.box.free):
                continue
            f = self._probe(b, [u])
            if f is not None:
                rank = (f[0] - b.cost, f[1] and not b.reshaped, b.order)
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
        interchangeable pods take GPUs in list order. None when nothing is found within `REPACK_PROBES`."""
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
        probes = REPACK_PROBES

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
