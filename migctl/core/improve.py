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
trade, and last **reshuffle**: every pod of one node, or of two nodes, placed again at the least stranded memory
together with left-out pods that could go there (as many of each priority stay placed), by a capped branch and
bound explored as a limited discrepancy search; for what no move of one or two pods lowers.

At the end of every pass, and once more on the plan `plan()` keeps, **augment** looks for each pod still left
out for a chain of moves of any length that places it: the pod takes a GPU in place of `v1`, `v1` another in
place of `v2`, and so on until one finds room. It is the augmenting path of bipartite matching, searched breadth
first with node resources tracked along the chain (swap covers chains of one step; a fixed depth of two did not
pay, docs/benchmarks.md). Where no chain keeps every pod placed, **two-for-one** leaves out the chain's last pod
if it has the new pod's priority, and keeps that only if another left-out pod of at least that priority then
finds a chain: what the left-out pod held, typically node CPU, serves two pods that need less.

A GPU's fit for a multiset of requests is exact (valid layouts are tried least unusable memory first, until none
left could do better) and memoised per model on the requests' canonical form: an exact profile, or a VRAM
request rounded up to the smallest plain instance that holds it (both accept exactly the same instances). Moves
are drafted and probed against the memo before anything changes. The work is capped by a count of probes, not
by time, so the result stays deterministic.
"""

from __future__ import annotations

from bisect import bisect_right, insort
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from migctl.core.cluster import GpuDemand, Pod, Resources
from migctl.core.demand import need_mib
from migctl.core.geometry import CanonicalLayout, ModelGeometry
from migctl.core.placement import signature

REPACK_PROBES = 300  # fit checks per node or node pair that `_repack` tries
RESHUFFLE_PROBES = 10_000  # fit checks per node or node pair that `_best_fill` tries
RESHUFFLE_PARTNERS = 8  # nodes paired with each node `reshuffle` takes, most surplus first
AUGMENT_PROBES = 10_000  # fit checks and GPUs looked at per left-out pod that `augment` tries
TWO_FOR_ONE_TRIES = 4  # pods of the placed pod's priority that `augment` tries to leave out (`_two_for_one`)
# ("p", profile) for an exact profile, ("v", MiB) for a VRAM request rounded up to an instance size.
Req = tuple[str, str | int]
# (cost = instance MiB handed out + unusable MiB when reshaped, reshaped?, profile per request)
Fit = tuple[int, bool, tuple[str, ...]]


class Shapes:
    """Exact single-GPU fits for one model, memoised on canonical requests."""

    def __init__(self, geo: ModelGeometry) -> None:
        self.geo = geo
        self.mib = {n: p.memory_mib for n, p in geo.profiles.items()}
        self._plain = sorted((p.memory_mib, n) for n, p in geo.profiles.items() if not p.attributes)
        self._layouts = [
            (
                dict(lay),
                sum(c for _, c in lay),
                geo.unusable_mib(lay),
                frozenset(n for n, _ in lay if geo.profiles[n].attributes),
            )
            for lay in geo.layouts
        ]
        # least unusable first, so `fit` stops at the first layout that cannot beat the best so far
        self._by_unusable = sorted(enumerate(self._layouts), key=lambda t: (t[1][2], t[0]))
        self._memo: dict[tuple[int, tuple[Req, ...]], Fit | None] = {}
        self._least: dict[Req, tuple[int, int]] = {}
        self.most = (max(geo.instance_mib(lay) for lay in geo.layouts), geo.model.compute_slices)
        self._starts: dict[tuple[CanonicalLayout, bool], int] = {}  # (free instances, reshapable) -> small id
        self._start_list: list[tuple[CanonicalLayout, bool]] = []

    def least(self, req: Req) -> tuple[int, int]:
        """Smallest MiB and fewest compute slices of any instance that serves `req` (for capacity bounds)."""
        hit = self._least.get(req)
        if hit is None:
            p = self.geo.profiles
            if req[0] == "p":
                names = [str(req[1])]
            else:
                names = [n for n, q in p.items() if not q.attributes and q.memory_mib >= int(req[1])]
            hit = self._least[req] = (min(self.mib[n] for n in names), min(p[n].compute_slices for n in names))
        return hit

    def capacity(self, base: CanonicalLayout, reshape: bool) -> tuple[int, int]:
        """Most MiB and compute slices the instances of one GPU can add up to."""
        if reshape:
            return self.most
        p = self.geo.profiles
        return self.geo.instance_mib(base), sum(p[n].compute_slices * c for n, c in base)

    def start(self, base: CanonicalLayout, reshape: bool) -> int:
        """Small id of a GPU's starting point, so memo keys hash two small things."""
        key = (base, reshape)
        if key not in self._starts:
            self._starts[key] = len(self._start_list)
            self._start_list.append(key)
        return self._starts[key]

    def req(self, demand: GpuDemand) -> Req | None:
        """Canonical form of one unit of `demand` on this model, None when no instance can serve it."""
        if demand.kind == "profile":
            return ("p", demand.profile) if demand.profile in self.mib else None
        if demand.kind == "vram":
            for mib, _ in self._plain:
                if mib >= demand.vram_mib:
                    return ("v", mib)
        return None

    def fit(self, start: int, reqs: tuple[Req, ...]) -> Fit | None:
        """Cheapest way for a GPU that starts at `start` (its free instances; any valid layout when reshapable) to
        serve `reqs` (sorted); profiles come back in the order of `reqs`."""
        key = (start, reqs)
        hit = self._memo.get(key, False)
        if hit is not False:
            return hit  # type: ignore[return-value]
        base, reshape = self._start_list[start]
        best: Fit | None = None
        kept = self._match(dict(base), reqs)
        if kept is not None:
            best = (sum(self.mib[n] for n in kept), False, kept)
        if reshape:
            wanted = frozenset(r[1] for r in reqs if r[0] == "p")
            floor = sum(self.least(r)[0] for r in reqs)  # no layout serves `reqs` with less instance MiB
            first = -1  # index of the best layout; ties go to the existing instances, then the lowest index
            for i, (have, size, unusable, variants) in self._by_unusable:
                if best is not None and unusable + floor > best[0]:
                    break
                if size < len(reqs) or not variants <= wanted:
                    continue
                got = self._match(have, reqs)
                if got is None:
                    continue
                cost = unusable + sum(self.mib[n] for n in got)
                if best is None or (cost, i) < (best[0], first):
                    best, first = (cost, True, got), i
        self._memo[key] = best
        return best

    def _match(self, have: dict[str, int], reqs: tuple[Req, ...]) -> tuple[str, ...] | None:
        """Exact profiles take theirs; VRAM requests, largest first, the smallest plain instance that holds them
        (optimal for threshold requests: each accepts every instance above its size). `reqs` is sorted, so the
        exact profiles come first and the VRAM requests in ascending size."""
        left = dict(have)
        out: list[str] = [""] * len(reqs)
        first_v = len(reqs)
        for i, (kind, what) in enumerate(reqs):
            if kind != "p":
                first_v = i
                break
            name = str(what)
            if left.get(name, 0) <= 0:
                return None
            left[name] -= 1
            out[i] = name
        for i in range(len(reqs) - 1, first_v - 1, -1):
            want = int(reqs[i][1])
            pick = next((n for mib, n in self._plain if mib >= want and left.get(n, 0) > 0), None)
            if pick is None:
                return None
            left[pick] -= 1
            out[i] = pick
        return tuple(out)


