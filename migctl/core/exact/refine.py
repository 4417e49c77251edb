"""Exact solves inside the planner: the whole instance when it is small, else a large-neighbourhood search.

`whole` solves every pending pod on every node exactly and returns the plan only when every stage of the
objective is proven optimal (the planner then skips its heuristic passes). `refine` starts from the heuristic's
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
from migctl.core.demand import profiles_for
from migctl.core.exact.decode import Complete, NodeResult, decode, warm_start
from migctl.core.exact.model import build, in_scope
from migctl.core.exact.solve import AVAILABLE, solve
from migctl.core.migparted import GpuConfig
from migctl.core.placement import signature, static_misfit
from migctl.core.plan import Assignment, GpuPlan, NodePlan, Plan, Summary, Unplaced
from migctl.core.settings import ExactSettings, PlannerSettings

Rank = Callable[[Plan, Snapshot], tuple[object, ...]]
TRADED = (
    "the heuristic placed it, but the exact solver's plan gives its room to pods the objective ranks higher "
    "(a higher priority, or less memory stranded)"
)


@dataclass
class _State:
    """The plan being improved: where each pod is, and the targets of the GPUs that change."""

    snapshot: Snapshot
    base: Plan
    where: dict[str, Assignment]
    targets: dict[tuple[str, int], GpuConfig]
    nodes: dict[str, Node]
    prio: dict[str, int]

    @classmethod
    def of(cls, snapshot: Snapshot, base: Plan) -> _State:
        targets = {(n.name, g.index): g.target for n in base.nodes for g in n.gpus if g.changed}
        return cls(
            snapshot,
            base,
            {a.pod: a for a in base.assignments},
            targets,
            {n.name: n for n in snapshot.nodes},
            {p.key: p.priority for p in snapshot.pending},
        )

    def score(self, names: set[str], pods: Iterable[str], results: Sequence[NodeResult] | None = None) -> tuple:
        """The objective restricted to `names` and `pods` (now, or with `results` on those nodes)."""
        if results is None:
            served = [a for a in self.where.values() if a.node in names]
            changed = {k: t for k, t in self.targets.items() if k[0] in names}
        else:
            served = [a for r in results for a in r.assignments]
            changed = {(r.name, i): t for r in results for i, t in r.targets.items()}
        tiers = Counter(self.prio[a.pod] for a in served)
        levels = sorted({self.prio[p] for p in pods}, reverse=True)
        unusable = 0
        for (node, _), t in changed.items():
            model = self.nodes[node].model
            if model is not None and t.mig_enabled:
                from migctl.core.geometry import geometry

                unusable += geometry(model).unusable_mib(t.layout)
        stranded = sum(a.waste_mib for a in served) + unusable
        return (tuple(-tiers[lv] for lv in levels), stranded, len(changed), len({n for n, _ in changed}))

    def apply(self, names: set[str], pods: Iterable[str], results: Sequence[NodeResult]) -> None:
        for key in pods:
            self.where.pop(key, None)
        for k in [k for k in self.targets if k[0] in names]:
            del self.targets[k]
        for r in results:
            for a in r.assignments:
                self.where[a.pod] = a
            for i, t in r.targets.items():
                self.targets[(r.name, i)] = t

    def plan(self) -> Plan:
        """The plan of this state: the base plan with its nodes' targets, assignments and reasons updated."""
        from migctl.core.geometry import geometry

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
                    g = GpuPlan(g.index, g.model, g.current, target, g.unusable_mib_before, after)
                after_all += after
                if g.changed:
                    unusable += after
                    changed_gpus += 1
                gpus.append(g)
            node_plans.append(NodePlan(np_.name, tuple(gpus)))
        s = base.summary
        running_waste = s.stranded_mib_after - base_after_all - s.internal_waste_mib
        assignments = sorted(
            self.where.values(), key=lambda a: (a.node, a.gpu if a.gpu is not None else -1, a.pod, a.profile)
        )
        waste = sum(a.waste_mib for a in assignments)
        reasons = {u.pod: u for u in base.unplaced}
        for key in {a.pod for a in base.assignments} - self.where.keys():
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
    state: _State, names: set[str], pods: list[Pod], settings: PlannerSettings, nodes: int, complete: Complete
) -> tuple[list[NodeResult], bool] | None:
    """An exact solution of `pods` on the nodes `names`, warm-started from the state (None without one)."""
    model = build([state.nodes[n] for n in sorted(names)], pods, settings)
    keys = {p.key for p in pods}
    start = warm_start(
        model, [a for a in state.where.values() if a.pod in keys], {k: t for k, t in state.targets.items() if k[0] in names}
    )
    sol = solve(model, nodes=nodes, start=start)
    if sol is None:
        return None
    return decode(model, sol.x, complete), sol.proven


def _eligible(snapshot: Snapshot, base: Plan, cfg: ExactSettings) -> bool:
    return cfg.enabled and AVAILABLE and not base.evictions


def whole(snapshot: Snapshot, settings: PlannerSettings, base: Plan, complete: Complete, rank: Rank) -> Plan | None:
    """The exact plan of the whole instance when it is small enough and every stage is proven optimal."""
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
        return None
    state = _State.of(snapshot, base)
    names = {n.name for n in snapshot.nodes if n.model is not None}
    got = _solve_part(state, names, pending, settings, cfg.whole_nodes, complete)
    if got is None or not got[1]:
        return None
    keys = [p.key for p in pending]
    if state.score(names, keys, got[0]) <= state.score(names, keys):
        state.apply(names, keys, got[0])
    result = state.plan()
    return result if rank(result, snapshot) <= rank(base, snapshot) else None


