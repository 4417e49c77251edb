"""Exact solves inside the planner: the whole instance when it is small, else a large-neighbourhood search.

`whole` solves every pending pod on every node exactly and says whether pods per priority and stranded MiB are
proven optimal (the planner then skips its heuristic passes). `refine` starts from the heuristic's
plan and repeatedly solves a neighbourhood exactly: a few nodes where the plan is weakest, with the pods the plan
puts there and the left-out pods that could go there, everything else fixed. Every term of the objective is a
sum over nodes and pods, so a neighbourhood that does better on its own nodes and pods makes the whole plan
better; only such improvements are kept, and the plan is built once at the end and checked against the
planner's own `rank` (the planner keeps its own plan otherwise).

Work is counted, not timed (`ExactSettings`): neighbourhoods per plan and branch-and-bound nodes per stage.
Neighbourhoods are picked in a fixed order (below) from sorted data, so the same snapshot gives the same plan.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from migctl.core.cluster import Node, Pod, Snapshot
from migctl.core.demand import need_mib, profiles_for
from migctl.core.exact.decode import Complete, NodeResult, decode, warm_start
from migctl.core.exact.model import build, class_key, in_scope
from migctl.core.exact.solve import AVAILABLE, solve
from migctl.core.geometry import geometry
from migctl.core.migparted import GpuConfig
from migctl.core.placement import signature, static_misfit
from migctl.core.plan import Assignment, GpuPlan, NodePlan, Plan, Summary, Unplaced
from migctl.core.settings import ExactSettings, PlannerSettings

Rank = Callable[[Plan, Snapshot], tuple[object, ...]]
# (-pods placed per tier, stranded MiB, GPUs changed, nodes changed) of a neighbourhood: smaller is better
Score = tuple[tuple[int, ...], int, int, int]
TRADED = (
    "the heuristic placed it, but the exact solver's plan gives its room to pods the objective ranks higher "
    "(a higher priority, or less memory stranded)"
)


@dataclass
class _State:
    """The plan being improved: where each pod is, the pods per node, and the targets of the GPUs that change."""

    snapshot: Snapshot
    base: Plan
    where: dict[str, Assignment]
    targets: dict[tuple[str, int], GpuConfig]
    nodes: dict[str, Node]
    prio: dict[str, int]
    on_node: dict[str, dict[str, Assignment]]
    fixed: tuple[Assignment, ...] = ()  # pods with several assignments: their nodes are locked, kept as they are

    @classmethod
    def of(cls, snapshot: Snapshot, base: Plan, pending: Sequence[Pod]) -> _State:
        targets = {(n.name, g.index): g.target for n in base.nodes for g in n.gpus if g.changed}
        units = Counter(a.pod for a in base.assignments)
        single = [a for a in base.assignments if units[a.pod] == 1]
        on_node: dict[str, dict[str, Assignment]] = {}
        for a in single:
            on_node.setdefault(a.node, {})[a.pod] = a
        return cls(
            snapshot,
            base,
            {a.pod: a for a in single},  # keyed by pod: a pod of several units would keep only its last
            targets,
            {n.name: n for n in snapshot.nodes},
            {p.key: p.priority for p in pending},
            on_node,
            tuple(a for a in base.assignments if units[a.pod] > 1),
        )

    def score(self, names: set[str], pods: Iterable[str], results: Sequence[NodeResult] | None = None) -> Score:
        """The objective restricted to `names` and `pods` (now, or with `results` on those nodes)."""
        if results is None:
            served = [a for n in names for a in self.on_node.get(n, {}).values()]
            changed = {(n, g.index): self.targets[(n, g.index)] for n in names for g in self.nodes[n].gpus
                       if (n, g.index) in self.targets}  # fmt: skip
        else:
            served = [a for r in results for a in r.assignments]
            changed = {(r.name, i): t for r in results for i, t in r.targets.items()}
        tiers = Counter(self.prio[a.pod] for a in served)
        levels = sorted({self.prio[p] for p in pods}, reverse=True)
        unusable = 0
        for (node, _), t in changed.items():
            model = self.nodes[node].model
            if model is not None and t.mig_enabled:
                unusable += geometry(model).unusable_mib(t.layout)
        stranded = sum(a.waste_mib for a in served) + unusable
        return (tuple(-tiers[lv] for lv in levels), stranded, len(changed), len({n for n, _ in changed}))

    def apply(self, names: set[str], pods: Iterable[str], results: Sequence[NodeResult]) -> None:
        for key in pods:
            a = self.where.pop(key, None)
            if a is not None:
                self.on_node[a.node].pop(key, None)
        for n in names:
            for g in self.nodes[n].gpus:
                self.targets.pop((n, g.index), None)
        for r in results:
            for a in r.assignments:
                self.where[a.pod] = a
                self.on_node.setdefault(a.node, {})[a.pod] = a
            for i, t in r.targets.items():
                self.targets[(r.name, i)] = t

    def plan(self) -> Plan:
        """The plan of this state: the base plan with its nodes' targets, assignments and reasons updated."""
        base = self.base
        node_plans = []
        unusable = changed_gpus = after_all = base_after_all = 0
        for np_ in base.nodes:
            node = self.nodes.get(np_.name)
            gpus = []
            for g in np_.gpus:
                base_after_all += g.unusable_mib_after
                target = self.targets.get((np_.name, g.index), g.current)
                after = g.unusable_mib_after
                if target != g.target:
                    model = node.model if node is not None else None
                    after = geometry(model).unusable_mib(target.layout) if model and target.mig_enabled else 0
                    g = GpuPlan(g.index, g.model, g.current, target, g.unusable_mib_before, after)  # noqa: PLW2901
                after_all += after
                if g.changed:
                    unusable += after
                    changed_gpus += 1
                gpus.append(g)
            node_plans.append(NodePlan(np_.name, tuple(gpus)))
        s = base.summary
        running_waste = s.stranded_mib_after - base_after_all - s.internal_waste_mib
        assignments = sorted(
            (*self.where.values(), *self.fixed),
            key=lambda a: (a.node, a.gpu if a.gpu is not None else -1, a.pod, a.profile),
        )
        waste = sum(a.waste_mib for a in assignments)
        reasons = {u.pod: u for u in base.unplaced}
        for key in {a.pod for a in base.assignments} - self.where.keys() - {a.pod for a in self.fixed}:
            reasons[key] = Unplaced(key, TRADED)
        for key in self.where:
            reasons.pop(key, None)
        summary = Summary(
            pending_pods=s.pending_pods,
            pods_placed=len(self.where),
            stranded_mib_before=s.stranded_mib_before,
            stranded_mib_after=after_all + running_waste + waste,
            internal_waste_mib=waste,
            unusable_mib=unusable,
            evictions=s.evictions,
            gpus_reconfigured=changed_gpus,
            nodes_reconfigured=sum(1 for n in node_plans if n.changed),
        )
        return Plan(
            summary=summary,
            nodes=tuple(node_plans),
            assignments=tuple(assignments),
            unplaced=tuple(sorted(reasons.values(), key=lambda u: u.pod)),
            evictions=base.evictions,
            warnings=base.warnings,
        )