@dataclass(eq=False)
class Box:
    """A node: what CPU, memory and pod slots are still free."""

    free: Resources
    bins: list[Bin] = field(default_factory=list)
    version: int = 0  # bumped whenever a pod comes or goes


@dataclass(eq=False)
class Item:
    """A movable pod: one instance of one GPU demand."""

    pod: Pod
    demand: GpuDemand
    need: int | None  # annotated real need
    at: Bin | None = None
    profile: str = ""
    reqs: dict[int, Req | None] = field(default_factory=dict)  # per Shapes (by id)
    kind: tuple[object, ...] | None = None  # `_kind`, memoised
    kid: int = -1  # its interned id in the local search

    def req(self, shapes: Shapes) -> Req | None:
        try:
            return self.reqs[id(shapes)]
        except KeyError:
            got = self.reqs[id(shapes)] = shapes.req(self.demand)
            return got


@dataclass(eq=False)
class Bin:
    """A GPU (or a node's pool of free instances when per-GPU usage is unknown) and the pods it serves."""

    box: Box
    order: float
    shapes: Shapes
    base: CanonicalLayout  # free instances as they exist now
    reshape: bool  # may take any valid layout (idle, reconfigurable, MIG on, not serving a multi-GPU pod)
    items: list[Item] = field(default_factory=list)
    cost: int = 0
    reshaped: bool = False
    reqs: tuple[Req, ...] = ()  # of `items`, sorted
    start: int = -1
    plus: dict[Req, Fit | None] = field(default_factory=dict)  # fit with one request more, until `items` change

    def __post_init__(self) -> None:
        self.start = self.shapes.start(self.base, self.reshape)

    def probe(self, add: Sequence[Req], drop: Sequence[Req] = ()) -> Fit | None:
        """Fit of the current pods plus `add` and minus `drop` (profiles in sorted request order)."""
        reqs = list(self.reqs)
        for r in drop:
            reqs.remove(r)
        for r in add:
            insort(reqs, r)
        return self.shapes.fit(self.start, tuple(reqs))

    def set(self, items: list[Item]) -> None:
        """Serve exactly `items` (which must fit)."""
        f = self.fit(items)
        assert f is not None, "only fits that were probed are committed"
        self.take(items, f)

    def fit(self, items: Sequence[Item]) -> Fit | None:
        """Fit of `items` on this GPU, profiles in the order of `items`."""
        reqs = _reqs(items, self.shapes)
        if reqs is None:
            return None
        order = sorted(range(len(items)), key=lambda i: reqs[i])
        got = self.shapes.fit(self.start, tuple(reqs[i] for i in order))
        if got is None:
            return None
        profiles = [""] * len(items)
        for k, i in enumerate(order):
            profiles[i] = got[2][k]
        return got[0], got[1], tuple(profiles)

    def take(self, items: list[Item], fit: Fit) -> None:
        self.items = items
        self.plus = {}
        self.cost, self.reshaped = fit[0], fit[1]
        reqs = _reqs(items, self.shapes)
        assert reqs is not None, "only fits that were probed are taken"
        self.reqs = tuple(sorted(reqs))
        for it, name in zip(items, fit[2], strict=True):
            it.at, it.profile = self, name


