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
from migctl.core.model.plan import Assignment, GpuPlan, NodePlan, Plan, Summary, Unplaced

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