def _solve_part(
    state: _State,
    names: set[str],
    pods: list[Pod],
    settings: PlannerSettings,
    nodes: int,
    complete: Complete,
    presolve: bool = True,
    upto: str = "",
) -> tuple[list[NodeResult], bool] | None:
    """An exact solution of `pods` on the nodes `names`, warm-started from the state (None without one), and
    whether its stages up to the one named `upto` (all when empty) are proven optimal."""
    model = build([state.nodes[n] for n in sorted(names)], pods, settings)
    served = [a for n in names for a in state.on_node.get(n, {}).values()]
    targets = {(n, g.index): state.targets[(n, g.index)] for n in names for g in state.nodes[n].gpus
               if (n, g.index) in state.targets}  # fmt: skip
    start = warm_start(model, served, targets)
    sol = solve(model, nodes=nodes, start=start, presolve=presolve)
    if sol is None:
        return None
    names_ = [s.name for s in sol.stages]
    upto_stages = sol.stages[: names_.index(upto) + 1] if upto in names_ else sol.stages
    return decode(model, sol.x, complete), all(s.proven for s in upto_stages)


def _eligible(snapshot: Snapshot, base: Plan, cfg: ExactSettings) -> bool:
    return cfg.enabled and AVAILABLE and not base.evictions


def whole(
    snapshot: Snapshot, settings: PlannerSettings, base: Plan, complete: Complete, rank: Rank
) -> tuple[Plan | None, bool]:
    """The exact plan of the whole instance when it is small enough: (plan, objectives 1-2 proven optimal). The plan
    is None when the instance is out of scope or the solver found nothing better than `base`."""
    cfg = settings.exact
    pending = list(snapshot.pending)
    gpus = sum(len(n.gpus) for n in snapshot.nodes if n.model is not None)
    if (
        not _eligible(snapshot, base, cfg)
        or settings.evictions != "none"
        or not pending
        or len(pending) > cfg.whole_max_pods
        or gpus > cfg.whole_max_gpus
        or not all(in_scope(p) for p in pending)
    ):
        return None, False
    state = _State.of(snapshot, base, pending)
    names = {n.name for n in snapshot.nodes if n.model is not None}
    got = _solve_part(state, names, pending, settings, cfg.whole_nodes, complete, upto="stranded MiB")
    if got is None:
        return None, False
    keys = [p.key for p in pending]
    if state.score(names, keys, got[0]) <= state.score(names, keys):
        state.apply(names, keys, got[0])
    result = state.plan()
    if rank(result, snapshot) > rank(base, snapshot):
        return None, False
    return result, got[1]


