"""Exact single-GPU fits: whether one GPU of a model can serve a multiset of instance requests, and at what cost.

The local search (`local.py`) asks this for every move it considers, so it must be exact and cheap. A request
takes a canonical form: an exact profile, or a VRAM request rounded up to the smallest plain instance that holds
it (both accept exactly the same instances). Valid layouts (`ModelGeometry.facts`) are tried least unusable memory
first, until none left could do better, and each answer is memoised per model on the GPU's starting point and the
sorted requests. A fit is ranked by `objective.fit_cost` (stranded MiB plus the pods' fixed need). Unlike a best
completion (`ModelGeometry.best_completion`), it also chooses the instance of each VRAM request, and it ignores the
forecast: the plan's targets are the best completions of what the search assigns (`planner/result.py`).
"""

from __future__ import annotations

from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry
from migctl.core.model.cluster import GpuDemand
from migctl.core.objective import fit_cost

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
        # least unusable first, so `fit` stops at the first layout that cannot beat the best so far
        self._by_unusable = sorted(enumerate(geo.facts), key=lambda t: (t[1].unusable, t[0]))
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
            best = (fit_cost(0, sum(self.mib[n] for n in kept)), False, kept)
        if reshape:
            wanted = frozenset(r[1] for r in reqs if r[0] == "p")
            floor = sum(self.least(r)[0] for r in reqs)  # no layout serves `reqs` with less instance MiB
            first = -1  # index of the best layout; ties go to the existing instances, then the lowest index
            for i, f in self._by_unusable:
                if best is not None and fit_cost(f.unusable, floor) > best[0]:
                    break
                if f.size < len(reqs) or not f.variants <= wanted:
                    continue
                got = self._match(f.have, reqs)
                if got is None:
                    continue
                cost = fit_cost(f.unusable, sum(self.mib[n] for n in got))
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
