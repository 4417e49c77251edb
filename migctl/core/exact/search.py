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

from collections.abc import Callable

from migctl.core.exact.decode import Complete, NodeResult, decode, warm_start
from migctl.core.exact.model import build, in_scope
from migctl.core.exact.neighbourhoods import Excess, by_priority, groups_of, part_pods, reach_of
from migctl.core.exact.solve import AVAILABLE, solve
from migctl.core.exact.state import _State
from migctl.core.inplace.reach import around
from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import ExactSettings, PlannerSettings

Rank = Callable[[Plan, Snapshot], tuple[object, ...]]


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
    """Whether the solver may run. Not where the in-place path could re-cut a busy GPU: the integer model holds
    busy GPUs fixed, so its optimum there is not the planner's, and a proof over it would stop the passes early."""
    return cfg.enabled and AVAILABLE and not base.evictions and not _in_place(snapshot)


def _in_place(snapshot: Snapshot) -> bool:
    return any(around(n, g) is not None for n in snapshot.nodes if n.in_place for g in n.gpus)


def whole(
    snapshot: Snapshot, settings: PlannerSettings, base: Plan, complete: Complete, rank: Rank
) -> tuple[Plan | None, bool]:
    """The exact plan of the whole instance when it is small enough: (plan, objectives 1-2 proven optimal). The plan
    is None when the instance is out of scope or the solver found nothing better than `base`."""
    cfg = settings.exact
    pending = list(snapshot.pending)
    if (
        not _eligible(snapshot, base, cfg)
        or settings.evictions != "none"
        or not pending
        or len(pending) > cfg.whole_max_pods
        or snapshot.mig_gpus > cfg.whole_max_gpus
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
    if snapshot.mig_gpus > cfg.refine_max_gpus:
        return base  # a few small sub-problems in a cluster this large: not worth reading the whole plan for
    state = _State.of(snapshot, base, pending)
    pods = {p.key: p for p in pending}
    # nodes serving a pod the model cannot place (whole GPUs, several instances) are left as they are
    locked = {a.node for a in base.assignments if a.pod in pods and not in_scope(pods[a.pod])}
    mig = sorted(n.name for n in snapshot.nodes if n.model is not None and n.name not in locked)
    if not mig:
        return base
    left = sorted((p for p in pending if in_scope(p) and p.key not in state.where), key=by_priority)
    reach = reach_of(left, [state.nodes[n] for n in mig], cfg.reach_classes)
    near: dict[str, list[Pod]] = {}  # node -> left-out pods that could go there, in order
    for p in left:
        for n in reach.get(p.key, ()):
            near.setdefault(n, []).append(p)
    tried: set[frozenset[str]] = set()
    improved = False
    budget = cfg.neighbourhoods
    excess = Excess(state, pods, mig)
    groups = groups_of(state, mig, left, reach, cfg.group_nodes, excess.of)
    while budget > 0:
        group = next((g for g in groups if frozenset(g) not in tried), None)
        if group is None:
            break
        tried.add(frozenset(group))
        part = part_pods(state, group, near, pods, cfg.left_per_part)
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
            groups = groups_of(state, mig, left, reach, cfg.group_nodes, excess.of)
    if not improved:
        return base
    result = state.plan()
    return result if rank(result, snapshot) < rank(base, snapshot) else base