class LocalSearch:
    """Improve a greedy result in place: see the module docstring. Moves are probed first (memoised fits, no
    state change) and applied only when they improve."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        self.candidates = candidates
        self.budget = budget  # probes left
        self.out: list[Item] = []  # pods left out, highest priority first
        self.epoch = 0  # bumped on every kept change: cached answers of older epochs are stale
        self._spots: dict[tuple[int, int], tuple[int, list[Bin]]] = {}
        self._failed: dict[int, int] = {}  # pod kind -> epoch when no move helped it
        self._reach_sets: dict[int, set[Bin]] = {}
        self._filler_cache: tuple[object, dict[int, list[tuple[Item, int]]]] = (None, {})
        self._ids: dict[tuple[object, ...], int] = {}  # interned kinds: keys then hash one small int
        self.repacks = 0  # work left for `_repack` (off unless the caller grants some)
        self.repacked = 0  # pods `_repack` placed
        self._capacities: dict[int, tuple[int, int]] = {}
        self._box_lists: dict[int, list[Box]] = {}
        self._spares: dict[int, tuple[int, tuple[int, int]]] = {}
        self._smallest: dict[int, tuple[int, int]] = {}
        self._unpacked: dict[tuple[int, int, int], tuple[int, ...]] = {}  # (kind, node, node) -> versions tried
        self.shuffles = 0  # work left for `reshuffle`
        self._surpluses: dict[int, tuple[int, int]] = {}
        self._wastes: dict[int, int] = {}
        self._needs: dict[tuple[int, int], int] = {}
        self._outs = 0  # bumped when `reshuffle` changes which pods are left out
        self.augments = 0  # work left for `augment` (off unless the caller grants some)
        self._dead: set[int] = set()  # pod kinds for which `augment` searched every chain and found none
        # (GPU, pod kind) that `augment` entered since the last kept chain: a chain through them was already
        # searched and found nothing (the bipartite matching argument; resources along a chain are ignored)
        self._explored: set[tuple[int, int]] = set()

    def _intern(self, key: tuple[object, ...]) -> int:
        return self._ids.setdefault(key, len(self._ids))

    def _kid(self, it: Item) -> int:
        """Interned `_kind` of the pod (cached on the item)."""
        if it.kid < 0:
            it.kid = self._intern(_kind(it))
        return it.kid

    def _probe(self, b: Bin, add: Sequence[Item], drop: Sequence[Item] = ()) -> Fit | None:
        self.budget -= 1
        return self._fits(b, add, drop)

    def _fits(self, b: Bin, add: Sequence[Item], drop: Sequence[Item] = ()) -> Fit | None:
        """`_probe` without the budget charge, for moves with their own share of work (`augment`)."""
        if not drop and len(add) == 1:
            return self._probe_one(b, add[0])
        adds, drops = _reqs(add, b.shapes), _reqs(drop, b.shapes)
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
            for v in sorted(placed, key=lambda it: (-_excess(it), it.pod.key)) if singles else ():
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
                for v in sorted(placed, key=lambda it: (-_excess(it), it.pod.key)):
                    if self.budget <= chain_stop:
                        break
                    if v.at is not None and _excess(v) > 0 and self._chain(v, chain_stop):
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
            before = _held(b)
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
                delta = _stranded(b, items, f) - before
                if delta < 0 and (best is None or (delta, b.order) < best[0]):
                    best = ((delta, b.order), b, v)
        if best is None:
            return False
        _, b, v = best
        self._move(v, None)
        self._move(u, b)
        self.out = [v if it is u else it for it in self.out]
        return True

    def reshuffle(self, placed: list[Item], work: int) -> int:
        """Objective 2 where no move of one or two pods helps: every pod of one node, then of that node and one
        other, is placed again at the least stranded memory, together with left-out pods that could go there
        (`_reshuffle`, `_best_fill`); kept when it strands less, or as much on fewer reshaped GPUs. Nodes that
        strand the most above what their pods must strand come first; a node is tried when it strands more than
        that or holds pods of a priority that has pods left out. As many pods of each priority stay placed, so
        objective 1 is untouched. Returns how many nodes or pairs were re-placed."""
        self.shuffles = work
        boxes = list(dict.fromkeys(it.at.box for it in placed if it.at is not None))
        tiers = {it.pod.priority for it in self.out if it.at is None}
        done = 0
        for a in sorted(boxes, key=lambda box: -self._surplus(box)):
            if self.shuffles <= 0:
                break
            if self._surplus(a) > 0 or any(it.pod.priority in tiers for x in a.bins for it in x.items):
                done += self._reshuffle_around(a)
        return done

    def _reshuffle_around(self, a: Box) -> int:
        """Re-place node `a` alone, then with each of the `RESHUFFLE_PARTNERS` nodes its pods could also use
        that strand the most surplus. All partners reached the optimum on no more benchmark instances but took
        2.5× the plan time on a busy 152-node cluster in the simulator (docs/benchmarks.md)."""
        done = 0
        others, work = self._partners(a)
        self.shuffles -= work
        ranked = sorted([None, *others], key=lambda x: (x is not None, 0 if x is None else -self._surplus(x)))
        for b in ranked[: RESHUFFLE_PARTNERS + 1]:  # the node alone, then its partners
            if self.shuffles <= 0:
                break
            self.shuffles -= 1
            group = [a] if b is None else [a, b]
            lo, hi = sorted((group[0], group[-1]), key=id)  # (a, b) and (b, a) share one memo entry
            key, stamp = (-1, id(lo), id(hi)), (lo.version, hi.version, self._outs)  # kind -1: no pod kind is negative
            if self._unpacked.get(key) == stamp:
                continue
            if self._reshuffle(group):
                done += 1
                self.epoch += 1
            else:
                self._unpacked[key] = stamp
        return done

    def _surplus(self, box: Box) -> int:
        """Memory the node's GPUs strand beyond the least its pods could strand anywhere (a ranking, by version)."""
        hit = self._surpluses.get(id(box))
        if hit is not None and hit[0] == box.version:
            return hit[1]
        out = 0
        for x in box.bins:
            out += _held(x)
            out -= sum(self._least_waste(it) for it in x.items)
        self._surpluses[id(box)] = (box.version, out)
        return out

    def _least_waste(self, it: Item) -> int:
        """Least memory the pod strands in any instance that serves it on a GPU in its reach."""
        k = self._kid(it)
        hit = self._wastes.get(k)
        if hit is None:
            got = [
                x.shapes.least(r)[0] - self._need_on(it, x.shapes)
                for x in self._reach(it)
                if (r := it.req(x.shapes)) is not None
            ]
            hit = self._wastes[k] = min(got, default=0)
        return hit

    def _need_on(self, it: Item, shapes: Shapes) -> int:
        """What the pod needs of its smallest instance on this model (the same for any instance that serves it,
        unless an annotation states more than that instance holds)."""
        key = (self._kid(it), id(shapes))
        hit = self._needs.get(key)
        if hit is None:
            req = it.req(shapes)
            assert req is not None, "candidates serve the pod"
            hit = self._needs[key] = need_mib(it.demand, shapes.least(req)[0], it.need)
        return hit

    def _reshuffle(self, boxes: list[Box]) -> bool:
        """Re-place every pod of `boxes` by `_best_fill`, together with left-out pods that could go there: of
        each priority, as many stay placed as are placed now, so objective 1 is unchanged. True when a placement
        that strands less was found and applied."""
        bins = [x for box in boxes for x in box.bins]
        items = [it for x in bins for it in x.items]
        keep: dict[int, int] = {}
        for it in items:
            keep[it.pod.priority] = keep.get(it.pod.priority, 0) + 1
        spare: list[Item] = []
        per_kind: dict[int, int] = {}
        for u in self.out:
            k = self._kid(u)
            fresh = u.at is None and per_kind.get(k, 0) < keep.get(u.pod.priority, 0)
            if fresh and any(x in self._reach(u) for x in bins):
                per_kind[k] = per_kind.get(k, 0) + 1
                spare.append(u)
        tiers = {u.pod.priority for u in spare}
        if len(items) + len(spare) < 2:
            return False
        now = (
            sum(_held(x) for x in bins),
            sum(x.reshaped for x in bins),
        )
        got = self._best_fill([*items, *spare], bins, now, {t: keep[t] for t in tiers})
        if got is None or self._strands(got, bins) >= now:
            return False
        for it in items:
            self._move(it, None)
        for it, x in got:
            self._move(it, x)
        out = [it for it in self.out if it.at is None] + [it for it in items if it.at is None]
        self.out = sorted(out, key=lambda it: -it.pod.priority)  # kept highest priority first, as `run` leaves it
        self._outs += 1
        return True

    @staticmethod
    def _strands(got: list[tuple[Item, Bin | None]], bins: list[Bin]) -> tuple[int, int]:
        """(stranded MiB, reshaped GPUs) of `bins` if they served what `got` gives them, computed exactly (the
        search sums each pod's need on its smallest instance)."""
        on: dict[Bin, list[Item]] = {x: [] for x in bins}
        for it, x in got:
            if x is not None:
                on[x].append(it)
        stranded = reshaped = 0
        for x, its in on.items():
            f = x.fit(its)
            assert f is not None, "the search checked this fit"
            stranded += _stranded(x, its, f)
            reshaped += f[1]
        return stranded, reshaped

    def _best_fill(
        self, items: list[Item], bins: list[Bin], beat: tuple[int, int], keep: dict[int, int]
    ) -> list[tuple[Item, Bin | None]] | None:
        """Places on `bins` for `items` stranding less than `beat` (stranded MiB, reshaped GPUs), by a branch and
        bound explored as a limited discrepancy search: largest pods first, each GPU tried cheapest first, the
        bound being what the remaining pods must strand at least (a heuristic bound: a GPU's unusable memory can
        shrink as pods join it). Of the priorities in `keep`, exactly that many pods are placed, and any of them
        may stay out; all others are placed. None when nothing better is found within `RESHUFFLE_PROBES`."""
        order = sorted(items, key=lambda it: (-self._slack(it)[0], self._kid(it), it.pod.key))
        tiers = sorted(keep)
        need = [keep[t] for t in tiers]
        tier = [tiers.index(it.pod.priority) if it.pod.priority in keep else -1 for it in order]
        optional = [t >= 0 for t in tier]
        reach = [[x for x in bins if x in self._reach(it)] for it in order]
        # What the pods from k on must strand at least: every pod that must be placed, plus per tier the pods
        # still to be placed, at the least of what the remaining optional pods of that tier would strand.
        floor = [0] * (len(order) + 1)
        wastes: list[list[int]] = [[] for _ in tiers]
        cheap: list[list[list[int]]] = [[[0] for _ in tiers] for _ in range(len(order) + 1)]
        for k in range(len(order) - 1, -1, -1):
            floor[k] = floor[k + 1] + (0 if optional[k] else self._least_waste(order[k]))
            cheap[k] = cheap[k + 1]
            if optional[k]:
                insort(wastes[tier[k]], self._least_waste(order[k]))
                sums = [0]
                for w in wastes[tier[k]]:
                    sums.append(sums[-1] + w)
                cheap[k] = [*cheap[k + 1][: tier[k]], sums, *cheap[k + 1][tier[k] + 1 :]]
        kept = [0] * len(tiers)
        twin = [k > 0 and self._kid(order[k]) == self._kid(order[k - 1]) for k in range(len(order))]
        pos = {x: j for j, x in enumerate(bins)}
        held: dict[Bin, tuple[Req, ...]] = {x: () for x in bins}  # sorted requests of the pods placed so far
        needs = dict.fromkeys(bins, 0)  # what those pods need
        cost: dict[Bin, tuple[int, bool]] = {x: (0, False) for x in bins}  # (stranded MiB, reshaped)
        room = {x.box: x.box.free for x in bins}
        for it in items:
            if it.at is not None:
                room[it.at.box] = room[it.at.box] + it.pod.requests
        chosen: list[Bin | None] = [None] * len(order)
        best, pick = beat, None
        probes = min(RESHUFFLE_PROBES, self.shuffles)

        cut = False  # a branch was cut for lack of discrepancies: a larger allowance searches more

        def go(k: int, stranded: int, reshaped: int, slack: int) -> None:
            nonlocal probes, best, pick, cut
            must = stranded + floor[k]
            for t, sums in enumerate(cheap[k]):
                if need[t] - kept[t] >= len(sums):
                    return  # too few pods of this tier left to place as many as before
                must += sums[need[t] - kept[t]]
            if (must, 0) >= best:
                return
            if k == len(order):
                if (stranded, reshaped) < best:
                    best, pick = (stranded, reshaped), list(chosen)
                return
            it = order[k]
            prev = chosen[k - 1] if twin[k] else bins[0]  # identical pods take GPUs in list order
            low = 0 if prev is None else pos[prev]
            options = []
            tried: set[tuple[int, tuple[Req, ...], int]] = set()
            for x in reach[k] if prev is not None and (not optional[k] or kept[tier[k]] < need[tier[k]]) else ():
                sig = (x.start, held[x], id(x.box))
                if pos[x] < low or sig in tried or not it.pod.requests.fits_in(room[x.box]):
                    continue
                tried.add(sig)
                if probes <= 0:
                    return
                probes -= 1
                self.shuffles -= 1
                req = it.req(x.shapes)
                assert req is not None, "candidates serve the pod"
                trial = list(held[x])
                insort(trial, req)
                f = x.shapes.fit(x.start, tuple(trial))
                if f is None:
                    continue
                n = self._need_on(it, x.shapes)
                s = f[0] - needs[x] - n
                options.append(
                    (s - cost[x][0], int(f[1]) - int(cost[x][1]), x is not it.at, pos[x], x, s, f[1], trial, n)
                )
            options.sort(key=lambda o: o[:4])
            for rank, (ds, dr, _, _, x, s, r, trial, n) in enumerate(options):
                if rank and not slack:
                    cut = True
                    return
                saved = cost[x], held[x]
                held[x] = tuple(trial)
                needs[x] += n
                cost[x] = (s, r)
                room[x.box] = room[x.box] - it.pod.requests
                chosen[k] = x
                if optional[k]:
                    kept[tier[k]] += 1
                go(k + 1, stranded + ds, reshaped + dr, slack - (rank > 0))
                if optional[k]:
                    kept[tier[k]] -= 1
                cost[x], held[x] = saved
                needs[x] -= n
                room[x.box] = room[x.box] + it.pod.requests
                if probes <= 0:
                    return
            if optional[k]:  # leave it out (identical pods: the later ones are left out first)
                if options and not slack:
                    cut = True
                    return
                chosen[k] = None
                go(k + 1, stranded, reshaped, slack - bool(options))

        # Limited discrepancy search: first the path that takes every pod's cheapest GPU, then the paths that
        # deviate from it at one pod, at two, ...: a capped depth-first search would spend its probes at the
        # bottom of the tree, undoing the last pods' choices only.
        for allowance in range(len(order) + 1):
            cut = False
            go(0, 0, 0, allowance)
            if not cut or probes <= 0:
                break
        return None if pick is None else list(zip(order, pick, strict=True))

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
        best: tuple[tuple[int, float, int], _Draft] | None = None
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
                d = _Draft()
                d.take(v)
                for w in group:
                    d.take(w)
                d.put(v, y)
                if not d.ok(y.box):
                    continue
                f = self._probe(y, [v], group)
                needs = sum(y.shapes.mib[w.profile] - _excess(w) for w in group)
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

    def _keep(self, best: tuple[object, _Draft] | None) -> bool:
        return best is not None and self._commit(best[1])

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

    def eject(self, u: Item) -> bool:
        """Make room for `u`: swap, evacuate, or drop (module docstring); True when a move was kept."""
        fallback: _Draft | None = None  # the first move that leaves out a lower-priority pod, if nothing better
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
        best: tuple[tuple[int, float], _Draft, list[Item]] | None = None
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
        one that leaves out a pod of `u`'s priority (`_two_for_one`). Capped by `AUGMENT_PROBES`."""
        probes = AUGMENT_PROBES
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
                    elif v.pod.priority == u.pod.priority and len(evens) < TWO_FOR_ONE_TRIES:
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

    def _chain_draft(self, chain: list[_Link], i: int, b: Bin, drop: Item | None = None) -> _Draft | None:
        """The draft of `augment`'s chain that ends with entry `i`'s pod going to `b` (leaving `drop` out, when
        given); None when its moves, taken together, do not fit (two steps on one GPU or node)."""
        d = _Draft()
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

    def _slack(self, it: Item) -> tuple[int, int]:
        """Smallest MiB and compute slices of any instance that can serve `it` on any GPU in its reach."""
        k = self._kid(it)
        hit = self._smallest.get(k)
        if hit is None:
            got = [x.shapes.least(r) for x in self._reach(it) if (r := it.req(x.shapes)) is not None]
            hit = self._smallest[k] = (min(m for m, _ in got), min(c for _, c in got)) if got else (0, 0)
        return hit

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
        rest = sorted(range(1, len(items)), key=lambda i: (len(reach[i]), -_mib(items[i]), self._kid(items[i]), i))
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

    def _try(self, u: Item, b: Bin, v: Item) -> _Draft | bool:
        """Put `u` on `b` in place of `v`; keep it (True) if `v` finds another GPU or another left-out pod of at
        least `v`'s priority fits in the room `v` leaves. Otherwise, when `v` has a lower priority than `u`, the
        draft that leaves `v` out, for the caller to keep if nothing better turns up."""
        self.budget -= 1
        assert v.at is not None
        # the draft's own checks, without building it: most candidates fail here
        room = b.box.free + v.pod.requests if v.at.box is b.box else b.box.free
        if not u.pod.requests.fits_in(room) or self._probe(b, [u], [v] if v.at is b else []) is None:
            return False
        d = _Draft()
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
                    out.append((w, self._intern(_kind(w)[2:])))
            by_priority[priority] = out
        return by_priority[priority]

    def _evacuate(self, u: Item, b: Bin, drop: bool) -> tuple[_Draft, list[Item]] | None:
        """Move every pod off `b` to other GPUs (largest first), then put `u` on it: frees a whole GPU when the
        pods on it are each small enough to fit elsewhere. Without `drop` the move is kept at once; with it, pods
        that fit nowhere are left out, and the draft and those pods are returned for the caller to choose."""
        d = _Draft()
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

    def _reach(self, it: Item) -> set[Bin]:
        key = self._kid(it)
        if key not in self._reach_sets:
            self._reach_sets[key] = set(self.candidates(it))
        return self._reach_sets[key]

    def _place(self, it: Item, d: _Draft, avoid: Bin | None = None) -> Bin | None:
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

    def _commit(self, d: _Draft) -> bool:
        for it in d.taken:
            self._move(it, None)
        for it, to in d.placed:
            self._move(it, to)
        return True