def refine(
    snapshot: Snapshot,
    settings: PlannerSettings,
    base: Plan,
    complete: Complete,
    rank: Rank,
    other: Plan | None = None,
) -> Plan:
    """Large-neighbourhood search with exact sub-solves from the better of the heuristic's plan and `other` (the
    whole-instance solve's plan when it was not proven); never ranks worse than either."""
    cfg = settings.exact
    if other is not None and rank(other, snapshot) < rank(base, snapshot):
        base = other
    pending = list(snapshot.pending)
    if not _eligible(snapshot, base, cfg) or cfg.neighbourhoods == 0 or not pending:
        return base
    state = _State.of(snapshot, base, pending)
    pods = {p.key: p for p in pending}
    # nodes serving a pod the model cannot place (whole GPUs, several instances) are left as they are
    locked = {a.node for a in base.assignments if a.pod in pods and not in_scope(pods[a.pod])}
    mig = sorted(n.name for n in snapshot.nodes if n.model is not None and n.name not in locked)
    if not mig:
        return base
    left = sorted((p for p in pending if in_scope(p) and p.key not in state.where), key=_order)
    reach = _reach(left, [state.nodes[n] for n in mig], cfg.reach_classes)
    near: dict[str, list[Pod]] = {}  # node -> left-out pods that could go there, in order
    for p in left:
        for n in reach.get(p.key, ()):
            near.setdefault(n, []).append(p)
    tried: set[frozenset[str]] = set()
    improved = False
    budget = cfg.neighbourhoods
    excess = _Excess(state, pods, mig)
    groups = _groups(state, mig, left, reach, cfg.group_nodes, excess.of)
    while budget > 0:
        group = next((g for g in groups if frozenset(g) not in tried), None)
        if group is None:
            break
        tried.add(frozenset(group))
        part = _part(state, group, near, pods, cfg.left_per_part)
        if not part:
            continue
        budget -= 1
        got = _solve_part(state, group, part, settings, cfg.neighbourhood_nodes, complete, presolve=False)
        keys = [p.key for p in part]
        if got is not None and state.score(group, keys, got[0]) < state.score(group, keys):
            state.apply(group, keys, got[0])
            improved = True
            left = [p for p in left if p.key not in state.where]
            tried = {t for t in tried if not t & group} | {frozenset(group)}
            excess.refresh(group)
            groups = _groups(state, mig, left, reach, cfg.group_nodes, excess.of)
    if not improved:
        return base
    result = state.plan()
    return result if rank(result, snapshot) < rank(base, snapshot) else base


def _part(state: _State, group: set[str], near: dict[str, list[Pod]], pods: dict[str, Pod], cap: int) -> list[Pod]:
    """The pods of a neighbourhood: those the plan puts on its nodes, and up to `cap` left-out pods that could go
    there, highest priority first, at most four of a kind (interchangeable pods are one choice)."""
    out = [pods[k] for n in sorted(group) for k in state.on_node.get(n, {}) if k in pods]
    seen: set[str] = set()
    kinds: Counter[tuple[object, ...]] = Counter()
    extra: list[Pod] = []
    for p in sorted((p for n in group for p in near.get(n, ())), key=_order):
        if p.key in seen or p.key in state.where:
            continue
        seen.add(p.key)
        kind = class_key(p)
        if kinds[kind] >= 4:
            continue
        kinds[kind] += 1
        extra.append(p)
        if len(extra) >= cap:
            break
    return out + extra


