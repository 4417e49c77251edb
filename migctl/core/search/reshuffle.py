"""Reshuffle: objective 2 where no move of one or two pods lowers it.

Every pod of one node, or of two nodes, is placed again at the least stranded memory together with left-out pods
that could go there (as many of each priority stay placed, so objective 1 is untouched), by a capped branch and
bound explored as a limited discrepancy search. It runs last in the polish of the plan `plan()` keeps.
"""

from __future__ import annotations

from bisect import insort
from collections.abc import Callable, Sequence

from migctl.core.model.demand import need_mib
from migctl.core.objective import Stranding, stranding
from migctl.core.search import budgets
from migctl.core.search.bins import Bin, Box, Item, held_mib, stranded_mib
from migctl.core.search.fits import Req, Shapes
from migctl.core.search.state import SearchState


class Reshuffle(SearchState):
    """The reshuffle move, mixed into `LocalSearch`."""

    def __init__(self, candidates: Callable[[Item], Sequence[Bin]], budget: int) -> None:
        super().__init__(candidates, budget)
        self.shuffles = 0  # work left for `reshuffle`
        self._surpluses: dict[int, tuple[int, int]] = {}
        self._wastes: dict[int, int] = {}
        self._needs: dict[tuple[int, int], int] = {}
        self._outs = 0  # bumped when `reshuffle` changes which pods are left out

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
        """Re-place node `a` alone, then with each of the `budgets.RESHUFFLE_PARTNERS` nodes its pods could also use
        that strand the most surplus. All partners reached the optimum on no more benchmark instances but took
        2.5× the plan time on a busy 152-node cluster in the simulator (docs/benchmarks.md)."""
        done = 0
        others, work = self._partners(a)
        self.shuffles -= work
        ranked = sorted([None, *others], key=lambda x: (x is not None, 0 if x is None else -self._surplus(x)))
        for b in ranked[: budgets.RESHUFFLE_PARTNERS + 1]:  # the node alone, then its partners
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
            out += held_mib(x)
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
        now = stranding(sum(held_mib(x) for x in bins), sum(x.reshaped for x in bins))
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
    def _strands(got: list[tuple[Item, Bin | None]], bins: list[Bin]) -> Stranding:
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
            stranded += stranded_mib(x, its, f)
            reshaped += f[1]
        return stranding(stranded, reshaped)

    def _best_fill(
        self, items: list[Item], bins: list[Bin], beat: Stranding, keep: dict[int, int]
    ) -> list[tuple[Item, Bin | None]] | None:
        """Places on `bins` for `items` stranding less than `beat` (stranded MiB, reshaped GPUs), by a branch and
        bound explored as a limited discrepancy search: largest pods first, each GPU tried cheapest first, the
        bound being what the remaining pods must strand at least (a heuristic bound: a GPU's unusable memory can
        shrink as pods join it). Of the priorities in `keep`, exactly that many pods are placed, and any of them
        may stay out; all others are placed. None when nothing better is found within `budgets.RESHUFFLE_PROBES`."""
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
        probes = min(budgets.RESHUFFLE_PROBES, self.shuffles)

        cut = False  # a branch was cut for lack of discrepancies: a larger allowance searches more

        def go(k: int, stranded: int, reshaped: int, slack: int) -> None:
            nonlocal probes, best, pick, cut
            must = stranded + floor[k]
            for t, sums in enumerate(cheap[k]):
                if need[t] - kept[t] >= len(sums):
                    return  # too few pods of this tier left to place as many as before
                must += sums[need[t] - kept[t]]
            if stranding(must, 0) >= best:
                return
            if k == len(order):
                if stranding(stranded, reshaped) < best:
                    best, pick = stranding(stranded, reshaped), list(chosen)
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
