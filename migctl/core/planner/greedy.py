"""The greedy: each pod, in the pass's order, takes its cheapest option (`objective.cost`, then GPU order) among
free existing instances, one more instance on a GPU this pass reshapes, and reshaping an idle GPU.
"""

from __future__ import annotations

from bisect import insort
from collections import Counter
from collections.abc import Iterable
from heapq import heappop, heappush

from migctl.core import objective
from migctl.core.model.cluster import GpuDemand, Pod, Resources
from migctl.core.model.demand import WHOLE_GPU, need_mib
from migctl.core.model.plan import Assignment
from migctl.core.objective import NO_COST, Cost, Option, added, existing_cost, with_scarce
from migctl.core.planner.index import Index
from migctl.core.planner.state import Candidate, Entry, ExistingRow, NodeState, Slot
from migctl.core.planner.strategy import Balance, Scarcity

# `balance-first`: the spread of a node's resource fractions left counts in steps of this many per mille.
BALANCE_STEP = 100
_NO_LIMIT = float("inf")  # no GPU order bound yet


class Greedy(Index):
    """Placing pods, one at a time (`_place_single`, `_place_multi`)."""

    def _cost(self, waste: int, share: int, opt: Option) -> Cost:
        """The cost tuple of an option, from its GPU-independent parts (`_choice_costs`); `_place_single` costs
        existing instances with `objective.existing_cost`, so that it makes an `Option` only for the winner."""
        return objective.cost(waste, share, opt, self.strategy.reshape_last)

    def _reconf_unit(self, pod: Pod, demand: GpuDemand, slot: Slot, kid: int, cid: int) -> Candidate | None:
        """Cheapest reshaping option for one unit on GPUs in state `kid` (memoised per state and demand class)."""
        memo = self.unit_memo.setdefault(cid, {})
        if kid in memo:
            return memo[kid]
        best: Candidate | None = None
        for profile, mib, waste, share in self._choice_costs(cid, slot.kind, pod, demand):
            opt = self._reconf_option(slot, profile, kid)
            if opt is None:
                continue
            cost = self._cost(waste, share, opt)
            if best is None or (cost, profile) < (best[0], best[3]):
                best = (cost, 0.0, slot, profile, mib, opt)
        memo[kid] = best
        if best is not None:  # every state costed for the class is ranked, whichever scan met it first
            insort(self.unit_rank.setdefault(cid, []), (best[0], kid))
        return best

    def _unit_cost(self, pod: Pod, demand: GpuDemand, slot: Slot) -> Candidate | None:
        """Cheapest option of either kind on one given slot (the per-node path for multi-instance pods)."""
        best: Candidate | None = None
        kid = self._kid(slot) if slot.reconfigurable and slot.model is not None else None
        useful = self._takes(slot)
        for profile, mib, waste, share in self._choice_costs(self._cid(pod, demand), slot.kind, pod, demand):
            existing = self._as_is(useful[profile], slot.mig) if profile in useful else None
            reshaped = None if kid is None else self._reconf_option(slot, profile, kid)  # memoised per GPU state
            for opt in (existing, reshaped):
                if opt is None:
                    continue
                cand: Candidate = (self._cost(waste, share, opt), slot.order, slot, profile, mib, opt)
                if best is None or (cand[0], cand[1], profile) < (best[0], best[1], best[3]):
                    best = cand
        return best

    def _apply(self, pod: Pod, demand: GpuDemand, slot: Slot, profile: str, mib: int, opt: Option) -> None:
        ns = slot.node
        slot.assigned[profile] += 1
        newly_touched = False
        if opt.reconfigure:
            if not slot.changed:
                slot.changed = True
                slot.mig = opt.mig_after
            if not ns.touched:
                ns.touched = newly_touched = True
        self._refresh(slot)
        if newly_touched:
            for s in ns.slots:
                if s is not slot:
                    self._rekey(s)
        slot.requests.append((demand, pod.need_mib, len(self.assignments)))
        self.cap_left[slot.kind] -= mib
        ns.gpu_left -= mib
        self.assignments.append(
            Assignment(pod.key, ns.node.name, slot.index, profile, mib, need_mib(demand, mib, pod.need_mib))
        )

    def _existing_top(self, heap: list[Entry], pod: Pod) -> tuple[int, Slot] | None:
        """Best live entry whose node still has room for the pod; stale entries are dropped on the way."""
        skipped = []
        found: tuple[int, Slot] | None = None
        while heap:
            neg_useful, _order, _seq, version, slot = heap[0]
            if version != slot.version or slot.changed:
                heappop(heap)
                continue
            if not pod.requests.fits_in(slot.node.free):
                skipped.append(heappop(heap))
                continue
            found = (-neg_useful, slot)
            break
        for e in skipped:
            heappush(heap, e)
        return found

    def _existing_rows(self, pod: Pod, demand: GpuDemand, sid: int, cid: int) -> list[ExistingRow]:
        """The free-instance heaps a pod of signature `sid` and demand class `cid` reads, each with its choice's
        costs, in the order `_place_single` tries them (kinds, then profiles); made once per pair. An empty
        heap is made here for a choice nothing offers yet, so the row sees the entries `_index` pushes later."""
        heaps = self.heaps
        rows = self.existing_rows[(sid, cid)] = [
            (heaps.setdefault((sid, kind, profile), []), kind, profile, mib, waste, share)
            for kind in self.sig_kinds[sid]
            for profile, mib, waste, share in self._choice_costs(cid, kind, pod, demand)
        ]
        return rows

    def _place_single(self, pod: Pod) -> bool:
        """Place a pod of one GPU unit at its cheapest option (`_cost`, then GPU order); False if none."""
        demand = pod.gpu[0]
        sid = self._sig(pod)
        self._index(sid)
        cid = self._cid(pod, demand)
        protects = self._protect_kinds(pod)
        balanced = self.strategy.balance is not None
        req = pod.requests
        best: Candidate | None = None
        rows = self.existing_rows.get((sid, cid))
        if rows is None:
            rows = self._existing_rows(pod, demand, sid, cid)
        for heap, kind, profile, mib, waste, share in rows:
            if heap:
                neg_useful, _order, _seq, version, slot = heap[0]
                free = slot.node.free
                if (
                    version == slot.version
                    and not slot.changed
                    and req.cpu_m <= free.cpu_m
                    and req.memory <= free.memory
                    and req.pods <= free.pods
                ):
                    useful = -neg_useful  # the live top fits: the common case, without `_existing_top`'s loop
                else:
                    top = self._existing_top(heap, pod)
                    if top is None:
                        continue
                    useful, slot = top
                scarce = (self._protect(pod, kind) or share) if protects else share
                cost = existing_cost(waste, scarce, useful)
                if balanced:
                    cand = self._tilted(cost, pod, slot, profile, mib, self._as_is(useful, slot.mig))
                    if best is None or cand[:2] < best[:2]:
                        best = cand
                elif best is None or (cost, slot.order) < best[:2]:
                    best = (cost, slot.order, slot, profile, mib, self._as_is(useful, slot.mig))
        if protects or balanced:
            best = self._reshape_each(pod, demand, sid, cid, best, protects)
        else:
            best = self._reshape_cheapest(pod, demand, sid, cid, best)
        if best is None:
            return False
        _, _, slot, profile, mib, opt = best
        slot.node.free = slot.node.free - req
        self._apply(pod, demand, slot, profile, mib, opt)
        return True

    def _reshape_each(
        self, pod: Pod, demand: GpuDemand, sid: int, cid: int, best: Candidate | None, protects: bool
    ) -> Candidate | None:
        """`best`, or a cheaper reshaping option: every GPU state in the pod's reach, each costed for the pod (the
        scarce-kind term) or each of its GPUs tilted by the node's balance."""
        req = pod.requests
        memo = self.unit_memo.setdefault(cid, {})
        for kid, slots in self.views[sid].items():
            unit = memo[kid] if kid in memo else self._reconf_unit(pod, demand, slots[0], kid, cid)
            if unit is None:
                continue
            if protects:
                unit = (self._protected(unit[0], pod, slots[0].kind), *unit[1:])
            if best is not None and unit[0] > best[0]:
                continue
            if self.strategy.balance is not None:  # every GPU of the state: the node matters, not just the order
                for s in slots:
                    if req.fits_in(s.node.free):
                        c = self._tilted(unit[0], pod, s, unit[3], unit[4], unit[5])
                        if best is None or c[:2] < best[:2]:
                            best = c
                continue
            best = _first_fit(req, slots, unit, best)
        return best

    def _reshape_cheapest(
        self, pod: Pod, demand: GpuDemand, sid: int, cid: int, best: Candidate | None
    ) -> Candidate | None:
        """`_reshape_each` where a state's cost is the same for every pod of the class: the states in the order of
        that cost (`unit_rank`, kept sorted as states appear), so the scan stops at the first state that costs
        more than the best so far. The winner is the same, the lowest (cost, GPU order) that fits: a pod at scale
        looks at a few of the dozens of states in its reach."""
        req = pod.requests
        view = self.views[sid]
        memo = self.unit_memo.setdefault(cid, {})
        ranked = self.unit_rank.setdefault(cid, [])
        for kid in view.keys() - memo.keys():  # states this class has not met yet: costed and ranked
            self._reconf_unit(pod, demand, view[kid][0], kid, cid)
        for cost, kid in ranked:
            if best is not None and cost > best[0]:
                break
            slots = view.get(kid)
            if slots is None:
                continue
            unit = memo[kid]
            assert unit is not None
            best = _first_fit(req, slots, unit, best)
        return best

    def _tilted(self, cost: Cost, pod: Pod, slot: Slot, profile: str, mib: int, opt: Option) -> Candidate:
        """A candidate with its tie-break: the GPU order, or for the balance strategies how unevenly the node's
        resources would be left (`_spread`), either in place of the scarce-kind term of the cost
        (`balance-first`, in steps of BALANCE_STEP, so it outranks stranded memory) or before the GPU order
        (`balance-ties`, in one float: the spread times more than any order, plus the order)."""
        if self.strategy.balance is Balance.FIRST:
            spread = self._spread(pod, slot, mib) // BALANCE_STEP
            return (with_scarce(cost, spread), slot.order, slot, profile, mib, opt)
        if self.strategy.balance is Balance.TIES:
            return (cost, self._spread(pod, slot, mib) * self.order_span + slot.order, slot, profile, mib, opt)
        return (cost, slot.order, slot, profile, mib, opt)

    def _spread(self, pod: Pod, slot: Slot, mib: int) -> int:
        """Per mille: how far apart the fractions of the node's GPU memory, CPU and memory left free would be.
        A GPU-heavy pod then goes where CPU is scarce and a CPU-heavy one where CPU is plentiful, so neither
        strands the resource the other needs (the misses against the exact solver were mostly that)."""
        ns = slot.node
        start = ns.start
        hi = lo = (ns.gpu_left - mib) / ns.gpu_total if ns.gpu_total else 0.0
        if start.cpu_m:
            f = (ns.free.cpu_m - pod.requests.cpu_m) / start.cpu_m
            hi, lo = max(hi, f), min(lo, f)
        if start.memory:
            f = (ns.free.memory - pod.requests.memory) / start.memory
            hi, lo = max(hi, f), min(lo, f)
        return round((hi - lo) * 1000)

    def _protect_kinds(self, pod: Pod) -> bool:
        """Whether `_protect` can be non-zero for this pod (it fits several kinds, under a scarcity strategy)."""
        return self.strategy.scarcity is not None and self.pod_kinds.get(pod.key, 0) > 1

    def _protect(self, pod: Pod, kind: str) -> int:
        """`pressure-first` only: how much of a GPU kind's remaining capacity pods with no other choice still
        need (percent). A pod that fits several kinds then goes where it crowds out the fewest such pods."""
        if not self._protect_kinds(pod):
            return 0
        left = self.rigid_left if self.strategy.scarcity is Scarcity.RIGID else self.demand_left
        return min(1000, left[kind] * 100 // max(1, self.cap_left[kind]))

    def _protected(self, cost: Cost, pod: Pod, kind: str) -> Cost:
        protect = self._protect(pod, kind)
        return cost if not protect else with_scarce(cost, protect)

    def _consume(self, pod: Pod) -> None:
        kind = self.rigid_kind.get(pod.key)
        if kind is not None:
            self.rigid_left[kind] -= self._rigid_mib(pod, kind)
        for k, share in self.demand_share.get(pod.key, ()):
            self.demand_left[k] -= share

    def _free_mib(self, slot: Slot) -> list[tuple[int, int]]:
        """(instance MiB, count) of a slot's existing free instances."""
        if slot.model is None:
            return (
                [(int(slot.kind.split(":")[1]), n) for _, n in slot.free.items()]
                if slot.kind.startswith("card:")
                else []
            )
        model = slot.model
        return [
            (model.memory_mib if name == WHOLE_GPU else model.profile(name).memory_mib, n)
            for name, n in slot.free.items()
            if name == WHOLE_GPU or model.has_profile(name)
        ]

    def _least_mib(self, gpu: tuple[GpuDemand, ...]) -> int:
        """The smallest instance that could serve any unit of these requests on any GPU kind of the cluster."""
        hit = self.least_memo.get(gpu)
        if hit is None:
            sizes = [m for kind in {s.kind for s in self.slots} for d in gpu for _, m in self._choices(kind, d)]
            hit = self.least_memo[gpu] = min(sizes, default=0)
        return hit

    def _rigid_mib(self, pod: Pod, kind: str) -> int:
        return sum(min(m for _, m in self._choices(kind, d)) * d.count for d in pod.gpu)

    def _place_multi(self, pod: Pod, candidates: Iterable[NodeState]) -> bool:
        """Pods with several GPU units: all units on one node, chosen by total cost then node name. A node's trial
        is remembered per pod class (its GPU requests and annotated need, all a trial reads of the pod) until one
        of its GPUs changes (`_trial_key`): pods of a class try the nodes the pods before them left alone once."""
        best: tuple[Cost, str, NodeState] | None = None
        need = pod.need_mib
        if need is not None and need <= self._least_mib(pod.gpu):
            # every instance that could serve it holds the need: each option of each unit wastes its MiB less the
            # need, so pods of other needs rank every option and node alike, their costs shifted (`_shifted`)
            cls: tuple[object, ...] = (pod.gpu, "below every instance")
        else:
            cls = (pod.gpu, need)
        tried = self.trial_memo.setdefault(cls, {})
        units = pod.units
        for ns in candidates:
            if not pod.requests.fits_in(ns.free):
                continue
            key = _trial_key(ns)
            hit = tried.get(ns)
            if hit is not None and hit[0] == key:
                trial = _shifted(hit[1], hit[2], need, units)
            else:
                trial = self._trial(pod, ns, commit=False)
                tried[ns] = (key, trial, need)
            if trial is not None and (best is None or (trial, ns.node.name) < (best[0], best[1])):
                best = (trial, ns.node.name, ns)
        if best is None:
            return False
        best[2].free = best[2].free - pod.requests
        self._trial(pod, best[2], commit=True)
        return True

    def _trial(self, pod: Pod, ns: NodeState, commit: bool) -> Cost | None:
        """Place every unit of `pod` on `ns` greedily; undo unless `commit` (indexes move only on commit)."""
        saved: dict[Slot, tuple[Counter[str], bool, bool]] = {}  # the GPUs the trial changes, as they were
        saved_touched = ns.touched
        saved_assign = len(self.assignments)
        total = NO_COST
        ok = True
        for demand in sorted(pod.gpu, key=lambda d: (-d.vram_mib, d.kind, d.profile)):
            for _ in range(demand.count):
                best: Candidate | None = None
                for s in ns.slots:
                    unit = self._unit_cost(pod, demand, s)
                    if unit is not None and (best is None or unit[:2] < best[:2]):
                        best = unit
                if best is None:
                    ok = False
                    break
                total = added(total, best[0])
                slot = best[2]
                if slot not in saved:
                    saved[slot] = (Counter(slot.assigned), slot.changed, slot.mig)
                self._apply_local(pod, demand, slot, best[3], best[4], best[5])
            if not ok:
                break
        if commit and ok:
            hosts = {a.gpu for a in self.assignments[saved_assign:]}
            ns.gpu_left -= sum(a.instance_mib for a in self.assignments[saved_assign:])
            for s in ns.slots:
                s.locked = s.locked or s.index in hosts
                self._refresh(s)
            return total
        for s, (assigned, changed, mig) in saved.items():
            s.assigned, s.changed, s.mig = assigned, changed, mig
        ns.touched = saved_touched
        del self.assignments[saved_assign:]
        return total if ok else None

    def _apply_local(self, pod: Pod, demand: GpuDemand, slot: Slot, profile: str, mib: int, opt: Option) -> None:
        """Like `_apply`, without touching the indexes (for trials)."""
        ns = slot.node
        slot.assigned[profile] += 1
        if opt.reconfigure and not slot.changed:
            slot.changed = True
            slot.mig = opt.mig_after
        if opt.reconfigure:
            ns.touched = True
        self.assignments.append(
            Assignment(pod.key, ns.node.name, slot.index, profile, mib, need_mib(demand, mib, pod.need_mib))
        )


def _shifted(cost: Cost | None, costed_at: int | None, need: int | None, units: int) -> Cost | None:
    """A trial's cost made for a pod of need `costed_at`, for one of need `need` whose every instance holds both
    (`_place_multi`): each unit's waste differs by the difference of the needs."""
    if cost is None or costed_at == need or costed_at is None or need is None:
        return cost
    return (cost[0], cost[1], cost[2] + (costed_at - need) * units, *cost[3:])


def _trial_key(ns: NodeState) -> tuple[object, ...]:
    """What a trial on the node reads that a pass changes: its GPUs (each change bumps a version; evictions swap
    in new ones) and whether it is reconfigured already."""
    return (ns.touched, *[(s, s.version) for s in ns.slots])


def _first_fit(req: Resources, slots: list[Slot], unit: Candidate, best: Candidate | None) -> Candidate | None:
    """`best`, or the first GPU of one state (`slots`, in GPU order) where the pod fits at `unit`'s cost, when
    that ranks lower by (cost, GPU order): the one rule both reshaping scans apply to a state."""
    limit = best[1] if best is not None and unit[0] == best[0] else _NO_LIMIT
    for s in slots:
        if s.order > limit:
            break
        if req.fits_in(s.node.free):
            return (unit[0], s.order, s, unit[3], unit[4], unit[5])
    return best