def refine(snapshot: Snapshot, settings: PlannerSettings, base: Plan, complete: Complete, rank: Rank) -> Plan:
    """Large-neighbourhood search with exact sub-solves from the heuristic's plan; never ranks worse."""
    cfg = settings.exact
    if not _eligible(snapshot, base, cfg) or cfg.neighbourhoods == 0 or not snapshot.pending:
        return base
    state = _State.of(snapshot, base)
    pods = {p.key: p for p in snapshot.pending}
    # nodes serving a pod the model cannot place (whole GPUs, several instances) are left as they are
    locked = {a.node for a in base.assignments if a.pod in pods and not in_scope(pods[a.pod])}
    mig = sorted(n.name for n in snapshot.nodes if n.model is not None and n.name not in locked)
    if not mig:
        return base
    left = sorted((p for p in snapshot.pending if in_scope(p) and p.key not in state.where), key=_order)
    reach = _reach(left, [state.nodes[n] for n in mig], cfg.reach_classes)
    tried: set[frozenset[str]] = set()
    improved = False
    budget = cfg.neighbourhoods
    groups = _groups(state, mig, left, reach, cfg.group_nodes)
    while budget > 0:
        group = next((g for g in groups if frozenset(g) not in tried), None)
        if group is None:
            break
        tried.add(frozenset(group))
        part = [p for p in snapshot.pending if _in_part(p, group, state, reach)]
        if not part:
            continue
        budget -= 1
        got = _solve_part(state, group, part, settings, cfg.neighbourhood_nodes, complete)
        keys = [p.key for p in part]
        if got is not None and state.score(group, keys, got[0]) < state.score(group, keys):
            state.apply(group, keys, got[0])
            improved = True
            left = [p for p in left if p.key not in state.where]
            tried = {t for t in tried if not t & group} | {frozenset(group)}
            groups = _groups(state, mig, left, reach, cfg.group_nodes)
    if not improved:
        return base
    result = state.plan()
    return result if rank(result, snapshot) < rank(base, snapshot) else base


def _order(p: Pod) -> tuple[int, str]:
    return (-p.priority, p.key)


def _reach(left: list[Pod], nodes: list[Node], classes: int) -> dict[str, frozenset[str]]:
    """Nodes each left-out pod could use (static fit, CPU/memory/slots, a profile that serves it), for the first
    `classes` kinds of left-out pod (by priority); later kinds are not searched for."""
    out: dict[str, frozenset[str]] = {}
    memo: dict[tuple[object, ...], frozenset[str]] = {}
    for pod in left:
        key = (signature(pod), pod.gpu, pod.requests)
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= classes:
                continue
            hit = memo[key] = frozenset(
                n.name
                for n in nodes
                if n.model is not None
                and static_misfit(pod, n) is None
                and pod.requests.fits_in(n.free)
                and profiles_for(n.model, pod.gpu[0])
            )
        if hit:
            out[pod.key] = hit
    return out


def _excess(state: _State, mig: list[str]) -> dict[str, int]:
    """Memory the plan strands per node (internal waste of its pods, unusable MiB of its changed GPUs)."""
    from migctl.core.geometry import geometry

    out: Counter[str] = Counter({n: 0 for n in mig})
    for a in state.where.values():
        out[a.node] += a.waste_mib
    for (name, _), t in state.targets.items():
        model = state.nodes[name].model
        if model is not None and t.mig_enabled:
            out[name] += geometry(model).unusable_mib(t.layout)
    return out


def _groups(
    state: _State, mig: list[str], left: list[Pod], reach: dict[str, frozenset[str]], size: int
) -> Iterator[set[str]]:
    """Neighbourhoods in order: first around each left-out pod that some node could serve, highest priority
    first (each node of its reach, most stranded memory first, with the others of its reach that strand most),
    then the nodes that strand the most memory, each with those of its GPU model that strand most. At most
    eight groups per seed."""
    score = _excess(state, mig)
    by_score = sorted(mig, key=lambda n: (-score[n], n))
    for pod in left:
        r = reach.get(pod.key)
        if not r:
            continue
        around = sorted(r, key=lambda n: (-score.get(n, 0), n))
        for seed in around[:8]:
            yield from _with(seed, [n for n in around if n != seed], size)
    kinds: dict[str, list[str]] = {}
    for n in by_score:
        model = state.nodes[n].model
        kinds.setdefault(model.id if model else "", []).append(n)
    for n in by_score:
        if score[n] == 0:
            return
        model = state.nodes[n].model
        yield from _with(n, [m for m in kinds[model.id if model else ""] if m != n], size)


def _with(seed: str, partners: list[str], size: int) -> Iterator[set[str]]:
    if size <= 1 or not partners:
        yield {seed}
        return
    for i in range(min(8, max(1, len(partners) - size + 2))):
        yield {seed, *partners[i : i + size - 1]}


def _in_part(pod: Pod, group: set[str], state: _State, reach: dict[str, frozenset[str]]) -> bool:
    """Whether a pending pod belongs to the neighbourhood: placed on one of its nodes, or left out and able to
    go there."""
    if not in_scope(pod):
        return False
    a = state.where.get(pod.key)
    if a is not None:
        return a.node in group
    r = reach.get(pod.key)
    return r is not None and not r.isdisjoint(group)
