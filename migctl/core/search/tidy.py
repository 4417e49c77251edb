"""Tidy and trade: objective 2 (stranded memory) once the pods placed per priority are settled.

Tidy moves single pods to GPUs where they strand less memory, and where no single move helps, exchanges pods
(one takes the place of one or all pods of another GPU, and they go to their cheapest GPUs). Trade lets a
left-out pod of the lowest priority still left out take the place of a placed pod of the same priority where
that strands less. Mixed into `LocalSearch` (`local.py`).
"""

from __future__ import annotations

from migctl.core.objective import lowers
from migctl.core.search.bins import Bin, Draft, Item, excess_mib, held_mib, stranded_mib
from migctl.core.search.state import SearchState


class Tidy(SearchState):
    """The tidy, exchange and trade moves, mixed into `LocalSearch`."""

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
                    if (
                        f is not None
                        and lowers(f[0] - x.cost - gain)
                        and (best is None or (f[0] - x.cost, x.order) < best[0])
                    ):
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
                if lowers(delta) and (best is None or (delta, b.order) < best[0]):
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
                        if lowers(delta) and (best is None or (delta, y.order, len(group)) < best[0]):
                            best = ((delta, y.order, len(group)), d)
        return self._keep(best)
