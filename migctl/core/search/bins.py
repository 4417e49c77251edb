"""The local search's plain model of a placement: GPUs as bins of single-instance pods, nodes as boxes of CPU,
memory and pod slots, and drafts of moves not yet made.

`migctl/core/planner/improve.py` builds it from the greedy's state and writes the result back. The moves
(`local.py`, `tidy.py`, `repack.py`, `augment.py`, `reshuffle.py`) probe a fit (`fits.py`) before they change a
bin, so every bin always serves its pods with one valid layout.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Sequence
from dataclasses import dataclass, field

from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.model.cluster import GpuDemand, Pod, Resources
from migctl.core.model.demand import need_mib
from migctl.core.model.placement import signature
from migctl.core.objective import stranded_mib as stranded
from migctl.core.search.fits import Fit, Req, Shapes


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
    kind: tuple[object, ...] | None = None  # `pod_kind`, memoised
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
        reqs = reqs_of(items, self.shapes)
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
        reqs = reqs_of(items, self.shapes)
        assert reqs is not None, "only fits that were probed are taken"
        self.reqs = tuple(sorted(reqs))
        for it, name in zip(items, fit[2], strict=True):
            it.at, it.profile = self, name


class Draft:
    """Moves not yet made: pods taken off their GPUs, pods put on GPUs, and what that does to node resources."""

    def __init__(self) -> None:
        self.taken: list[Item] = []
        self.placed: list[tuple[Item, Bin]] = []
        self.res: dict[Box, Resources] = {}

    def copy(self) -> Draft:
        out = Draft()
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


def reqs_of(items: Sequence[Item], shapes: Shapes) -> list[Req] | None:
    """Canonical requests of `items` on one model, None when one of them cannot be served there."""
    out = []
    for it in items:
        r = it.req(shapes)
        if r is None:
            return None
        out.append(r)
    return out


def stranded_mib(b: Bin, items: Sequence[Item], fit: Fit) -> int:
    """Memory `items` would strand on `b` with `fit`: instance memory they do not need, plus unusable memory."""
    return stranded(
        fit[0], sum(need_mib(it.demand, b.shapes.mib[p], it.need) for it, p in zip(items, fit[2], strict=True))
    )


def held_mib(b: Bin) -> int:
    """Memory the GPU strands with the pods it serves now."""
    return stranded_mib(b, b.items, (b.cost, b.reshaped, tuple(it.profile for it in b.items)))


def instance_mib(it: Item) -> int:
    """Memory of the pod's current instance, as a size for ordering (0 when unplaced)."""
    return 0 if it.at is None else it.at.shapes.mib[it.profile]


def excess_mib(it: Item) -> int:
    """Memory of its instance the pod does not use (0 when unplaced)."""
    if it.at is None:
        return 0
    mib = it.at.shapes.mib[it.profile]
    return mib - need_mib(it.demand, mib, it.need)


def pod_kind(it: Item) -> tuple[object, ...]:
    """Pods with equal kinds are interchangeable for every move (computed once per item)."""
    if it.kind is None:
        it.kind = (it.demand, it.need, it.pod.requests, it.pod.priority, *signature(it.pod))
    return it.kind
