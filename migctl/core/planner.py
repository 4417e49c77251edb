"""The planner: `plan(snapshot, settings) -> Plan`, from pending pods' GPU demand to per-GPU MIG layouts.

Objective, compared lexicographically (docs/planning.md has a worked example):
  1. pods placed, in priority order (a pod is only ever placed ahead of lower-priority pods);
  2. stranded MiB: internal waste of placed pods + unusable MiB of every GPU whose layout changes;
  3. disruption: evictions, then GPUs reconfigured, then nodes touched;
  4. how useful the free instances left behind are (FGD-style: fewer, larger free instances win);
  5. node name and GPU index, so the same snapshot always gives the same plan.

Method: pods are taken highest priority first, larger demands first within a priority. Each pod goes to the
option with the lowest cost tuple among: a free instance that already exists; one more instance on a GPU this
plan already reconfigures; or reconfiguring an idle GPU. The layout of a reconfigured GPU is the *best
completion* of the instances assigned to it: the valid layout containing them that leaves the least memory
unusable (spare instances stay free for later pods). GPUs in the same state are interchangeable, so options are
costed once per state, not once per GPU; that keeps 10,000 pods on 8,000 GPUs within about a second.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from migctl.core.catalog import GpuModel
from migctl.core.cluster import GpuDemand, Node, Pod, Resources, Snapshot
from migctl.core.demand import WHOLE_GPU, need_mib, profiles_for
from migctl.core.geometry import CanonicalLayout, ModelGeometry, canonical, geometry
from migctl.core.migparted import GpuConfig
from migctl.core.placement import signature, static_misfit, tally
from migctl.core.plan import Assignment, Eviction, GpuPlan, NodePlan, Plan, Summary, Unplaced
from migctl.core.settings import PlannerSettings

Layout = CanonicalLayout
# (strategy preference, stranded MiB, evictions, GPUs reconfigured, nodes touched, -usefulness of what stays free)
Cost = tuple[int, int, int, int, int, int]
STRATEGIES = ("stranded-first", "existing-first", "no-changes")


# ---------------------------------------------------------------------------------------------------------
# Best completions: the layout a reconfigured GPU gets for the instances assigned to it.


class _Completions:
    """Per model: best completion of each assigned multiset, and what its free instances are worth."""

    def __init__(self, geo: ModelGeometry) -> None:
        self.geo = geo
        self._best: dict[Layout, tuple[Layout, int, int] | None] = {}

    def usefulness(self, free: Counter[str]) -> int:
        """Sum of squared GiB of free instances: one 40 GiB instance beats four of 10 GiB (FGD-style)."""
        profiles = self.geo.profiles
        return sum((profiles[n].memory_mib // 1024) ** 2 * c for n, c in free.items() if c > 0)

    def best(self, assigned: Layout) -> tuple[Layout, int, int] | None:
        """(layout, unusable MiB, usefulness of its free instances) or None when `assigned` cannot exist."""
        if assigned in self._best:
            return self._best[assigned]
        need = Counter(dict(assigned))
        found: tuple[tuple[int, int, Layout], Layout, int, int] | None = None
        for layout in self.geo.layouts:
            have = Counter(dict(layout))
            extra = have - need
            if need - have or any(self.geo.profiles[n].attributes for n in extra):
                continue  # not a superset, or pads with media variants nobody asked for
            unusable = self.geo.unusable_mib(layout)
            useful = self.usefulness(extra)
            rank = (unusable, -useful, layout)
            if found is None or rank < found[0]:
                found = (rank, layout, unusable, useful)
        result = None if found is None else (found[1], found[2], found[3])
        self._best[assigned] = result
        return result


# ---------------------------------------------------------------------------------------------------------
# Mutable planning state.


@dataclass(eq=False)
class _NodeState:
    node: Node
    free: Resources
    mode_ok: bool  # MIG mode may change here (setting on, no GPU pods, not frozen)
    touched: bool = False
    slots: list[_Slot] = field(default_factory=list)
    sigs: list[int] = field(default_factory=list)


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
    key: tuple[object, ...] = ()


def _state_key(slot: _Slot) -> tuple[object, ...]:
    return (
        slot.kind,
        tuple(sorted((slot.free - slot.assigned).items())) if not slot.changed else (),
        tuple(sorted(slot.assigned.items())),
        slot.changed,
        slot.reconfigurable,
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


class Planner:
    """One planning run over one snapshot (create, call `run()` once)."""

    def __init__(
        self, snapshot: Snapshot, settings: PlannerSettings | None = None, strategy: str = "stranded-first"
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"unknown planner strategy {strategy!r}")
        self.strategy = strategy
        self.snapshot = snapshot
        self.settings = settings or PlannerSettings()
        self.models: dict[str, GpuModel] = {}
        self.completions: dict[str, _Completions] = {}
        self.nodes: list[_NodeState] = []
        self.slots: list[_Slot] = []
        self.sig_ids: dict[tuple[object, ...], int] = {}
        self.sig_nodes: list[list[_NodeState]] = []
        self.views: list[dict[tuple[object, ...], list[_Slot]]] = []
        self.option_memo: dict[tuple[tuple[object, ...], str], _Option | None] = {}
        self.assignments: list[Assignment] = []
        self.evictions: list[Eviction] = []
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
            ns = _NodeState(node, node.free, mode_ok)
            if node.model is not None:
                self.models[node.model.id] = node.model
                if node.model.id not in self.completions:
                    self.completions[node.model.id] = _Completions(geometry(node.model))
            kind = node.model.id if node.model else f"card:{node.card.memory_mib if node.card else 0}"
            if node.usage_known and node.gpus:
                for gpu in node.gpus:
                    cfg = gpu.config
                    if cfg.mig_enabled:
                        used = Counter(dict(gpu.used or {}))
                        free = Counter(dict(cfg.layout)) - used
                        idle = sum(used.values()) == 0
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
            for s in ns.slots:
                s.key = _state_key(s)
            self.nodes.append(ns)
            self.slots.extend(ns.slots)

    def _sig(self, pod: Pod) -> int:
        sig = signature(pod)
        found = self.sig_ids.get(sig)
        if found is not None:
            return found
        sid = len(self.sig_nodes)
        self.sig_ids[sig] = sid
        fitting = [ns for ns in self.nodes if static_misfit(pod, ns.node) is None]
        self.sig_nodes.append(fitting)
        view: dict[tuple[object, ...], list[_Slot]] = {}
        for ns in fitting:
            ns.sigs.append(sid)
            for s in ns.slots:
                view.setdefault(s.key, []).append(s)  # nodes are in name order, so lists start sorted
        self.views.append(view)
        return sid

    def _rekey(self, slot: _Slot) -> None:
        new = _state_key(slot)
        if new == slot.key:
            return
        for sid in slot.node.sigs:
            view = self.views[sid]
            old_list = view[slot.key]
            i = bisect_left(old_list, slot.order, key=lambda s: s.order)
            del old_list[i]
            if not old_list:
                del view[slot.key]
            insort(view.setdefault(new, []), slot, key=lambda s: s.order)
        slot.key = new

    # -- costing -----------------------------------------------------------------------------------------

    def _option(self, slot: _Slot, profile: str) -> _Option | None:
        memo_key = (slot.key, profile)
        if memo_key in self.option_memo:
            return self.option_memo[memo_key]
        opt = self._compute_option(slot, profile)
        self.option_memo[memo_key] = opt
        return opt

    def _compute_option(self, slot: _Slot, profile: str) -> _Option | None:
        touched = 0 if slot.node.touched else 1
        if not slot.changed and (slot.free - slot.assigned)[profile] > 0:
            comp = self.completions.get(slot.kind)
            left = slot.free - slot.assigned
            left[profile] -= 1
            useful = comp.usefulness(left) if comp and profile != WHOLE_GPU else 0
            return _Option(0, 0, 0, useful, False, slot.mig)
        if not slot.reconfigurable or slot.model is None:
            return None
        if profile == WHOLE_GPU:
            if slot.changed or slot.assigned.total() or not slot.mig or not slot.node.mode_ok:
                return None
            return _Option(0, 1, touched, 0, True, False)
        if not slot.mig and not slot.node.mode_ok:
            return None
        if not slot.mig and slot.assigned:
            return None  # a MIG-disabled GPU serving a whole-GPU pod cannot also host instances
        comp = self.completions[slot.kind]
        after = comp.best(canonical(slot.assigned + Counter({profile: 1})))
        if after is None:
            return None
        before = 0
        if slot.changed:
            prev = comp.best(canonical(slot.assigned))
            before = prev[1] if prev else 0
        return _Option(
            after[1] - before,
            0 if slot.changed else 1,
            0 if slot.changed else touched,
            after[2],
            True,
            True,
        )

    def _choices(self, slot_kind: str, demand: GpuDemand) -> list[tuple[str, int]]:
        """(profile, instance MiB) that can serve one unit of `demand` on GPUs of `slot_kind`."""
        if demand.kind == "gpu":
            model = self.models.get(slot_kind)
            if model is not None:
                return [(WHOLE_GPU, model.memory_mib)]
            return [(WHOLE_GPU, int(slot_kind.split(":")[1]))] if slot_kind.startswith("card:") else []
        model = self.models.get(slot_kind)
        if model is None:
            return []
        return [(p.name, p.memory_mib) for p in profiles_for(model, demand)]

    def _unit_cost(self, pod: Pod, demand: GpuDemand, slot: _Slot) -> tuple[Cost, str, int, _Option] | None:
        best: tuple[Cost, str, int, _Option] | None = None
        for profile, mib in self._choices(slot.kind, demand):
            opt = self._option(slot, profile)
            if opt is None:
                continue
            waste = mib - need_mib(demand, mib, pod.need_mib)
            prefer = 1 if opt.reconfigure and self.strategy == "existing-first" else 0
            cost: Cost = (prefer, waste + opt.unusable_delta, 0, opt.gpus, opt.nodes, -opt.useful)
            if best is None or (cost, profile) < (best[0], best[1]):
                best = (cost, profile, mib, opt)
        return best

    # -- placing -----------------------------------------------------------------------------------------

    def _apply(self, pod: Pod, demand: GpuDemand, slot: _Slot, profile: str, mib: int, opt: _Option) -> None:
        ns = slot.node
        slot.assigned[profile] += 1
        if opt.reconfigure and not slot.changed:
            slot.changed = True
            slot.mig = opt.mig_after
        if opt.reconfigure and not ns.touched:
            ns.touched = True
            for s in ns.slots:
                self._rekey(s)
        else:
            self._rekey(slot)
        self.assignments.append(
            Assignment(pod.key, ns.node.name, slot.index, profile, mib, need_mib(demand, mib, pod.need_mib))
        )

    def _place_single(self, pod: Pod) -> bool:
        demand = pod.gpu[0]
        view = self.views[self._sig(pod)]
        ranked: list[tuple[Cost, str, int, _Option, list[_Slot]]] = []
        for slots in view.values():
            if not slots:
                continue
            unit = self._unit_cost(pod, demand, slots[0])
            if unit is not None:
                ranked.append((*unit, slots))
        ranked.sort(key=lambda r: (r[0], r[1]))
        i = 0
        while i < len(ranked):
            cost = ranked[i][0]
            group = []
            while i < len(ranked) and ranked[i][0] == cost:
                group.append(ranked[i])
                i += 1
            winner: tuple[_Slot, str, int, _Option] | None = None
            for _, profile, mib, opt, slots in group:
                for s in slots:
                    if pod.requests.fits_in(s.node.free):
                        if winner is None or s.order < winner[0].order:
                            winner = (s, profile, mib, opt)
                        break
            if winner is not None:
                s, profile, mib, opt = winner
                s.node.free = s.node.free - pod.requests
                self._apply(pod, demand, s, profile, mib, opt)
                return True
        return False

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
        """Place every unit of `pod` on `ns` greedily; undo unless `commit` (views move only on commit)."""
        saved = [(s, Counter(s.assigned), s.changed, s.mig, s.key) for s in ns.slots]
        saved_touched = ns.touched
        saved_assign = len(self.assignments)
        total: Cost = (0, 0, 0, 0, 0, 0)
        ok = True
        for demand in sorted(pod.gpu, key=lambda d: (-d.vram_mib, d.kind, d.profile)):
            for _ in range(demand.count):
                best: tuple[Cost, float, _Slot, str, int, _Option] | None = None
                for s in ns.slots:
                    unit = self._unit_cost(pod, demand, s)
                    if unit is not None and (best is None or (unit[0], s.order) < (best[0], best[1])):
                        best = (unit[0], s.order, s, unit[1], unit[2], unit[3])
                if best is None:
                    ok = False
                    break
                a, b, c, d, e, f = (x + y for x, y in zip(total, best[0], strict=True))
                total = (a, b, c, d, e, f)
                self._apply_local(pod, demand, best[2], best[3], best[4], best[5])
            if not ok:
                break
        if commit and ok:
            for s, *_unused, old_key in saved:
                new_key, s.key = s.key, old_key
                if new_key != old_key:
                    self._rekey(s)
            return total
        for s, assigned, changed, mig, key in saved:
            s.assigned, s.changed, s.mig, s.key = assigned, changed, mig, key
        ns.touched = saved_touched
        del self.assignments[saved_assign:]
        return total if ok else None

    def _apply_local(self, pod: Pod, demand: GpuDemand, slot: _Slot, profile: str, mib: int, opt: _Option) -> None:
        """Like `_apply`, but keys are recomputed without touching the views (for trials)."""
        ns = slot.node
        slot.assigned[profile] += 1
        if opt.reconfigure and not slot.changed:
            slot.changed = True
            slot.mig = opt.mig_after
        if opt.reconfigure:
            ns.touched = True
        for s in ns.slots:
            s.key = _state_key(s)
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
            slot = _Slot(
                ns,
                gpu.index,
                node.model,
                node.model.id if node.model else "",
                cfg,
                free,
                reconf,
                cfg.mig_enabled,
                base + i / 100,
            )
            slots.append(slot)
        return slots

    def _swap_slots(self, ns: _NodeState, new: list[_Slot]) -> list[_Slot]:
        """Replace a node's slots in every view; returns the old ones (CPU/memory are not credited back)."""
        for sid in ns.sigs:
            view = self.views[sid]
            for s in ns.slots:
                lst = view.get(s.key, [])
                if s in lst:
                    lst.remove(s)
                    if not lst:
                        del view[s.key]
        old, ns.slots = ns.slots, new
        for s in new:
            s.key = _state_key(s)
            for sid in ns.sigs:
                insort(self.views[sid].setdefault(s.key, []), s, key=lambda x: x.order)
        return old

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

    def run(self) -> Plan:
        pending = sorted(self.snapshot.pending, key=lambda p: (-p.priority, -self._size(p), p.created, p.key))
        unplaced: list[Pod] = []
        for pod in pending:
            if pod.units == 1 and pod.gpu[0].count == 1:
                placed = self._place_single(pod)
            else:
                placed = self._place_multi(pod, self.sig_nodes[self._sig(pod)])
            if not placed:
                unplaced.append(pod)
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
        misfit: Counter[str] = Counter()
        gpu_nodes = list(self.nodes)
        for ns in gpu_nodes:
            why = static_misfit(pod, ns.node)
            if why:
                misfit[why] += 1
                continue
            kinds = {s.kind for s in ns.slots}
            if not any(self._choices(k, d) for k in kinds for d in pod.gpu):
                misfit["GPU model cannot serve the request"] += 1
            elif not pod.requests.fits_in(ns.free):
                misfit["insufficient cpu, memory or pod slots"] += 1
            elif ns.node.frozen_reason:
                misfit[f"node not reconfigurable ({ns.node.frozen_reason}) and no free instance"] += 1
            elif not ns.node.usage_known:
                misfit["no free instance; GPUs busy (per-GPU usage unknown)"] += 1
            else:
                misfit["no free instance and no idle GPU that a layout change could use"] += 1
        return tally(misfit, len(gpu_nodes)) + f"; needs {', '.join(str(d) for d in pod.gpu)}"


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

    The greedy `stranded-first` pass usually places every pod; when it does not, reshaping a GPU early may have
    destroyed free instances a later pod needed, so two more passes run (`existing-first`, which reshapes only
    when no existing instance fits, and `no-changes`) and the best plan by the objective wins. Including
    `no-changes` guarantees a plan never places fewer pods of any priority than leaving the layouts alone.
    """
    best = Planner(snapshot, settings).run()
    if best.summary.pods_placed == best.summary.pending_pods - len(snapshot.rejected):
        return best
    best_rank = rank(best, snapshot)
    for strategy in STRATEGIES[1:]:
        other = Planner(snapshot, settings, strategy).run()
        other_rank = rank(other, snapshot)
        if other_rank < best_rank:
            best, best_rank = other, other_rank
    return best
