"""The indexes of a planner pass: pod signatures, the heaps of free existing instances, the views of GPUs by
state, and the options of one unit on one GPU (memoised per state, so a pod's cost does not grow with the GPUs).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from heapq import heapify, heappush, heapreplace

from migctl.core.hardware.geometry import canonical
from migctl.core.model.cluster import GpuDemand, Pod
from migctl.core.model.demand import WHOLE_GPU, need_mib, profiles_for
from migctl.core.model.placement import signature
from migctl.core.objective import Option
from migctl.core.planner.state import BY_ORDER, Entry, PlanState, Slot, state_key


class Index(PlanState):
    """Signatures, heaps and views of a pass, and the options one GPU offers one unit."""

    def _sig(self, pod: Pod) -> int:
        """Small id of the pod's placement signature (nodes that pass `static_misfit`), indexed on first use."""
        known = self.pod_sids.get(pod.key)
        if known is not None:
            return known
        sig = signature(pod)
        found = self.sig_ids.get(sig)
        if found is not None:
            self.pod_sids[pod.key] = found
            return found
        sid = len(self.sig_nodes)
        self.sig_ids[sig] = self.pod_sids[pod.key] = sid
        fitting = [self.nodes[i] for i in self.node_index.fitting(pod)]
        self.sig_nodes.append(fitting)
        self.sig_kinds.append(sorted({s.kind for ns in fitting for s in ns.slots}))
        self.views.append({})
        self.unindexed.append({})
        fresh: dict[tuple[int, str, str], list[Entry]] = {}  # this signature's heaps: filled, then heapified
        for ns in fitting:
            ns.sigs.append(sid)
            for s in ns.slots:
                for profile, entry in self._entries(s):
                    fresh.setdefault((sid, s.kind, profile), []).append(entry)
                if s.key is not None:
                    self.views[sid].setdefault(s.key, []).append(s)  # name order: lists start sorted
                elif self._can_grow(s):
                    s.key = self._kid(s)
                    for other in ns.sigs[:-1]:
                        insort(self.views[other].setdefault(s.key, []), s, key=BY_ORDER)
                    self.views[sid].setdefault(s.key, []).append(s)
        for k, heap in fresh.items():
            heapify(heap)
            self.heaps[k] = heap
        return sid

    def _left(self, slot: Slot) -> dict[str, int]:
        """Existing free instances not yet assigned, by profile (only positive counts, as `Counter -` gives)."""
        assigned = slot.assigned
        return {n: c - assigned[n] for n, c in slot.free.items() if c > assigned[n]}

    def _index(self, sid: int) -> None:
        """Bring signature `sid`'s heaps up to date before they are read: push the entries of the slots whose
        state changed since (`_refresh`), once per slot at its latest state. A slot filled pod by pod between
        two pods of a rarer signature is pushed there once, not once per pod; entries of the states in between
        would only have gone stale in the heap (only live entries ever win, so the heaps give the same tops).
        A stale entry on top is replaced rather than pushed past, which spares popping it later."""
        changed = self.unindexed[sid]
        if not changed:
            return
        heaps = self.heaps
        for slot in changed:
            kind = slot.kind
            for profile, entry in self._entries(slot):
                heap = heaps.get((sid, kind, profile))
                if heap is None:
                    heaps[(sid, kind, profile)] = [entry]
                    continue
                if not heap:  # made empty for a pod's reading (`Greedy._existing_rows`): keep the list
                    heap.append(entry)
                    continue
                _, _, _, version, top = heap[0]
                if version != top.version or top.changed:
                    heapreplace(heap, entry)  # a stale entry on top (often the slot's own: it just won) goes
                else:
                    heappush(heap, entry)
        changed.clear()

    def _entries(self, slot: Slot) -> list[tuple[str, Entry]]:
        """(profile, heap entry) per free existing instance the slot has now; none once its layout changes.
        Made once per state of the slot and pushed into each of its signatures' heaps when they are read."""
        if slot.changed:
            return []
        if slot.entries is None or slot.entries[0] != slot.version:
            seq, order, version = self._seq, slot.order, slot.version
            takes = self._takes(slot).items()
            slot.entries = (version, [(p, (-useful, order, next(seq), version, slot)) for p, useful in takes])
        return slot.entries[1]

    def _kid(self, slot: Slot) -> int:
        """Small-int id of the slot's state key: memo lookups then hash two ints, not nested tuples."""
        return self.key_ids.setdefault(state_key(slot), len(self.key_ids))

    def _can_grow(self, slot: Slot, kid: int | None = None) -> bool:
        """Whether some reshaping option is left on the slot (`kid`: its state id, when the caller has it)."""
        if not slot.reconfigurable or slot.model is None:
            return False
        key = self._kid(slot) if kid is None else kid
        hit = self.grow_memo.get(key)
        if hit is None:
            names = [p.name for p in slot.model.profiles] + [WHOLE_GPU]
            hit = any(self._reconf_option(slot, n) is not None for n in names)
            self.grow_memo[key] = hit
        return hit

    def _rekey(self, slot: Slot) -> None:
        """Move a reshapable slot to the view list of its new state (or out, once it can take nothing more)."""
        if not slot.reconfigurable:
            return
        kid = self._kid(slot) if slot.model is not None else None
        new = kid if kid is not None and self._can_grow(slot, kid) else None
        old = slot.key
        if new == old:
            return
        for sid in slot.node.sigs:
            view = self.views[sid]
            if old is not None:
                lst = view[old]
                del lst[bisect_left(lst, slot.order, key=BY_ORDER)]
                if not lst:
                    del view[old]
            if new is not None:
                insort(view.setdefault(new, []), slot, key=BY_ORDER)
        slot.key = new

    def _refresh(self, slot: Slot) -> None:
        """After the slot's state changed: retire its heap entries, queue what it has left for its signatures'
        heaps (`_index`), move its view."""
        slot.version += 1
        unindexed = self.unindexed
        for sid in slot.node.sigs:
            unindexed[sid][slot] = None
        self._rekey(slot)

    def _takes(self, slot: Slot) -> dict[str, int]:
        """Per profile the slot has a free existing instance of, the usefulness of what it keeps free once one
        is taken (`Completions.takes`, memoised per free instances); none once its layout changes."""
        if slot.changed:
            return {}
        left = self._left(slot)
        comp = self.completions.get(slot.kind)
        return dict(comp.takes(left)) if comp is not None else dict.fromkeys(left, 0)

    def _as_is(self, useful: int, mig: bool) -> Option:
        """The option of a free instance that exists (`objective.existing_cost`), one object per value: the
        greedy makes one for every better candidate it meets."""
        hit = self.as_is_memo.get((useful, mig))
        if hit is None:
            hit = self.as_is_memo[(useful, mig)] = Option(0, 0, 0, useful, False, mig)
        return hit

    def _reconf_option(self, slot: Slot, profile: str, kid: int | None = None) -> Option | None:
        """`_compute_reconf`, memoised per state id (`kid`, when the caller has it) and profile."""
        memo_key = (self._kid(slot) if kid is None else kid, profile)
        if memo_key not in self.option_memo:
            self.option_memo[memo_key] = self._compute_reconf(slot, profile)
        return self.option_memo[memo_key]

    def _compute_reconf(self, slot: Slot, profile: str) -> Option | None:
        if not slot.reconfigurable or slot.model is None:
            return None
        touched = 0 if slot.node.touched else 1
        if profile == WHOLE_GPU:
            if slot.around is not None:
                return None  # instances in use stay: the GPU is never whole
            if slot.changed or slot.assigned.total() or not slot.mig or not slot.node.mode_ok:
                return None
            return Option(0, 1, touched, 0, True, False)
        if not slot.mig and (not slot.node.mode_ok or slot.assigned):
            return None  # MIG stays off, or the GPU already serves a whole-GPU pod
        comp = self.completions[slot.kind]
        where = slot.around
        if where is None:
            after = comp.best(canonical(slot.assigned + Counter({profile: 1})))
        else:  # in place: the instances in use stay where they are (`Completions.best_around`)
            after = comp.best_around(where, canonical(slot.assigned + Counter({profile: 1})))
        if after is None:
            return None
        before = 0
        if slot.changed:
            prev = (
                comp.best(canonical(slot.assigned))
                if where is None
                else comp.best_around(where, canonical(slot.assigned))
            )
            before = prev[1] if prev else 0
        return Option(after[1] - before, 0 if slot.changed else 1, 0 if slot.changed else touched, after[2], True, True)

    def _choices(self, slot_kind: str, demand: GpuDemand) -> list[tuple[str, int]]:
        """(profile, instance MiB) that can serve one unit of `demand` on GPUs of `slot_kind`."""
        key = (slot_kind, demand)
        hit = self.choice_memo.get(key)
        if hit is not None:
            return hit
        out: list[tuple[str, int]] = []
        model = self.models.get(slot_kind)
        if demand.kind == "gpu":
            if model is not None:
                out = [(WHOLE_GPU, model.memory_mib)]
            elif slot_kind.startswith("card:"):
                out = [(WHOLE_GPU, int(slot_kind.split(":")[1]))]
        elif model is not None:
            out = [(p.name, p.memory_mib) for p in profiles_for(model, demand)]
        self.choice_memo[key] = out
        return out

    def _share(self, kind: str, profile: str) -> int:
        """`pack-first`: per mille of a GPU an instance takes (memory slices and compute slices averaged), so
        each pod takes the least of the GPU it can and more pods fit."""
        model = self.models.get(kind)
        if model is None or profile == WHOLE_GPU:
            return 1000
        p = model.profile(profile)
        return 500 * p.memory_slices // model.placement_units + 500 * p.compute_slices // model.compute_slices

    def _cid(self, pod: Pod, demand: GpuDemand) -> int:
        """Small id of the demand class: the request and the annotated need (what an option's waste depends on)."""
        return self.class_ids.setdefault((demand, pod.need_mib), len(self.class_ids))

    def _choice_costs(self, cid: int, kind: str, pod: Pod, demand: GpuDemand) -> list[tuple[str, int, int, int]]:
        """(profile, instance MiB, waste, scarce-kind term) of the instances of `kind` that can serve demand class
        `cid`: the parts of an option's cost that do not depend on the GPU (memoised)."""
        key = (cid, kind)
        hit = self.choice_cost_memo.get(key)
        if hit is None:
            hit = self.choice_cost_memo[key] = [
                (
                    profile,
                    mib,
                    mib - need_mib(demand, mib, pod.need_mib),
                    self._share(kind, profile) if self.strategy.pack else 0,
                )
                for profile, mib in self._choices(kind, demand)
            ]
        return hit

    def _size(self, pod: Pod) -> int:
        total = 0
        for d in pod.gpu:
            if d.kind == "vram":
                total += d.vram_mib * d.count
            elif d.kind == "gpu":
                total += max((m.memory_mib for m in self.models.values()), default=1 << 20) * d.count
            else:
                mibs = [m.profile(d.profile).memory_mib for m in self.models.values() if m.has_profile(d.profile)]
                total += (min(mibs) if mibs else 0) * d.count
        return total

    def _kinds(self, pod: Pod) -> list[str]:
        """The GPU kinds in the pod's reach that can serve every one of its GPU requests (memoised per class)."""
        key = (self._sig(pod), pod.gpu)
        hit = self.kinds_memo.get(key)
        if hit is None:
            hit = self.kinds_memo[key] = [
                k for k in self.sig_kinds[key[0]] if all(self._choices(k, d) for d in pod.gpu)
            ]
        return hit
