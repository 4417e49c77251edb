"""The `Plan` a pass returns: per-GPU targets (best completions of what each reshaped GPU serves), the
assignments, the reasons for pods left out, and the summary the objective ranks."""

from __future__ import annotations

from migctl.core.hardware.geometry import canonical
from migctl.core.model.cluster import Pod
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import GpuPlan, NodePlan, Plan, Summary, Unplaced, assignment_order
from migctl.core.planner.explain import Explain


class Results(Explain):
    """A pass's state as a `Plan`."""

    def _result(self, pending: list[Pod], unplaced: list[Pod]) -> Plan:
        node_plans: list[NodePlan] = []
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
                        done = canonical(slot.assigned)
                        where = slot.around
                        best = comp.best(done) if where is None else comp.best_around(where, done)
                        assert best is not None, "the planner only assigns layouts that exist"
                        target = GpuConfig.mig(best[0])
                    else:
                        target = GpuConfig.disabled()
                before = comp.geo.unusable_mib(current.layout) if current.mig_enabled else 0
                after = comp.geo.unusable_mib(target.layout) if target.mig_enabled else 0
                plans.append(GpuPlan(gpu.index, node.model.id, current, target, before, after))
            node_plans.append(NodePlan(node.name, tuple(plans)))
        placed = {a.pod for a in self.assignments}
        reasons = self._explain([p for p in unplaced if p.key not in placed])
        reasons += [Unplaced(k, r) for k, r in self.snapshot.rejected]
        assignments = tuple(sorted(self.assignments, key=assignment_order))
        summary = Summary.of(
            node_plans,
            assignments,
            pending_pods=len(pending) + len(self.snapshot.rejected),
            running_waste_mib=self._running_waste(),
            evictions=len(self.evictions),
        )
        return Plan(
            summary=summary,
            nodes=tuple(node_plans),
            assignments=assignments,
            unplaced=tuple(sorted(reasons, key=lambda u: u.pod)),
            evictions=tuple(self.evictions),
            warnings=self.snapshot.warnings,
        )

    def _running_waste(self) -> int:
        total = 0
        nodes = {ns.node.name: ns.node for ns in reversed(self.nodes)}  # the first of a name, as the nodes list it
        for pod in self.snapshot.pods:
            if pod.node is None or pod.need_mib is None:
                continue
            node = nodes.get(pod.node)
            if node is None or node.model is None:
                continue
            for d in pod.gpu:
                if d.kind == "profile" and node.model.has_profile(d.profile):
                    mib = node.model.profile(d.profile).memory_mib
                    total += max(0, mib - min(pod.need_mib, mib)) * d.count
        return total
