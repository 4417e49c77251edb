"""The planner: `plan(snapshot, settings) -> Plan`, from pending pods' GPU demand to per-GPU MIG layouts.

Objective, compared lexicographically (docs/planning.md has a worked example):
  1. pods placed, in priority order (a pod is only ever placed ahead of lower-priority pods);
  2. stranded MiB: internal waste of placed pods + unusable MiB of every GPU whose layout changes;
  3. disruption: evictions, then GPUs reconfigured, then nodes touched;
  4. how much of the forecast demand the free instances left behind can serve (`spare.py`, docs/planning.md);
  5. node name and GPU index, so the same snapshot always gives the same plan.

Method: pods are taken highest priority first, larger demands first within a priority. Each pod goes to the
option with the lowest cost tuple among: a free instance that already exists; one more instance on a GPU this
plan already reconfigures; or reconfiguring an idle GPU. The layout of a reconfigured GPU is the *best
completion* of the instances assigned to it: the valid layout containing them that leaves the least memory
unusable (spare instances stay free for later pods). GPUs in the same state are interchangeable, so options are
costed once per state, not once per GPU; that keeps 10,000 pods on 8,000 GPUs within about a second.
"""

from __future__ import annotations

import gc
from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from heapq import heapify, heappop, heappush
from itertools import count
from operator import attrgetter

from migctl.core import exact
from migctl.core.bins import Bin, Box, Item
from migctl.core.budget import WorkBudget
from migctl.core.catalog import GpuModel
from migctl.core.cluster import GpuDemand, Node, Pod, Resources, Snapshot
from migctl.core.demand import WHOLE_GPU, need_mib, profiles_for
from migctl.core.fits import Shapes
from migctl.core.forecast import Forecast, forecast
from migctl.core.geometry import CanonicalLayout, canonical, geometry
from migctl.core.improve import LocalSearch
from migctl.core.migparted import GpuConfig
from migctl.core.over_time import for_the_forecast
from migctl.core.placement import signature, static_misfit, tally
from migctl.core.plan import Assignment, Eviction, GpuPlan, NodePlan, Plan, Summary, Unplaced
from migctl.core.settings import PlannerSettings
from migctl.core.spare import Completions

Layout = CanonicalLayout
# (strategy preference, scarce-kind use, stranded MiB, evictions, GPUs reconfigured, nodes touched,
#  -usefulness of what stays free: forecast demand it serves, `spare.Completions.usefulness`)
Cost = tuple[int, int, int, int, int, int, int]
# A heap entry of one free existing instance: (-usefulness of what its GPU keeps free, GPU order, sequence number,
#  the GPU's version when made, the GPU)
_Entry = tuple[int, float, int, int, "_Slot"]
# Extra passes that move pods left out by the best pass to the front of their priority ("squeaky wheel").
SQUEAKY_ROUNDS = 4
# `balance-first`: the spread of a node's resource fractions left counts in steps of this many per mille.
BALANCE_STEP = 100
# Fit checks the local search may spend: a base plus a share per pending pod (a count, so plans stay deterministic).
IMPROVE_BUDGET = 20_000
IMPROVE_BUDGET_PER_POD = 500
IMPROVE_MAX = 400_000
TIDY_PROBES = 50_000  # of that budget, at most this much for the last round that only lowers stranded memory
CHAIN_PROBES = 2_500  # per tidy round of every pass, for exchanges (docs/benchmarks.md)
PASS_REPACK = 20_000  # `LocalSearch.repacks` after tidy in every pass (fit checks, pairs and partners looked at)
POLISH_REPACK = 100_000  # the same for the best plan's polish (docs/benchmarks.md)
PASS_AUGMENT = 50_000  # `LocalSearch.augment_all`'s work at the end of every pass (fit checks)
AUGMENT_WORK = 200_000  # the same for `Planner.augment`, on the plan `plan()` keeps
POLISH_CHAIN_PROBES = 10_000  # per round of the best plan's polish, for exchanges and for trades
POLISH_RESHUFFLE = 100_000  # `LocalSearch.reshuffle`'s work in the polish (fit checks, nodes looked at)
STRATEGIES = (
    "stranded-first",
    "pack-first",
    "pressure-first",
    "demand-first",
    "balance-first",
    "balance-ties",
    "small-first",
    "ascending",
    "existing-first",
    "no-changes",
)
BALANCED = ("balance-first", "balance-ties")


# ---------------------------------------------------------------------------------------------------------
# Mutable planning state.


@dataclass(eq=False)
class _NodeState:
    node: Node
    free: Resources
    mode_ok: bool  # MIG mode may change here (setting on, no GPU pods, not frozen)
    start: Resources  # `free` before this plan
    touched: bool = False
    slots: list[_Slot] = field(default_factory=list)
    sigs: list[int] = field(default_factory=list)
    gpu_total: int = 0  # MiB of GPU memory pods could get here at the start (idle GPUs, free instances)
    gpu_left: int = 0  # of that, MiB not yet assigned


@dataclass(eq=False)
class _Slot:
    """A GPU, or a node-level pool of free instances when per-GPU usage is unknown (index None)."""

    node: _NodeState
    index: int | None
    model: GpuModel | None
    kind: str  # model id, or "card:<memory>" for non-MIG cards
    current: GpuConfig | None
    free: Counter[str]  # instances that exist and are free now (WHOLE_GPU for a free MIG-disabled GPU)
    reconfigurable: bool
    mig: bool  # MIG mode the GPU has now (and keeps unless changed)
    order: float
    assigned: Counter[str] = field(default_factory=Counter)
    changed: bool = False
    key: int | None = None  # id of its state (`_bkey`) in the views; None when not listed
    version: int = 0
    requests: list[tuple[GpuDemand, int | None, int]] = field(default_factory=list)  # + assignment index
    locked: bool = False  # serves part of a multi-instance pod: the local search leaves it alone
    # heap entries of its free instances at a version, made once and pushed into every signature's heaps
    entries: tuple[int, list[tuple[str, _Entry]]] | None = None