def _order(p: Pod) -> tuple[int, str]:
    return (-p.priority, p.key)


def _reach(left: list[Pod], nodes: list[Node], classes: int) -> dict[str, frozenset[str]]:
    """Nodes each left-out pod could use (static fit, CPU/memory/slots, a profile that serves it), for the first
    `classes` kinds of left-out pod (by priority); later kinds are not searched for."""
    out: dict[str, frozenset[str]] = {}
    memo: dict[tuple[object, ...], frozenset[str]] = {}
    static: dict[tuple[object, ...], list[Node]] = {}
    free = {n.name: n.free for n in nodes}
    for pod in left:
        key = (signature(pod), pod.gpu, pod.requests)
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= classes:
                continue
            sig = signature(pod)
            fits = static.get(sig)
            if fits is None:
                fits = static[sig] = [n for n in nodes if static_misfit(pod, n) is None]
            serves: dict[str, bool] = {}
            names = []
            for n in fits:
                assert n.model is not None
                ok = serves.get(n.model.id)
                if ok is None:
                    ok = serves[n.model.id] = bool(profiles_for(n.model, pod.gpu[0]))
                if ok and pod.requests.fits_in(free[n.name]):
                    names.append(n.name)
            hit = memo[key] = frozenset(names)
        if hit:
            out[pod.key] = hit
    return out


class _Excess:
    """Memory the plan strands per node above what its pods must strand there: each pod's waste above that of its
    smallest instance on the node's model, plus the unusable MiB of the node's changed GPUs. Kept per node and
    refreshed for the nodes a kept neighbourhood changed."""

    def __init__(self, state: _State, pods: dict[str, Pod], mig: list[str]) -> None:
        self.state, self.pods = state, pods
        self.least: dict[tuple[object, ...], int] = {}
        self.of = {n: self._node(n) for n in mig}

    def refresh(self, names: Iterable[str]) -> None:
        for n in names:
            self.of[n] = self._node(n)

    def _node(self, name: str) -> int:
        state = self.state
        node = state.nodes[name]
        model = node.model
        if model is None:
            return 0
        total = 0
        for a in state.on_node.get(name, {}).values():
            pod = self.pods[a.pod]
            if not in_scope(pod):
                continue
            d = pod.gpu[0]
            key = (model.id, d, pod.need_mib)
            floor = self.least.get(key)
            if floor is None:
                floor = self.least[key] = min(
                    (p.memory_mib - need_mib(d, p.memory_mib, pod.need_mib) for p in profiles_for(model, d)), default=0
                )
            total += a.waste_mib - floor
        geo = geometry(model)
        for g in node.gpus:
            t = state.targets.get((name, g.index))
            if t is not None and t.mig_enabled:
                total += geo.unusable_mib(t.layout)
        return total


def _groups(
    state: _State, mig: list[str], left: list[Pod], reach: dict[str, frozenset[str]], size: int, score: dict[str, int]
) -> Iterator[set[str]]:
    """Neighbourhoods, alternating two sources. For objective 1, around each left-out pod that some node could
    serve, highest priority first: each node of its reach (most stranded memory first) with the others of its
    reach that strand most. For objective 2, the nodes that strand the most memory, each with those of its GPU
    model that strand most. At most eight groups per seed."""
    by_score = sorted(mig, key=lambda n: (-score[n], n))

    def for_pods() -> Iterator[set[str]]:
        for pod in left:
            r = reach.get(pod.key)
            if not r:
                continue
            around = sorted(r, key=lambda n: (-score.get(n, 0), n))
            for seed in around[:8]:
                yield from _with(seed, [n for n in around if n != seed], size)

    def for_waste() -> Iterator[set[str]]:
        kinds: dict[str, list[str]] = {}
        for n in by_score:
            model = state.nodes[n].model
            kinds.setdefault(model.id if model else "", []).append(n)
        for n in by_score:
            if score[n] == 0:
                return
            model = state.nodes[n].model
            yield from _with(n, [m for m in kinds[model.id if model else ""] if m != n], size)

    sources = [for_pods(), for_waste()]
    while sources:
        for src in list(sources):
            group = next(src, None)
            if group is None:
                sources.remove(src)
            else:
                yield group


def _with(seed: str, partners: list[str], size: int) -> Iterator[set[str]]:
    if size <= 1 or not partners:
        yield {seed}
        return
    for i in range(min(8, max(1, len(partners) - size + 2))):
        yield {seed, *partners[i : i + size - 1]}
