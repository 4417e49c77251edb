"""The planner's side of the local search (`migctl/core/search/`): the pass's placement as the search's plain
model, the search run after every greedy pass, the polish and augment of the plan `plan()` keeps, and the
search's result written back into the pass's state. Work caps: `migctl/core/search/budgets.py`."""

from __future__ import annotations

from collections import Counter

from migctl.core.hardware.geometry import canonical
from migctl.core.model.cluster import GpuDemand, Pod
from migctl.core.model.demand import WHOLE_GPU, need_mib
from migctl.core.model.plan import Assignment, Plan
from migctl.core.planner.result import Results
from migctl.core.planner.state import Layout, Slot
from migctl.core.search import LocalSearch, budgets
from migctl.core.search.bins import Bin, Box, Item
from migctl.core.search.fits import Shapes


class Improve(Results):
    """A pass with its local search."""

    def _improve(self, unplaced: list[Pod]) -> list[Pod]:
        """Run `improve.LocalSearch` over the greedy's result and adopt what it found (see that module); not for
        tidy alone on a cluster above `budgets.TIDY_MAX_GPUS`."""
        if self.snapshot.mig_gpus > budgets.TIDY_MAX_GPUS and not any(self._searchable(p) for p in unplaced):
            return unplaced
        model = self._search_model(unplaced)
        if model is None:
            return unplaced
        search, todo = model
        search.run(todo)
        self._tidied = search.tidy(self._placed_items(), budgets.TIDY_PROBES, budgets.CHAIN_PROBES)
        search.repacks = budgets.PASS_REPACK  # not before tidy: full re-packed nodes leave it less to move
        if search.out:  # tidying moved pods to smaller instances, which may have opened room
            search.run(list(search.out))
        if search.out:  # chains of moves for what is still left out: once per pass, not per round (planning.md)
            search.augment_all(list(search.out), budgets.PASS_AUGMENT)
        self.repacked = search.repacked
        return self._adopt(unplaced)

    def best_layout(self, model_id: str, assigned: Layout) -> Layout | None:
        """The best completion of `assigned` on `model_id` (what a GPU serving it is reshaped to)."""
        comp = self.completions.get(model_id)
        best = comp.best(assigned) if comp is not None else None
        return None if best is None else best[0]

    @property
    def can_polish(self) -> bool:
        return self._run is not None and not self.evictions and self._tidied

    def polish(self) -> Plan:
        """Objective 2 on the plan `run()` made (once, on the best plan of `plan()`): tidy with a larger share
        for exchanges, a search for pods that opens, trades among the lowest priority left out, then a reshuffle
        of nodes and node pairs (`LocalSearch.reshuffle`). Never places fewer pods of any priority. Not after
        evictions: their victims were chosen for this placement."""
        if self._run is None or not self.can_polish:
            raise RuntimeError("polish() needs a finished run() without evictions whose tidy round finished")
        pending, unplaced = self._run
        model = self._search_model(unplaced)
        if model is not None:
            search, todo = model
            search.out = sorted(todo, key=lambda it: -it.pod.priority)
            search.tidy(self._placed_items(), budgets.TIDY_PROBES, budgets.POLISH_CHAIN_PROBES, moved_singles=False)
            if search.out:
                search.repacks = budgets.POLISH_REPACK
                search.run(list(search.out))
                if search.repacked:  # re-packed nodes are full, not tidy
                    search.tidy(self._placed_items(), budgets.TIDY_PROBES, budgets.POLISH_CHAIN_PROBES)
                search.trade(budgets.POLISH_CHAIN_PROBES)
            search.reshuffle(self._placed_items(), budgets.POLISH_RESHUFFLE)
            unplaced = self._adopt(unplaced)
        self._run = (pending, unplaced)
        return self._result(pending, unplaced)

    def augment(self) -> Plan:
        """Chains of moves for the pods left out (`LocalSearch.augment_all`), then a tidy for objective 2, on the
        best plan of `plan()`. It leaves a pod out only for one of higher priority or for two of its own, so the
        plan never ranks worse. Not after evictions: their victims were chosen for the placement as it was."""
        if self._run is None or self.evictions:
            raise RuntimeError("augment() needs a finished run() without evictions")
        pending, unplaced = self._run
        model = self._search_model(unplaced)
        if model is not None:
            search, todo = model
            if search.augment_all(todo, budgets.AUGMENT_WORK):
                search.tidy(self._placed_items(), budgets.TIDY_PROBES, budgets.POLISH_CHAIN_PROBES)
            unplaced = self._adopt(unplaced)
        self._run = (pending, unplaced)
        return self._result(pending, unplaced)

    def _search_model(self, unplaced: list[Pod]) -> tuple[LocalSearch, list[Item]] | None:
        """The local search's plain model of the current placement: GPUs as bins, nodes as boxes (kept on the
        planner for `_adopt`); None when no GPU can take part."""
        pods = {p.key: p for p in self.snapshot.pending}
        shapes = {k: self.shapes.setdefault(k, Shapes(c.geo)) for k, c in self.completions.items()}
        boxes: dict[int, Box] = {}
        bins: list[tuple[Slot, Bin]] = []
        movable: set[str] = set()
        for ns in self.nodes:
            box = boxes[id(ns)] = Box(ns.free)
            for slot in ns.slots:
                if slot.model is None or not slot.mig or slot.locked or slot.assigned[WHOLE_GPU]:
                    continue
                if slot.around is not None and slot.changed:
                    continue  # re-cut in place around instances in use: not a whole GPU's fit; left as it is
                base = canonical((n, c) for n, c in slot.free.items() if n != WHOLE_GPU and c > 0)
                # a busy GPU of the in-place path keeps its instances: the search sees its free ones only
                b = Bin(box, slot.order, shapes[slot.kind], base, slot.reconfigurable and slot.around is None)
                items = [Item(pods[self.assignments[i].pod], d, need) for d, need, i in slot.requests]
                fit = b.fit(items)
                if fit is None:
                    continue  # not expressible as one GPU's fit: leave it as the greedy made it
                b.take(items, fit)
                box.bins.append(b)
                bins.append((slot, b))
                movable.update(it.pod.key for it in items)
        by_class: dict[tuple[int, GpuDemand], list[Bin]] = {}

        def candidates(item: Item) -> list[Bin]:
            key = (self._sig(item.pod), item.demand)
            hit = by_class.get(key)
            if hit is None:
                hit = by_class[key] = [
                    b for ns in self.sig_nodes[key[0]] for b in boxes[id(ns)].bins if item.req(b.shapes) is not None
                ]
            return hit

        todo = [Item(p, p.gpu[0], p.need_mib) for p in unplaced if self._searchable(p)]
        if not bins:
            return None
        self._model = (boxes, bins, movable)
        search = LocalSearch(
            candidates, min(budgets.IMPROVE_MAX, budgets.IMPROVE_BUDGET + budgets.IMPROVE_BUDGET_PER_POD * len(pods))
        )
        return search, todo

    def _searchable(self, pod: Pod) -> bool:
        """A left-out pod the local search may try to place: one instance, some GPU kind in its reach."""
        return pod.units == 1 and pod.gpu[0].kind != "gpu" and self.pod_kinds.get(pod.key, 0) > 0

    def _placed_items(self) -> list[Item]:
        return [it for _, b in self._model[1] for it in b.items]

    def _adopt(self, unplaced: list[Pod]) -> list[Pod]:
        """Write the local search's result back into the planner's state; returns the pods left out."""
        boxes, bins, movable = self._model
        pods = {p.key: p for p in self.snapshot.pending}
        placed = {it.pod.key for _, b in bins for it in b.items}
        self.assignments = [a for a in self.assignments if a.pod not in movable]
        for ns in self.nodes:
            ns.free = boxes[id(ns)].free
        for slot, b in bins:
            slot.assigned = Counter(it.profile for it in b.items)
            slot.changed = b.reshaped
            slot.requests = []
            slot.version += 1  # the greedy's indexes no longer describe it; only evictions run after this
            for it in b.items:
                mib = b.shapes.mib[it.profile]
                slot.requests.append((it.demand, it.need, len(self.assignments)))
                self.assignments.append(
                    Assignment(
                        it.pod.key, slot.node.node.name, slot.index, it.profile, mib, need_mib(it.demand, mib, it.need)
                    )
                )
        for ns in self.nodes:
            ns.touched = any(s.changed for s in ns.slots)
        dropped = sorted((pods[k] for k in movable - placed), key=lambda p: (-p.priority, p.key))
        return [p for p in unplaced if p.key not in placed] + dropped
