"""The objective over time: what the free instances of a layout are worth for the demand still to come.

One place for it: the planner's best completions (the layout a reshaped GPU gets around the instances assigned
to it), its tie-break between free existing instances, and the pre-shaping of idle GPUs all ask `Completions`.

A layout's value is the MiB of forecast demand its free instances can serve (`served`): a GPU's worth of pods
(`model.max_instances` of them) is drawn in the forecast's proportions (`migctl/core/forecast/estimate.py`) and poured
into the free instances, exact-profile classes first, then VRAM classes largest first, each taking the smallest
instances that serve it; what lands counts at the class's mean real need. This is FGD's measure (fragmentation
relative to the workload, Weng et al., ATC'23) turned into MIG instances: memory in an instance no expected pod
fits, or a small pod in a large instance, is memory the workload cannot use.

How it weighs against unusable MiB (docs/planning.md): for the instances assigned, every layout splits the same
memory (the full instance's minus what is assigned) into free instances and unusable memory, so the MiB it will
strand is that constant minus `served`. Maximising `served` is therefore minimising expected stranded MiB over a
GPU's worth of pods, unusable memory included, with no free weight to tune. Equal values fall back to less
unusable memory, then larger free instances (sum of squared GiB), then the layout itself.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from copy import copy

from migctl.core.forecast.estimate import DemandClass, ModelForecast
from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, canonical
from migctl.core.inplace.reach import Around, reach
from migctl.core.model.demand import WHOLE_GPU

Layout = CanonicalLayout
Request = tuple[tuple[str, ...], int]  # (profiles that serve it, smallest first; real need MiB)
# the memos of one capped want (`Completions.with_want`): best completions, served MiB, regroups
_Memos = tuple[
    dict[Layout, tuple[Layout, int, int] | None],
    dict[Layout, int],
    dict[tuple[Request, ...], tuple[Layout, tuple[str, ...]] | None],
]
# what one layout gives requests of known profiles (`Completions._serving`): (layout, unusable MiB, instance per
# request, instances left)
_Serving = tuple[Layout, int, tuple[str, ...], dict[str, int]]
# usefulness packs (served MiB, squared GiB) into one int, served first
_SQ_BITS = 24


class Completions:
    """Per model: best completion of each assigned multiset, and what free instances are worth."""

    def __init__(
        self, geo: ModelGeometry, demand: ModelForecast | None = None, want: Mapping[object, float] | None = None
    ) -> None:
        self.geo = geo
        self.demand = demand
        # every pod served counts a GPU's memory per pod at most, on top of its need (docs/planning.md)
        self.pod_mib = geo.model.full_profile.memory_mib / geo.model.max_instances
        horizon = geo.model.max_instances  # pods drawn from the forecast: a GPU's worth, unless `want` says
        classes = demand.classes if demand is not None else ()
        self.want: tuple[tuple[DemandClass, float], ...] = tuple(
            (c, horizon * c.share if want is None else want.get(c.key, 0.0)) for c in classes
        )
        self._best: dict[Layout, tuple[Layout, int, int] | None] = {}
        self._around: dict[tuple[Around, Layout], tuple[Layout, int, int] | None] = {}
        self._served: dict[Layout, int] = {}
        self._regroup: dict[tuple[Request, ...], tuple[Layout, tuple[str, ...]] | None] = {}
        # `_serving`, shared by every `with_want` copy (it does not depend on the want)
        self._serves: dict[tuple[tuple[str, ...], ...], list[_Serving]] = {}
        self._takes: dict[tuple[tuple[str, int], ...], list[tuple[str, int]]] = {}
        self._served_by_cap: dict[tuple[tuple[str, int], ...], list[tuple[str, int | None]]] = {}
        # `with_want`'s copies share memos by their want capped at a GPU's instances
        self._capped = False
        self._families: dict[tuple[float, ...], _Memos] = {}
        self._room: dict[str, int] | None = _room(self.want)
        self._sq = {n: (p.memory_mib // 1024) ** 2 for n, p in geo.profiles.items()}
        # every valid layout once: as a dict, its unusable MiB, and whether it contains media variants
        self._layouts = [
            (lay, dict(lay), geo.unusable_mib(lay), {n for n, _ in lay if geo.profiles[n].attributes})
            for lay in geo.layouts
        ]

    @property
    def layouts(self) -> list[tuple[Layout, dict[str, int], int, set[str]]]:
        """Every valid layout of the model once: (layout, as a dict, unusable MiB, its media variants)."""
        return self._layouts

    def served(self, free: Mapping[str, int]) -> int:
        """MiB of forecast demand (a GPU's worth of pods) that the free instances `free` can serve."""
        key = self._key(free.items())
        hit = self._served.get(key)
        if hit is not None:
            return hit
        return self._pour(key)

    def served_of(self, layout: Layout) -> int:
        """`served` of a canonical layout (no copy)."""
        hit = self._served.get(layout)
        if hit is None:
            hit = self._pour(layout)
        return hit

    def _key(self, free: Iterable[tuple[str, int]]) -> Layout:
        """`served`'s memo key of free instances (a mapping's items): canonical, each count capped at `_room` (a
        pool of a busy node holds dozens of instances, and its every state would be a fresh key otherwise)."""
        room = self._room
        if room is None:
            return canonical((n, c) for n, c in free if c > 0 and n != WHOLE_GPU)
        # a mapping's items: each name once, so sorting the pairs is `canonical` without its Counter
        return tuple(sorted((n, m) for n, c in free if n != WHOLE_GPU and (m := min(c, room.get(n, 0))) > 0))

    def _pour(self, key: Layout) -> int:
        """`served` of canonical free instances, memoised: in a capped family only for at most a GPU's
        instances, the multisets whose value the cap does not change (`with_want`)."""
        hit = round(pour(self.want, key, self.pod_mib)[0])
        if not self._capped or sum(c for _, c in key) <= self.geo.model.max_instances:
            self._served[key] = hit
        return hit

    def with_want(self, want: Mapping[object, float]) -> Completions:
        """The same model and forecast classes with another demand to serve (pods per class).

        Its memos are shared with every other copy whose want is the same once each class is capped at a GPU's
        instances (`model.max_instances`): `pour` gives a class of at least that many pods every instance that
        serves it, as it would give a class of any more, so `served` of up to that many instances, and with it
        `best` and `regroup` (which only ask it of valid layouts), is the same for both. `for_the_forecast`
        asks for a fresh want per GPU as the demand is served down; capped, a few dozen wants remain."""
        other = copy(self)
        other.want = tuple((c, want.get(c.key, 0.0)) for c, _ in self.want)
        cap = self.geo.model.max_instances
        family = tuple(min(n, cap) for _, n in other.want)
        memos = self._families.get(family)
        if memos is None:
            memos = self._families[family] = ({}, {}, {})
        other._best, other._served, other._regroup = memos
        other._takes = {}
        other._served_by_cap = {}
        other._around = {}
        other._capped = True
        other._room = None  # the memos are shared: a key must not depend on one member's want
        return other

    def residual(self, layout: Layout) -> dict[object, float]:
        """Pods per class of `want` that the instances of `layout` leave unserved."""
        return pour(self.want, layout, self.pod_mib)[1]

    def usefulness(self, free: Mapping[str, int]) -> int:
        """Tie-break value of free instances, larger is better: `served`, then squared GiB (larger instances)."""
        return (self.served(free) << _SQ_BITS) + self._squares(free)

    def _squares(self, free: Mapping[str, int]) -> int:
        sq = self._sq
        return sum(sq[n] * c for n, c in free.items() if c > 0 and n != WHOLE_GPU)

    def usefulness_without(self, free: Mapping[str, int], profile: str) -> int:
        """`usefulness` of `free` once one instance of `profile` is taken from it."""
        if profile == WHOLE_GPU:
            return 0
        rest = dict(free)
        rest[profile] = rest.get(profile, 0) - 1
        return self.usefulness(rest)

    def takes(self, free: Mapping[str, int]) -> list[tuple[str, int]]:
        """(profile, `usefulness_without(free, profile)`) for each profile `free` has an instance of, in its order.
        Memoised by its items: the greedy asks it of every GPU state it indexes, and a few thousand states
        repeat over tens of thousands of GPU updates at scale."""
        key = tuple(free.items())
        hit = self._takes.get(key)
        if hit is None:
            squares, sq = self._squares(free), self._sq
            hit = self._takes[key] = [
                (name, 0 if served is None else served + squares - sq[name])
                for name, served in self._served_without(key)
            ]
        return hit

    def _served_without(self, key: tuple[tuple[str, int], ...]) -> list[tuple[str, int | None]]:
        """`takes` before the squares: (profile, `served` once one instance of it is taken, shifted; None for a
        whole GPU). Memoised on the counts capped one above `_room`: taking one from a count above that leaves
        `_key` at the cap, as taking one from the cap plus one does (the pools of busy nodes differ there)."""
        room = self._room
        capped = (
            key if room is None else tuple((n, c if n == WHOLE_GPU else min(c, room.get(n, 0) + 1)) for n, c in key)
        )
        hit = self._served_by_cap.get(capped)
        if hit is None:
            hit = self._served_by_cap[capped] = []
            for name, c in capped:
                if c <= 0:
                    continue
                if name == WHOLE_GPU:
                    hit.append((name, None))
                    continue
                rest = self._key((n, k - 1 if n == name else k) for n, k in capped)
                hit.append((name, self.served_of(rest) << _SQ_BITS))
        return hit

    def best(self, assigned: Layout) -> tuple[Layout, int, int] | None:
        """(layout, unusable MiB, usefulness of its free instances) or None when `assigned` cannot exist.
        The layout serves the most forecast demand with its free instances (module docstring)."""
        if assigned in self._best:
            return self._best[assigned]
        # the squares of the extra instances are those of the layout less those of `assigned`, a constant here
        f = self.geo.best_completion(
            dict(assigned), lambda f: (-self.served_of(f.layout), f.unusable, -self._squares(f.have), f.layout)
        )
        result = None
        if f is not None:
            squares = self._squares(f.have) - self._squares(dict(assigned))
            result = (f.layout, f.unusable, (self.served_of(f.layout) << _SQ_BITS) + squares)
        self._best[assigned] = result
        return result

    def best_around(self, where: Around, assigned: Layout) -> tuple[Layout, int, int] | None:
        """`best` for a busy GPU re-cut in place (`migctl/core/inplace/reach.py`): the layout holds the instances in
        use of `where` and `assigned`, and must be reachable without moving an instance in use. Of those, the one
        whose free instances (all but those in use) serve the most forecast demand wins, then the least unusable
        memory, then the fewest NVML operations: a free instance the forecast still wants is kept where it sits
        (lazy reclamation) rather than destroyed and made again; then larger free instances, then the layout."""
        memo_key = (where, assigned)
        if memo_key in self._around:
            return self._around[memo_key]
        in_use = Counter(p.profile for p in where[0])
        must = Counter(dict(assigned))
        must.update(in_use)
        found: tuple[tuple[int, int, int, int, Layout], Layout, int] | None = None
        for f in self.geo.completions(must):
            moved = reach(self.geo, where, f.layout)
            if moved is None:
                continue
            spare = canonical((n, c - in_use[n]) for n, c in f.layout)
            served = self.served_of(spare)
            rank = (-served, f.unusable, moved.operations, -self._squares(f.have), f.layout)
            if found is None or rank < found[0]:
                found = (rank, f.layout, f.unusable)
        result = None
        if found is not None:
            rank, layout, unusable = found
            extra = self._squares(dict(layout)) - self._squares(must)
            result = (layout, unusable, (-rank[0] << _SQ_BITS) + extra)
        self._around[memo_key] = result
        return result

    def regroup(self, reqs: tuple[Request, ...]) -> tuple[Layout, tuple[str, ...]] | None:
        """The layout and instance per request for a reshaped GPU that must serve `reqs` ((profiles that serve
        it, smallest first; real need MiB), largest first): every valid layout is tried, each request taking
        the smallest instance of it that serves it, and the one whose spare instances serve the most forecast
        demand wins, then the least stranded now (waste + unusable), then larger free instances, then the
        layout. Expected stranded MiB is the full GPU minus what the pods need minus `served`, so this is the
        same objective as `best`, with the instances of the pods free to change too."""
        key = reqs
        if key in self._regroup:
            return self._regroup[key]
        found: tuple[tuple[int, int, int, Layout], Layout, tuple[str, ...]] | None = None
        for layout, unusable, got, left in self._serving(tuple(accepts for accepts, _ in reqs)):
            rank = (-self.served_of(layout), _waste(self.geo, got, reqs) + unusable, -self._squares(left), layout)
            if found is None or rank < found[0]:
                found = (rank, layout, got)
        result = None if found is None else (found[1], found[2])
        self._regroup[key] = result
        return result

    def _serving(self, accepts: tuple[tuple[str, ...], ...]) -> list[_Serving]:
        """`_Serving` of every layout that serves requests accepting `accepts` (`assign`). It depends on neither
        the needs nor the want, so it is memoised for every copy of the model (`with_want`): a few dozen request
        lists recur over a thousand reshaped GPUs, and most layouts fail them."""
        hit = self._serves.get(accepts)
        if hit is None:
            hit = self._serves[accepts] = []
            taken = {n for names in accepts for n in names}
            for layout, have, unusable, variants in self._layouts:
                if not variants <= taken:
                    continue  # a media variant no request can take would be left spare: `assign` rejects it anyway
                assigned = assign(have, variants, accepts)
                if assigned is not None:
                    hit.append((layout, unusable, *assigned))
        return hit


def match(
    geo: ModelGeometry, have: Mapping[str, int], variants: set[str], reqs: tuple[tuple[tuple[str, ...], int], ...]
) -> tuple[tuple[str, ...], int, dict[str, int]] | None:
    """Requests `reqs` (as `Completions.regroup` takes them) served by the instances `have` of one layout
    (`assign`): (instance per request, their waste MiB, instances left), or None. The forecast's exact model
    (`migctl/core/exact/forecast_model.py`) serves a reshaped GPU's pods the same way."""
    assigned = assign(have, variants, tuple(accepts for accepts, _ in reqs))
    if assigned is None:
        return None
    got, left = assigned
    return got, _waste(geo, got, reqs), left


def assign(
    have: Mapping[str, int], variants: set[str], accepts: tuple[tuple[str, ...], ...]
) -> tuple[tuple[str, ...], dict[str, int]] | None:
    """Requests accepting `accepts` (profiles, smallest first, each) served by the instances `have` of one layout,
    each taking the first instance it accepts: (instance per request, instances left), or None when they do not
    all fit or the layout pads with media variants (`variants`) nobody asked for."""
    left = dict(have)
    got: list[str] = []
    for names in accepts:
        pick = next((n for n in names if left.get(n, 0) > 0), None)
        if pick is None:
            return None
        left[pick] -= 1
        got.append(pick)
    if any(left.get(n, 0) > 0 for n in variants):
        return None
    return tuple(got), left


def _waste(geo: ModelGeometry, got: tuple[str, ...], reqs: tuple[Request, ...]) -> int:
    """MiB the instances `got` give the requests beyond their real needs."""
    mib = geo.profiles
    return sum(mib[n].memory_mib - min(need, mib[n].memory_mib) for n, (_, need) in zip(got, reqs, strict=True))


def _room(want: tuple[tuple[DemandClass, float], ...]) -> dict[str, int]:
    """Per profile, more instances than the classes that take it want in all (one more than their sum, rounded
    up, so float sums cannot tip it). `pour` takes at most that many of a profile and finds some left every
    time it looks, so it pours the same into this many as into any more, and leaves out profiles no class
    takes: capped there, the free instances of a pool keep their `served` (`Completions._key`)."""
    total: dict[str, float] = {}
    for cls, pods in want:
        for name in cls.accepts:
            total[name] = total.get(name, 0.0) + pods
    return {name: math.ceil(pods) + 1 for name, pods in total.items()}


def pour(
    want: tuple[tuple[DemandClass, float], ...], instances: Layout, pod_mib: float = 0.0
) -> tuple[float, dict[object, float]]:
    """Pour `want` (pods per class, classes in forecast order: exact profiles, then largest first) into the
    instances, each class taking the smallest that serve it; (MiB of need served, pods per class left)."""
    left = {n: float(c) for n, c in instances}
    total = 0.0
    rest: dict[object, float] = {}
    for cls, pods in want:
        todo = pods
        for name in cls.accepts:
            have = left.get(name, 0.0)
            if have <= 0.0:
                continue
            take = min(have, todo)
            left[name] = have - take
            todo -= take
            total += take * (pod_mib + cls.need_mib)
            if todo <= 0.0:
                break
        rest[cls.key] = max(0.0, todo)
    return total, rest