# an entry of `augment`'s search: (pod to move, its parent entry, the GPU it leaves to the parent's pod, node
# resources the chain up to here frees: negative where it takes more than it frees)
_Link = tuple[Item, int, "Bin | None", dict[Box, Resources]]


class _Draft:
    """Moves not yet made: pods taken off their GPUs, pods put on GPUs, and what that does to node resources."""

    def __init__(self) -> None:
        self.taken: list[Item] = []
        self.placed: list[tuple[Item, Bin]] = []
        self.res: dict[Box, Resources] = {}

    def copy(self) -> _Draft:
        out = _Draft()
        out.taken, out.placed, out.res = list(self.taken), list(self.placed), dict(self.res)
        return out

    def take(self, it: Item) -> None:
        assert it.at is not None
        self.taken.append(it)
        self.res[it.at.box] = self.res.get(it.at.box, Resources()) + it.pod.requests

    def put(self, it: Item, b: Bin) -> None:
        self.placed.append((it, b))
        self.res[b.box] = self.res.get(b.box, Resources()) - it.pod.requests

    def room(self, box: Box) -> Resources:
        delta = self.res.get(box)
        return box.free if delta is None else box.free + delta

    def ok(self, box: Box) -> bool:
        return Resources().fits_in(self.room(box))

    def adds(self, b: Bin) -> list[Item]:
        return [it for it, x in self.placed if x is b]

    def drops(self, b: Bin) -> list[Item]:
        return [it for it in self.taken if it.at is b]


