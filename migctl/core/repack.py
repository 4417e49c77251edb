"""Repacking one GPU: the best layout that serves a given set of single-instance requests, if any.

The greedy planner commits each pod to an instance as it goes; when a later pod finds no room, the instances
chosen earlier on some idle GPU may be reshuffled to make room (a 9 GiB pod moved from a 2g.20gb to a 1g.10gb
frees the slice a 3 GiB pod needs). `repack` answers, for one GPU model and a list of requests, which valid layout
serves all of them with the least stranded memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from migctl.core.cluster import GpuDemand
from migctl.core.demand import need_mib
from migctl.core.geometry import CanonicalLayout, ModelGeometry

# One request: what the pod asked for, and its annotated real need (None when not stated).
Request = tuple[GpuDemand, int | None]


def match(geo: ModelGeometry, layout: CanonicalLayout, requests: Sequence[Request]) -> list[str] | None:
    """The profile each request gets from `layout`, or None when the layout cannot serve them all.

    Exact-profile requests take their profile; VRAM requests, largest first, take the smallest plain instance
    that covers them. Because a VRAM request accepts every instance above a threshold, this greedy finds a
    matching whenever one exists, and the one with the least memory handed out.
    """
    left = Counter(dict(layout))
    out: list[str | None] = [None] * len(requests)
    for i, (d, _) in enumerate(requests):
        if d.kind == "profile":
            if left[d.profile] <= 0:
                return None
            left[d.profile] -= 1
            out[i] = d.profile
    order = sorted((i for i, (d, _) in enumerate(requests) if d.kind == "vram"), key=lambda i: -requests[i][0].vram_mib)
    for i in order:
        want = requests[i][0].vram_mib
        fits = [
            n
            for n, c in left.items()
            if c > 0 and not geo.profiles[n].attributes and geo.profiles[n].memory_mib >= want
        ]
        if not fits:
            return None
        pick = min(fits, key=lambda n: (geo.profiles[n].memory_mib, n))
        left[pick] -= 1
        out[i] = pick
    if any(p is None for p in out):
        return None  # a whole-GPU request: no MIG layout serves it
    return [p for p in out if p is not None]


def repack(geo: ModelGeometry, requests: Sequence[Request]) -> tuple[CanonicalLayout, list[str], int] | None:
    """(layout, profile per request, stranded MiB = unusable + internal waste), least stranded first."""
    best: tuple[tuple[int, CanonicalLayout], list[str]] | None = None
    wanted_variants = {d.profile for d, _ in requests if d.kind == "profile"}
    for layout in geo.layouts:
        if any(geo.profiles[n].attributes and n not in wanted_variants for n, _ in layout):
            continue
        got = match(geo, layout, requests)
        if got is None:
            continue
        waste = 0
        for (d, annotated), name in zip(requests, got, strict=True):
            mib = geo.profiles[name].memory_mib
            waste += mib - need_mib(d, mib, annotated)
        rank = (geo.unusable_mib(layout) + waste, layout)
        if best is None or rank < best[0]:
            best = (rank, got)
    if best is None:
        return None
    return best[0][1], best[1], best[0][0]
