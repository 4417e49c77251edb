"""The plan an exact solve improves: where each pod is, the pods per node, the targets of the GPUs that change,
and the score of a neighbourhood (the objective restricted to its nodes and pods)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migctl.core.exact.decode import NodeResult
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import Node, Pod, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Assignment, GpuPlan, NodePlan, ObjectiveKey, Plan, Unplaced, objective_key

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

    def score(self, names: set[str], pods: Iterable[str], results: Sequence[NodeResult] | None = None) -> ObjectiveKey:
        """The objective's key restricted to `names` and `pods` (now, or with `results` on those nodes)."""
        if results is None:
            served = [a for n in names for a in self.on_node.get(n, {}).values()]
            changed = {(n, g.index): self.targets[(n, g.index)] for n in names for g in self.nodes[n].gpus
                       if (n, g.index) in self.targets}  # fmt: skip
        else:
            served = [a for r in results for a in r.assignments]
            changed = {(r.name, i): t for r in results for i, t in r.targets.items()}
        unusable = 0
        for (node, _), t in changed.items():
            model = self.nodes[node].model
            if model is not None and t.mig_enabled:
                unusable += geometry(model).unusable_mib(t.layout)
        stranded = sum(a.waste_mib for a in served) + unusable
        placed = (self.prio[a.pod] for a in served)
        # no evictions: the exact solver only improves plans that evict nothing (`search._eligible`)
        return objective_key(
            placed, {self.prio[p] for p in pods}, stranded, 0, len(changed), len({n for n, _ in changed})
        )

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
        for np_ in base.nodes:
            node = self.nodes.get(np_.name)
            gpus = []
            for g in np_.gpus:
                target = self.targets.get((np_.name, g.index), g.current)
                if target != g.target:
                    model = node.model if node is not None else None
                    after = geometry(model).unusable_mib(target.layout) if model and target.mig_enabled else 0
                    g = GpuPlan(g.index, g.model, g.current, target, g.unusable_mib_before, after)  # noqa: PLW2901
                gpus.append(g)
            node_plans.append(NodePlan(np_.name, tuple(gpus)))
        reasons = {u.pod: u for u in base.unplaced}
        for key in {a.pod for a in base.assignments} - self.where.keys() - {a.pod for a in self.fixed}:
            reasons[key] = Unplaced(key, TRADED)
        for key in self.where:
            reasons.pop(key, None)
        unplaced = tuple(sorted(reasons.values(), key=lambda u: u.pod))
        return base.revised(tuple(node_plans), (*self.where.values(), *self.fixed), unplaced)