def _reqs(items: Sequence[Item], shapes: Shapes) -> list[Req] | None:
    """Canonical requests of `items` on one model, None when one of them cannot be served there."""
    out = []
    for it in items:
        r = it.req(shapes)
        if r is None:
            return None
        out.append(r)
    return out


def _stranded(b: Bin, items: Sequence[Item], fit: Fit) -> int:
    """Memory `items` would strand on `b` with `fit`: instance memory they do not need, plus unusable memory."""
    return fit[0] - sum(need_mib(it.demand, b.shapes.mib[p], it.need) for it, p in zip(items, fit[2], strict=True))


def _held(b: Bin) -> int:
    """Memory the GPU strands with the pods it serves now."""
    return _stranded(b, b.items, (b.cost, b.reshaped, tuple(it.profile for it in b.items)))


def _mib(it: Item) -> int:
    """Memory of the pod's current instance, as a size for ordering (0 when unplaced)."""
    return 0 if it.at is None else it.at.shapes.mib[it.profile]


def _excess(it: Item) -> int:
    """Memory of its instance the pod does not use (0 when unplaced)."""
    if it.at is None:
        return 0
    mib = it.at.shapes.mib[it.profile]
    return mib - need_mib(it.demand, mib, it.need)


def _kind(it: Item) -> tuple[object, ...]:
    """Pods with equal kinds are interchangeable for every move (computed once per item)."""
    if it.kind is None:
        it.kind = (it.demand, it.need, it.pod.requests, it.pod.priority, *signature(it.pod))
    return it.kind