def _bkey(slot: _Slot) -> tuple[object, ...]:
    """What a reshaping option's cost depends on: GPUs with equal keys are interchangeable for it."""
    return (
        slot.kind,
        tuple(sorted(slot.assigned.items())),
        slot.changed,
        slot.mig,
        slot.node.touched,
        slot.node.mode_ok,
    )


@dataclass(frozen=True)
class _Option:
    unusable_delta: int
    gpus: int
    nodes: int
    useful: int
    reconfigure: bool
    mig_after: bool


_ORDER = attrgetter("order")  # views keep their GPUs in this order
# A candidate: (cost, GPU order, slot, profile, instance MiB, option)
_Candidate = tuple[Cost, float, "_Slot", str, int, _Option]


class Planner:
    """One planning run over one snapshot (create, call `run()` once).

    Two indexes keep each pod's search independent of the cluster size. Existing free instances sit in heaps per
    (pod signature, GPU kind, profile), ordered by the usefulness of what the GPU keeps free, then GPU order.
    Reshaping options are costed per GPU state key (`_bkey`): the views map each key to its GPUs in name order.
    Entries go stale by version number instead of being deleted.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        settings: PlannerSettings | None = None,
        strategy: str = "stranded-first",
        boost: frozenset[str] = frozenset(),
        shapes: dict[str, Shapes] | None = None,
        completions: dict[str, Completions] | None = None,
        demand: Forecast | None = None,
    ) -> None:
        self.boost = boost  # pods taken first within their priority (pods an earlier pass left out)
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown planner strategy {strategy!r}")
        self.strategy = strategy
        self.snapshot = snapshot
        self.settings = settings or PlannerSettings()
        # what the spare instances of reshaped GPUs are chosen for; shared by the passes of one `plan()`
        self.demand = forecast(snapshot, self.settings) if demand is None else demand
        self.models: dict[str, GpuModel] = {}
        # per model id; shared by the passes of one `plan()`, like `shapes`: best completions are memoised
        self.completions: dict[str, Completions] = {} if completions is None else completions
        self.nodes: list[_NodeState] = []
        self.slots: list[_Slot] = []
        self.order_span = 0  # more than any GPU order
        self.sig_ids: dict[tuple[object, ...], int] = {}
        self.pod_sids: dict[str, int] = {}  # pod key -> `sig_ids` id (hashing a signature is not cheap)
        self.sig_nodes: list[list[_NodeState]] = []
        self.sig_kinds: list[list[str]] = []  # GPU kinds on the signature's nodes, sorted
        self.views: list[dict[int, list[_Slot]]] = []
        self.key_ids: dict[tuple[object, ...], int] = {}
        self.class_ids: dict[tuple[GpuDemand, int | None], int] = {}
        self.heaps: dict[tuple[int, str, str], list[_Entry]] = {}
        self._seq = count()  # unique tie-breaker: heap entries never compare slots
        self.option_memo: dict[tuple[int, str], _Option | None] = {}
        self.grow_memo: dict[int, bool] = {}
        self.unit_memo: dict[int, dict[int, _Candidate | None]] = {}  # demand class -> state id -> option
        self.choice_cost_memo: dict[tuple[int, str], list[tuple[str, int, int, int]]] = {}
        self.choice_memo: dict[tuple[str, GpuDemand], list[tuple[str, int]]] = {}
        self.kinds_memo: dict[tuple[int, tuple[GpuDemand, ...]], list[str]] = {}
        self.misfit_memo: dict[tuple[int, tuple[GpuDemand, ...]], tuple[Counter[str], list[_NodeState]]] = {}
        self.static_memo: dict[int, tuple[Counter[str], dict[frozenset[str], list[_NodeState]]]] = {}
        self.shapes = {} if shapes is None else shapes  # shared by the passes of one `plan()`: fits are memoised
        self.pod_kinds: dict[str, int] = {}
        self.rigid_kind: dict[str, str] = {}
        self.rigid_left: Counter[str] = Counter()  # MiB still needed by pods that fit only this kind
        # `demand-first`: MiB every pod still to place needs, spread evenly over the kinds that can serve it
        self.demand_left: Counter[str] = Counter()
        self.demand_share: dict[str, list[tuple[str, int]]] = {}
        self.cap_left: Counter[str] = Counter()  # MiB this kind can still offer (idle GPUs, free instances)
        self.assignments: list[Assignment] = []
        self.evictions: list[Eviction] = []
        self._run: tuple[list[Pod], list[Pod]] | None = None  # (pods in order, pods left out) of the last run
        self._tidied = False  # whether its tidy round finished within its probes (else polish would not either)
        self.repacked = 0  # pods its local search placed by re-packing nodes
        self._model: tuple[dict[int, Box], list[tuple[_Slot, Bin]], set[str]] = ({}, [], set())
        self._build()

    # -- setup -------------------------------------------------------------------------------------------

    def _build(self) -> None:
        order = 0
        for node in sorted(self.snapshot.nodes, key=lambda n: n.name):
            if node.model is None and node.card is None:
                continue
            frozen = (
                bool(node.frozen_reason)
                or node.labels.get(self.settings.exclude_label) == "true"
                or self.strategy == "no-changes"
            )
            mode_ok = self.settings.allow_mig_mode_change and not frozen and not node.gpu_pods
            room = node.free
            ns = _NodeState(node, room, mode_ok, room)
            if node.model is not None:
                self.models[node.model.id] = node.model
                if node.model.id not in self.completions:
                    self.completions[node.model.id] = Completions(geometry(node.model), self.demand.of(node.model.id))
            kind = node.model.id if node.model else f"card:{node.card.memory_mib if node.card else 0}"
            if node.usage_known and node.gpus:
                for gpu in node.gpus:
                    cfg = gpu.config
                    if cfg.mig_enabled:
                        used = Counter(dict(gpu.used or {}))
                        free = Counter(dict(cfg.layout)) - used
                        idle = used.total() == 0
                    else:
                        idle = not gpu.whole_used
                        free = Counter({WHOLE_GPU: 1}) if idle else Counter()
                    reconf = idle and not frozen and node.model is not None
                    if not cfg.mig_enabled and not mode_ok:
                        reconf = False
                    ns.slots.append(_Slot(ns, gpu.index, node.model, kind, cfg, free, reconf, cfg.mig_enabled, order))
                    order += 1
            else:
                free = Counter({k: v for k, v in node.mig_free.items() if v > 0})
                if node.whole_free > 0:
                    free[WHOLE_GPU] = node.whole_free
                ns.slots.append(_Slot(ns, None, node.model, kind, None, free, False, True, order))
                order += 1
            self.nodes.append(ns)
            self.slots.extend(ns.slots)
        self.order_span = order + 1

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
        fitting = [ns for ns in self.nodes if static_misfit(pod, ns.node) is None]
        self.sig_nodes.append(fitting)
        self.sig_kinds.append(sorted({s.kind for ns in fitting for s in ns.slots}))
        self.views.append({})
        fresh: dict[tuple[int, str, str], list[_Entry]] = {}  # this signature's heaps: filled, then heapified
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
                        insort(self.views[other].setdefault(s.key, []), s, key=_ORDER)
                    self.views[sid].setdefault(s.key, []).append(s)
        for k, heap in fresh.items():
            heapify(heap)
            self.heaps[k] = heap
        return sid

    # -- index maintenance -------------------------------------------------------------------------------

    def _left(self, slot: _Slot) -> dict[str, int]:
        """Existing free instances not yet assigned, by profile (only positive counts, as `Counter -` gives)."""
        assigned = slot.assigned
        return {n: c - assigned[n] for n, c in slot.free.items() if c > assigned[n]}

    def _push_existing(self, slot: _Slot, sids: Iterable[int]) -> None:
        """Index the slot's free existing instances in the heaps of signatures `sids`."""
        heaps, kind = self.heaps, slot.kind
        for profile, entry in self._entries(slot):
            for sid in sids:
                heap = heaps.get((sid, kind, profile))
                if heap is None:
                    heaps[(sid, kind, profile)] = [entry]
                else:
                    heappush(heap, entry)

    def _entries(self, slot: _Slot) -> list[tuple[str, _Entry]]:
        """(profile, heap entry) per free existing instance the slot has now; none once its layout changes.
        Made once per state of the slot and pushed into every signature's heaps."""
        if slot.changed:
            return []
        if slot.entries is None or slot.entries[0] != slot.version:
            left = self._left(slot)
            comp = self.completions.get(slot.kind)
            made = []
            for profile, n in left.items():
                if n <= 0:
                    continue
                useful = comp.usefulness_without(left, profile) if comp is not None else 0
                made.append((profile, (-useful, slot.order, next(self._seq), slot.version, slot)))
            slot.entries = (slot.version, made)
        return slot.entries[1]

    def _kid(self, slot: _Slot) -> int:
        """Small-int id of the slot's state key: memo lookups then hash two ints, not nested tuples."""
        return self.key_ids.setdefault(_bkey(slot), len(self.key_ids))

    def _can_grow(self, slot: _Slot) -> bool:
        if not slot.reconfigurable or slot.model is None:
            return False
        key = self._kid(slot)
        hit = self.grow_memo.get(key)
        if hit is None:
            names = [p.name for p in slot.model.profiles] + [WHOLE_GPU]
            hit = any(self._reconf_option(slot, n) is not None for n in names)
            self.grow_memo[key] = hit
        return hit

    def _rekey(self, slot: _Slot) -> None:
        """Move a reshapable slot to the view list of its new state (or out, once it can take nothing more)."""
        if not slot.reconfigurable:
            return
        new = self._kid(slot) if self._can_grow(slot) else None
        old = slot.key
        if new == old:
            return
        for sid in slot.node.sigs:
            view = self.views[sid]
            if old is not None:
                lst = view[old]
                del lst[bisect_left(lst, slot.order, key=_ORDER)]
                if not lst:
                    del view[old]
            if new is not None:
                insort(view.setdefault(new, []), slot, key=_ORDER)
        slot.key = new

    def _refresh(self, slot: _Slot) -> None:
        """After the slot's state changed: retire its heap entries, index what it has left, move its view."""
        slot.version += 1
        self._push_existing(slot, slot.node.sigs)
        self._rekey(slot)

    # -- costing -----------------------------------------------------------------------------------------

    def _existing_option(self, slot: _Slot, profile: str) -> _Option | None:
        if slot.changed:
            return None
        left = self._left(slot)
        if left.get(profile, 0) <= 0:
            return None
        comp = self.completions.get(slot.kind)
        useful = comp.usefulness_without(left, profile) if comp is not None else 0
        return _Option(0, 0, 0, useful, False, slot.mig)

    def _reconf_option(self, slot: _Slot, profile: str, kid: int | None = None) -> _Option | None:
        """`_compute_reconf`, memoised per state id (`kid`, when the caller has it) and profile."""
        memo_key = (self._kid(slot) if kid is None else kid, profile)
        if memo_key not in self.option_memo:
            self.option_memo[memo_key] = self._compute_reconf(slot, profile)
        return self.option_memo[memo_key]

    def _compute_reconf(self, slot: _Slot, profile: str) -> _Option | None:
        if not slot.reconfigurable or slot.model is None:
            return None
        touched = 0 if slot.node.touched else 1
        if profile == WHOLE_GPU:
            if slot.changed or slot.assigned.total() or not slot.mig or not slot.node.mode_ok:
                return None
            return _Option(0, 1, touched, 0, True, False)
        if not slot.mig and (not slot.node.mode_ok or slot.assigned):
            return None  # MIG stays off, or the GPU already serves a whole-GPU pod
        comp = self.completions[slot.kind]
        after = comp.best(canonical(slot.assigned + Counter({profile: 1})))
        if after is None:
            return None
        before = 0
        if slot.changed:
            prev = comp.best(canonical(slot.assigned))
            before = prev[1] if prev else 0
        return _Option(
            after[1] - before, 0 if slot.changed else 1, 0 if slot.changed else touched, after[2], True, True
        )

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

    def _cost(self, waste: int, share: int, opt: _Option) -> Cost:
        """The cost tuple of an option, from its GPU-independent parts (`_choice_costs`). `_place_single` builds
        the same tuple for existing instances inline, so that it makes an `_Option` only for the winner."""
        prefer = 1 if opt.reconfigure and self.strategy == "existing-first" else 0
        return (prefer, share, waste + opt.unusable_delta, 0, opt.gpus, opt.nodes, -opt.useful)

    def _share(self, kind: str, profile: str) -> int:
        """`pack-first`: per mille of a GPU an instance takes (memory slices and compute slices averaged), so
        each pod takes the least of the GPU it can and more pods fit."""
        model = self.models.get(kind)
        if model is None or profile == WHOLE_GPU:
            return 1000
        p = model.profile(profile)
        return 500 * p.memory_slices // model.placement_units + 500 * p.compute_slices // model.compute_slices

    def _reconf_unit(self, pod: Pod, demand: GpuDemand, slot: _Slot, kid: int, cid: int) -> _Candidate | None:
        """Cheapest reshaping option for one unit on GPUs in state `kid` (memoised per state and demand class)."""
        memo = self.unit_memo.setdefault(cid, {})
        if kid in memo:
            return memo[kid]
        best: _Candidate | None = None
        for profile, mib, waste, share in self._choice_costs(cid, slot.kind, pod, demand):
            opt = self._reconf_option(slot, profile, kid)
            if opt is None:
                continue
            cost = self._cost(waste, share, opt)
            if best is None or (cost, profile) < (best[0], best[3]):
                best = (cost, 0.0, slot, profile, mib, opt)
        memo[kid] = best
        return best

    def _unit_cost(self, pod: Pod, demand: GpuDemand, slot: _Slot) -> _Candidate | None:
        """Cheapest option of either kind on one given slot (the per-node path for multi-instance pods)."""
        best: _Candidate | None = None
        for profile, mib, waste, share in self._choice_costs(self._cid(pod, demand), slot.kind, pod, demand):
            for opt in (self._existing_option(slot, profile), self._compute_reconf(slot, profile)):
                if opt is None:
                    continue
                cand: _Candidate = (self._cost(waste, share, opt), slot.order, slot, profile, mib, opt)
                if best is None or (cand[0], cand[1], profile) < (best[0], best[1], best[3]):
                    best = cand
        return best

    # -- placing -----------------------------------------------------------------------------------------

    def _apply(self, pod: Pod, demand: GpuDemand, slot: _Slot, profile: str, mib: int, opt: _Option) -> None:
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

    def _existing_top(self, heap: list[_Entry], pod: Pod) -> tuple[int, _Slot] | None:
        """Best live entry whose node still has room for the pod; stale entries are dropped on the way."""
        skipped = []
        found: tuple[int, _Slot] | None = None
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
                    self._share(kind, profile) if self.strategy == "pack-first" else 0,
                )
                for profile, mib in self._choices(kind, demand)
            ]
        return hit

    def _place_single(self, pod: Pod) -> bool:
        """Place a pod of one GPU unit at its cheapest option (`_cost`, then GPU order); False if none."""
        demand = pod.gpu[0]
        sid = self._sig(pod)
        cid = self._cid(pod, demand)
        protects = self._protect_kinds(pod)
        balanced = self.strategy in BALANCED
        req = pod.requests
        heaps = self.heaps
        best: _Candidate | None = None
        for kind in self.sig_kinds[sid]:
            for profile, mib, waste, share in self._choice_costs(cid, kind, pod, demand):
                heap = heaps.get((sid, kind, profile))
                if not heap:
                    continue
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
                cost: Cost = (0, scarce, waste, 0, 0, 0, -useful)  # `_cost` of an existing instance
                if balanced:
                    cand = self._tilted(cost, pod, slot, profile, mib, _Option(0, 0, 0, useful, False, slot.mig))
                    if best is None or cand[:2] < best[:2]:
                        best = cand
                elif best is None or (cost, slot.order) < best[:2]:
                    best = (cost, slot.order, slot, profile, mib, _Option(0, 0, 0, useful, False, slot.mig))
        memo = self.unit_memo.setdefault(cid, {})
        for kid, slots in self.views[sid].items():
            unit = memo[kid] if kid in memo else self._reconf_unit(pod, demand, slots[0], kid, cid)
            if unit is None:
                continue
            if protects:
                unit = (self._protected(unit[0], pod, slots[0].kind), *unit[1:])
            if best is not None and unit[0] > best[0]:
                continue
            if balanced:  # every GPU of the state: the node matters, not just the order
                for s in slots:
                    if req.fits_in(s.node.free):
                        c = self._tilted(unit[0], pod, s, unit[3], unit[4], unit[5])
                        if best is None or c[:2] < best[:2]:
                            best = c
                continue
            for s in slots:
                if s.order > (best[1] if best is not None and unit[0] == best[0] else float("inf")):
                    break
                if req.fits_in(s.node.free):
                    best = (unit[0], s.order, s, unit[3], unit[4], unit[5])
                    break
        if best is None:
            return False
        _, _, slot, profile, mib, opt = best
        slot.node.free = slot.node.free - req
        self._apply(pod, demand, slot, profile, mib, opt)
        return True

    def _tilted(self, cost: Cost, pod: Pod, slot: _Slot, profile: str, mib: int, opt: _Option) -> _Candidate:
        """A candidate with its tie-break: the GPU order, or for the balance strategies how unevenly the node's
        resources would be left (`_spread`), either in place of the scarce-kind term of the cost
        (`balance-first`, in steps of BALANCE_STEP, so it outranks stranded memory) or before the GPU order
        (`balance-ties`, in one float: the spread times more than any order, plus the order)."""
        if self.strategy == "balance-first":
            spread = self._spread(pod, slot, mib) // BALANCE_STEP
            return ((cost[0], spread, *cost[2:]), slot.order, slot, profile, mib, opt)
        if self.strategy == "balance-ties":
            return (cost, self._spread(pod, slot, mib) * self.order_span + slot.order, slot, profile, mib, opt)
        return (cost, slot.order, slot, profile, mib, opt)

    def _spread(self, pod: Pod, slot: _Slot, mib: int) -> int:
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

    # -- scarcity ----------------------------------------------------------------------------------------

    def _protect_kinds(self, pod: Pod) -> bool:
        """Whether `_protect` can be non-zero for this pod (it fits several kinds, under a scarcity strategy)."""
        return self.strategy in ("pressure-first", "demand-first") and self.pod_kinds.get(pod.key, 0) > 1

    def _protect(self, pod: Pod, kind: str) -> int:
        """`pressure-first` only: how much of a GPU kind's remaining capacity pods with no other choice still
        need (percent). A pod that fits several kinds then goes where it crowds out the fewest such pods."""
        if not self._protect_kinds(pod):
            return 0
        left = self.rigid_left if self.strategy == "pressure-first" else self.demand_left
        return min(1000, left[kind] * 100 // max(1, self.cap_left[kind]))

    def _protected(self, cost: Cost, pod: Pod, kind: str) -> Cost:
        protect = self._protect(pod, kind)
        return cost if not protect else (cost[0], protect, *cost[2:])

    def _consume(self, pod: Pod) -> None:
        kind = self.rigid_kind.get(pod.key)
        if kind is not None:
            self.rigid_left[kind] -= self._rigid_mib(pod, kind)
        for k, share in self.demand_share.get(pod.key, ()):
            self.demand_left[k] -= share

    def _free_mib(self, slot: _Slot) -> list[tuple[int, int]]:
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

    def _rigid_mib(self, pod: Pod, kind: str) -> int:
        return sum(min(m for _, m in self._choices(kind, d)) * d.count for d in pod.gpu)

    def _place_multi(self, pod: Pod, candidates: Iterable[_NodeState]) -> bool:
        """Pods with several GPU units: all units on one node, chosen by total cost then node name."""
        best: tuple[Cost, str, _NodeState] | None = None
        for ns in candidates:
            if not pod.requests.fits_in(ns.free):
                continue
            trial = self._trial(pod, ns, commit=False)
            if trial is not None and (best is None or (trial, ns.node.name) < (best[0], best[1])):
                best = (trial, ns.node.name, ns)
        if best is None:
            return False
        best[2].free = best[2].free - pod.requests
        self._trial(pod, best[2], commit=True)
        return True

    def _trial(self, pod: Pod, ns: _NodeState, commit: bool) -> Cost | None:
        """Place every unit of `pod` on `ns` greedily; undo unless `commit` (indexes move only on commit)."""
        saved = [(s, Counter(s.assigned), s.changed, s.mig) for s in ns.slots]
        saved_touched = ns.touched
        saved_assign = len(self.assignments)
        total: Cost = (0, 0, 0, 0, 0, 0, 0)
        ok = True
        for demand in sorted(pod.gpu, key=lambda d: (-d.vram_mib, d.kind, d.profile)):
            for _ in range(demand.count):
                best: _Candidate | None = None
                for s in ns.slots:
                    unit = self._unit_cost(pod, demand, s)
                    if unit is not None and (best is None or unit[:2] < best[:2]):
                        best = unit
                if best is None:
                    ok = False
                    break
                a, b, c, d, e, f, g = (x + y for x, y in zip(total, best[0], strict=True))
                total = (a, b, c, d, e, f, g)
                self._apply_local(pod, demand, best[2], best[3], best[4], best[5])
            if not ok:
                break
        if commit and ok:
            hosts = {a.gpu for a in self.assignments[saved_assign:]}
            ns.gpu_left -= sum(a.instance_mib for a in self.assignments[saved_assign:])
            for s in ns.slots:
                s.locked = s.locked or s.index in hosts
                self._refresh(s)
            return total
        for s, assigned, changed, mig in saved:
            s.assigned, s.changed, s.mig = assigned, changed, mig
        ns.touched = saved_touched
        del self.assignments[saved_assign:]
        return total if ok else None

    def _apply_local(self, pod: Pod, demand: GpuDemand, slot: _Slot, profile: str, mib: int, opt: _Option) -> None:
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

    # -- evictions (opt-in) ------------------------------------------------------------------------------

    def _try_evict(self, pod: Pod, budget: int) -> list[Eviction] | None:
        """Free a node for `pod` by evicting its GPU pods, all of strictly lower priority (every GPU pod of the
        node: without per-GPU usage the planner cannot tell which GPU they use). Fewest victims win."""
        ranked: list[tuple[tuple[int, int, str], _NodeState, list[tuple[str, int]]]] = []
        if self.strategy == "no-changes":
            return None
        for ns in self.sig_nodes[self._sig(pod)]:
            node = ns.node
            if node.model is None or node.frozen_reason or ns.touched or not node.gpu_pods or not node.gpus:
                continue
            victims = [(k, p) for k, p, _ in node.gpu_pods]
            if any(p >= pod.priority for _, p in victims) or len(victims) > budget:
                continue
            if pod.requests.fits_in(ns.free):
                ranked.append(((len(victims), sum(p for _, p in victims), node.name), ns, victims))
        for _, ns, victims in sorted(ranked, key=lambda r: r[0]):
            old = self._swap_slots(ns, self._idle_slots(ns))
            if self._place_multi(pod, [ns]):
                return [Eviction(k, ns.node.name, p, pod.key) for k, p in victims]
            self._swap_slots(ns, old)
        return None

    def _idle_slots(self, ns: _NodeState) -> list[_Slot]:
        """The node's GPUs as they will be once its GPU pods are gone."""
        node = ns.node
        base = ns.slots[0].order if ns.slots else 0
        slots = []
        for i, gpu in enumerate(node.gpus):
            cfg = gpu.config
            free = Counter(dict(cfg.layout)) if cfg.mig_enabled else Counter({WHOLE_GPU: 1})
            reconf = node.model is not None and (cfg.mig_enabled or ns.mode_ok)
            kind = node.model.id if node.model else ""
            slots.append(_Slot(ns, gpu.index, node.model, kind, cfg, free, reconf, cfg.mig_enabled, base + i / 100))
        return slots

    def _swap_slots(self, ns: _NodeState, new: list[_Slot]) -> list[_Slot]:
        """Replace a node's slots in every index; returns the old ones (CPU/memory are not credited back)."""
        for s in ns.slots:
            s.version += 1  # retires its heap entries
            if s.key is not None:
                for sid in ns.sigs:
                    lst = self.views[sid][s.key]
                    lst.remove(s)
                    if not lst:
                        del self.views[sid][s.key]
                s.key = None
        old, ns.slots = ns.slots, new
        for s in new:
            self._refresh(s)
        return old

    # -- local search ----------------------------------------------------------------------------------

    def _improve(self, unplaced: list[Pod]) -> list[Pod]:
        """Run `improve.LocalSearch` over the greedy's result and adopt what it found (see that module)."""
        model = self._search_model(unplaced)
        if model is None:
            return unplaced
        search, todo = model
        search.run(todo)
        self._tidied = search.tidy(self._placed_items(), TIDY_PROBES, CHAIN_PROBES)
        search.repacks = PASS_REPACK  # not before tidy: full re-packed nodes leave it less to move
        if search.out:  # tidying moved pods to smaller instances, which may have opened room
            search.run(list(search.out))
        if search.out:  # chains of moves for what is still left out: once per pass, not per round (planning.md)
            search.augment_all(list(search.out), PASS_AUGMENT)
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
            search.tidy(self._placed_items(), TIDY_PROBES, POLISH_CHAIN_PROBES, moved_singles=False)
            if search.out:
                search.repacks = POLISH_REPACK
                search.run(list(search.out))
                if search.repacked:  # re-packed nodes are full, not tidy
                    search.tidy(self._placed_items(), TIDY_PROBES, POLISH_CHAIN_PROBES)
                search.trade(POLISH_CHAIN_PROBES)
            search.reshuffle(self._placed_items(), POLISH_RESHUFFLE)
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
            if search.augment_all(todo, AUGMENT_WORK):
                search.tidy(self._placed_items(), TIDY_PROBES, POLISH_CHAIN_PROBES)
            unplaced = self._adopt(unplaced)
        self._run = (pending, unplaced)
        return self._result(pending, unplaced)

    def _search_model(self, unplaced: list[Pod]) -> tuple[LocalSearch, list[Item]] | None:
        """The local search's plain model of the current placement: GPUs as bins, nodes as boxes (kept on the
        planner for `_adopt`); None when no GPU can take part."""
        pods = {p.key: p for p in self.snapshot.pending}
        shapes = {k: self.shapes.setdefault(k, Shapes(c.geo)) for k, c in self.completions.items()}
        boxes: dict[int, Box] = {}
        bins: list[tuple[_Slot, Bin]] = []
        movable: set[str] = set()
        for ns in self.nodes:
            box = boxes[id(ns)] = Box(ns.free)
            for slot in ns.slots:
                if slot.model is None or not slot.mig or slot.locked or slot.assigned[WHOLE_GPU]:
                    continue
                base = canonical((n, c) for n, c in slot.free.items() if n != WHOLE_GPU and c > 0)
                b = Bin(box, slot.order, shapes[slot.kind], base, slot.reconfigurable)
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

        todo = [
            Item(p, p.gpu[0], p.need_mib)
            for p in unplaced
            if p.units == 1 and p.gpu[0].kind != "gpu" and self.pod_kinds.get(p.key, 0) > 0
        ]
        if not bins:
            return None
        self._model = (boxes, bins, movable)
        search = LocalSearch(candidates, min(IMPROVE_MAX, IMPROVE_BUDGET + IMPROVE_BUDGET_PER_POD * len(pods)))
        return search, todo

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

    # -- run ---------------------------------------------------------------------------------------------

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

    def run(self) -> Plan:
        reach: dict[str, list[str]] = {}  # pod key -> `_kinds`, found while ordering

        def order(p: Pod) -> tuple[object, ...]:
            size = self._size(p)
            kinds = reach[p.key] = self._kinds(p)
            return (
                size if self.strategy == "small-first" else 0,
                -p.priority,
                p.key not in self.boost,
                len(kinds),  # flexibility: pods that fit fewer GPU kinds go first
                size if self.strategy == "ascending" else -size,
                p.created,
                p.key,
            )

        pending = sorted(self.snapshot.pending, key=order)
        for p in pending:
            kinds = reach[p.key]
            self.pod_kinds[p.key] = len(kinds)
            if self.strategy == "demand-first" and kinds:
                shares = [(k, self._rigid_mib(p, k) // len(kinds)) for k in kinds]
                self.demand_share[p.key] = shares
                for k, share in shares:
                    self.demand_left[k] += share
            if len(kinds) == 1:
                self.rigid_kind[p.key] = kinds[0]
                self.rigid_left[kinds[0]] += self._rigid_mib(p, kinds[0])
        for slot in self.slots:
            if slot.reconfigurable and slot.model is not None:
                offer = slot.model.full_profile.memory_mib
            else:
                offer = sum(mib * n for mib, n in self._free_mib(slot))
            self.cap_left[slot.kind] += offer
            slot.node.gpu_total += offer
            slot.node.gpu_left += offer
        unplaced: list[Pod] = []
        for pod in pending:
            if pod.units == 1 and pod.gpu[0].count == 1:
                placed = self._place_single(pod)
            else:
                placed = self._place_multi(pod, self.sig_nodes[self._sig(pod)])
            if placed:
                self._consume(pod)
            else:
                unplaced.append(pod)
        if self.strategy != "no-changes":
            unplaced = self._improve(unplaced)
        if self.settings.evictions == "lower-priority" and unplaced:
            still: list[Pod] = []
            budget = self.settings.max_evictions
            for pod in unplaced:
                evicted = self._try_evict(pod, budget - len(self.evictions))
                if evicted is None:
                    still.append(pod)
                else:
                    self.evictions.extend(evicted)
            unplaced = still
        self._run = (pending, unplaced)
        return self._result(pending, unplaced)

    # -- result ------------------------------------------------------------------------------------------

    def _result(self, pending: list[Pod], unplaced: list[Pod]) -> Plan:
        node_plans: list[NodePlan] = []
        unusable_changed = 0
        stranded_before = stranded_after = 0
        gpus_changed = 0
        for ns in self.nodes:
            node = ns.node
            if node.model is None or not node.gpus:
                continue
            comp = self.completions[node.model.id]
            by_index = {s.index: s for s in ns.slots if s.index is not None}
            plans = []
            for gpu in node.gpus:
                current = gpu.config
                target = current
                slot = by_index.get(gpu.index)
                if slot is not None and slot.changed:
                    if slot.mig:
                        best = comp.best(canonical(slot.assigned))
                        assert best is not None, "the planner only assigns layouts that exist"
                        target = GpuConfig.mig(best[0])
                    else:
                        target = GpuConfig.disabled()
                before = comp.geo.unusable_mib(current.layout) if current.mig_enabled else 0
                after = comp.geo.unusable_mib(target.layout) if target.mig_enabled else 0
                stranded_before += before
                stranded_after += after
                gp = GpuPlan(gpu.index, node.model.id, current, target, before, after)
                if gp.changed:
                    unusable_changed += after
                    gpus_changed += 1
                plans.append(gp)
            node_plans.append(NodePlan(node.name, tuple(plans)))
        waste = sum(a.waste_mib for a in self.assignments)
        running_waste = self._running_waste()
        placed = {a.pod for a in self.assignments}
        reasons = self._explain([p for p in unplaced if p.key not in placed])
        reasons += [Unplaced(k, r) for k, r in self.snapshot.rejected]
        summary = Summary(
            pending_pods=len(pending) + len(self.snapshot.rejected),
            pods_placed=len(placed),
            stranded_mib_before=stranded_before + running_waste,
            stranded_mib_after=stranded_after + running_waste + waste,
            internal_waste_mib=waste,
            unusable_mib=unusable_changed,
            evictions=len(self.evictions),
            gpus_reconfigured=gpus_changed,
            nodes_reconfigured=sum(1 for n in node_plans if n.changed),
        )
        return Plan(
            summary=summary,
            nodes=tuple(node_plans),
            assignments=tuple(
                sorted(self.assignments, key=lambda a: (a.node, a.gpu if a.gpu is not None else -1, a.pod, a.profile))
            ),
            unplaced=tuple(sorted(reasons, key=lambda u: u.pod)),
            evictions=tuple(self.evictions),
            warnings=self.snapshot.warnings,
        )

    def _running_waste(self) -> int:
        total = 0
        for pod in self.snapshot.pods:
            if pod.node is None or pod.need_mib is None:
                continue
            node = next((n.node for n in self.nodes if n.node.name == pod.node), None)
            if node is None or node.model is None:
                continue
            for d in pod.gpu:
                if d.kind == "profile" and node.model.has_profile(d.profile):
                    mib = node.model.profile(d.profile).memory_mib
                    total += max(0, mib - min(pod.need_mib, mib)) * d.count
        return total

    # -- explanations ------------------------------------------------------------------------------------

    def _explain(self, pods: list[Pod]) -> list[Unplaced]:
        out = []
        largest = max((p.memory_mib for m in self.models.values() for p in m.base_profiles), default=0)
        for pod in sorted(pods, key=lambda p: p.key):
            out.append(Unplaced(pod.key, self._reason(pod, largest)))
        return out

    def _reason(self, pod: Pod, largest: int) -> str:
        for d in pod.gpu:
            if d.kind == "vram" and d.vram_mib > largest:
                return (
                    f"asks for {d.vram_mib} MiB of GPU memory; the largest MIG instance on any GPU here has "
                    f"{largest} MiB"
                )
            if d.kind == "profile" and not any(m.has_profile(d.profile) for m in self.models.values()):
                return f"no GPU model in the cluster offers MIG profile {d.profile}"
        wants_whole = any(d.kind == "gpu" for d in pod.gpu) and not self.settings.allow_mig_mode_change
        if wants_whole and not any(s.free[WHOLE_GPU] > s.assigned[WHOLE_GPU] for s in self.slots):
            return (
                "needs a whole GPU with MIG disabled; none is free and MIG mode changes are off "
                "(planner.allow_mig_mode_change)"
            )
        fixed, open_nodes = self._misfits(pod)
        misfit = fixed.copy()
        for ns in open_nodes:
            if not pod.requests.fits_in(ns.free):
                misfit["insufficient cpu, memory or pod slots"] += 1
            elif ns.node.frozen_reason:
                misfit[f"node not reconfigurable ({ns.node.frozen_reason}) and no free instance"] += 1
            elif not ns.node.usage_known:
                misfit["no free instance; GPUs busy (per-GPU usage unknown)"] += 1
            else:
                misfit["no free instance and no idle GPU that a layout change could use"] += 1
        return tally(misfit, len(self.nodes)) + f"; needs {', '.join(str(d) for d in pod.gpu)}"

    def _misfits(self, pod: Pod) -> tuple[Counter[str], list[_NodeState]]:
        """Why nodes refuse the pod whatever its CPU and memory (selectors, taints, GPU model), counted, and the
        nodes left; memoised per signature and GPU request, since explaining is per left-out pod."""
        sid = self._sig(pod)
        key = (sid, pod.gpu)
        hit = self.misfit_memo.get(key)
        if hit is None:
            static = self.static_memo.get(sid)
            if static is None:  # selectors and taints: per signature, whatever the GPU request
                static = self.static_memo[sid] = (Counter(), {})
                for ns in self.nodes:
                    why = static_misfit(pod, ns.node)
                    if why:
                        static[0][why] += 1
                    else:
                        static[1].setdefault(frozenset(sl.kind for sl in ns.slots), []).append(ns)
            fixed = Counter(static[0])
            left: list[_NodeState] = []
            for kinds, nodes in static[1].items():
                if any(self._choices(k, d) for k in kinds for d in pod.gpu):
                    left.extend(nodes)
                else:
                    fixed["GPU model cannot serve the request"] += len(nodes)
            hit = self.misfit_memo[key] = (fixed, left)
        return hit


def rank(result: Plan, snapshot: Snapshot) -> tuple[object, ...]:
    """Sort key of the objective (smaller is better): pods placed per priority tier, highest tier first, then
    stranded MiB, evictions, GPUs and nodes reconfigured."""
    prio = {p.key: p.priority for p in snapshot.pods}
    placed = Counter(prio.get(a.pod, 0) for a in {a.pod: a for a in result.assignments}.values())
    tiers = tuple(-placed[lv] for lv in sorted(set(prio.values()) | set(placed), reverse=True))
    s = result.summary
    return (tiers, s.internal_waste_mib + s.unusable_mib, s.evictions, s.gpus_reconfigured, s.nodes_reconfigured)


def plan(snapshot: Snapshot, settings: PlannerSettings | None = None) -> Plan:
    """Plan MIG layouts for a snapshot: pure, deterministic, no I/O.

    The greedy `stranded-first` pass usually places every pod that can be placed at all. When it leaves pods
    that some GPU in their reach could serve, more passes run and the best plan by the objective wins:
    `pack-first` (each pod takes the smallest share of a GPU it can),
    `pressure-first` (pods that fit several GPU kinds avoid kinds that single-kind pods still need),
    `demand-first` (the same, against the kinds that all pods still to place need most),
    `balance-first` (a pod goes where the node's GPU memory, CPU and memory stay most evenly used, before
    stranded memory counts), `balance-ties` (the same, among options of equal cost),
    `small-first` (smallest pods first across priorities; the local search then claims room for higher
    priorities), `ascending` (smallest first within each priority: more pods of a tier that cannot all fit),
    `existing-first` (reshape only when no existing instance fits) and `no-changes`. Including
    `no-changes` guarantees a plan never places fewer pods of any priority than leaving the layouts alone. Every
    pass but `no-changes` ends with the local search (`improve.py`), whose last step looks for chains of moves
    of any length that place the pods still left out (`LocalSearch.augment_all`). Then, "squeaky wheel": the
    pods the latest pass left out go first within their priority in another pass, alternating the two best
    strategies, a few rounds, keeping the best plan. Then `Planner.polish` spends more local search on that
    plan's objective 2 (exchanges, and trades among the lowest priority left out); it never places fewer pods of
    any priority. Last, where pods that some GPU could serve are still left out, `Planner.augment` looks for
    such chains once more on that plan.

    The exact solver (`migctl.core.exact`) comes in twice: a small instance is solved whole right after the first
    pass (a plan proven optimal on pods per priority and stranded MiB is returned at once), and the plan kept at
    the end gets a large-neighbourhood search with exact sub-solves; both within `settings.exact`'s work budget.
    """
    settings = settings or PlannerSettings()
    with _collector_paused():
        budget = WorkBudget.for_snapshot(snapshot, settings)
        demand = forecast(snapshot, settings)
        return budget.stamp(for_the_forecast(_plan(snapshot, settings, budget, demand), snapshot, settings, demand))


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while planning. The planner allocates hundreds of thousands of
    small tuples that live until the plan ends; every automatic full collection would rescan them and the whole
    snapshot (a fifth of the time of a 1,000-node plan, docs/benchmarks.md). Reference counting still frees
    acyclic garbage at once; the cycles of discarded passes wait for the next collection after the plan."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _plan(snapshot: Snapshot, settings: PlannerSettings, budget: WorkBudget, demand: Forecast) -> Plan:
    shapes: dict[str, Shapes] = {}
    completions: dict[str, Completions] = {}
    first = Planner(snapshot, settings, shapes=shapes, completions=completions, demand=demand)
    budget.take()  # the first pass always runs
    best = first.run()
    exact_plan, proven = exact.whole(snapshot, first.settings, best, first.best_layout, rank)  # small instances
    if exact_plan is not None and proven:
        return exact_plan  # proven optimal on objectives 1-2: the heuristic's passes could not do better
    maker = first
    placed = {a.pod for a in best.assignments}
    hopeless = {p.key for p in snapshot.pending if first.pod_kinds.get(p.key, 0) == 0}
    # a first pass that placed its last pods by re-packing nodes left them full, not tidy: the others compete too
    if first.repacked or not all(p.key in placed or p.key in hopeless for p in snapshot.pending):
        best_rank = rank(best, snapshot)
        ranked = [(best_rank, 0, STRATEGIES[0])]
        for i, strategy in enumerate(STRATEGIES[1:], 1):
            if not budget.take():
                break
            other_maker = Planner(snapshot, settings, strategy, shapes=shapes, completions=completions, demand=demand)
            other = other_maker.run()
            other_rank = rank(other, snapshot)
            ranked.append((other_rank, i, strategy))
            if other_rank < best_rank:
                best, best_rank, maker = other, other_rank, other_maker
        leaders = [s for _, _, s in sorted(ranked)[:2]]
        boost: set[str] = set()
        latest = best
        for r in range(SQUEAKY_ROUNDS):
            left = {p.key for p in snapshot.pending} - {a.pod for a in latest.assignments} - hopeless
            if not left or left <= boost or not budget.take():
                break
            boost |= left
            latest_maker = Planner(
                snapshot, settings, leaders[r % len(leaders)], frozenset(boost), shapes, completions, demand
            )
            latest = latest_maker.run()
            latest_rank = rank(latest, snapshot)
            if latest_rank < best_rank:
                best, best_rank, maker = latest, latest_rank, latest_maker
    if maker.can_polish and budget.take():
        polished = maker.polish()
        if rank(polished, snapshot) <= rank(best, snapshot):  # it never ranks worse
            best = polished
    placed = {a.pod for a in best.assignments}
    if not (maker.evictions or all(p.key in placed or p.key in hopeless for p in snapshot.pending)) and budget.take():
        augmented = maker.augment()
        best = augmented if rank(augmented, snapshot) <= rank(best, snapshot) else best
    return exact.refine(snapshot, maker.settings, best, maker.best_layout, rank, exact_plan)  # exact neighbourhoods
