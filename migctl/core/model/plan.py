"""The planner's result: target layouts per GPU, which pod goes where, evictions, and the figures behind it.

`Plan.to_dict()` is the stable JSON schema documented in docs/plan-format.md (`migctl plan --output json`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from migctl.core.model.gpu_config import GpuConfig, NodeConfig, config_name

PLAN_FORMAT_VERSION = "v1"
# The objective's sort key, smaller is better (`migctl/core/objective.py` states the objective): minus the pods
# placed per priority tier (highest tier first), stranded MiB, evictions, GPUs reconfigured, nodes reconfigured.
ObjectiveKey = tuple[tuple[int, ...], int, int, int, int]


def objective_key(
    placed: Iterable[int], tiers: Iterable[int], stranded_mib: int, evictions: int, gpus: int, nodes: int
) -> ObjectiveKey:
    """The objective's key of a plan or of part of one (the exact solver's neighbourhoods). `placed`: the priority
    of each pod placed; `tiers`: the priorities compared (a placed pod of another priority does not count). It
    lives with `Plan`, below the objective's module, so that every layer that ranks plans reaches the one key."""
    count = Counter(placed)
    return (tuple(-count[t] for t in sorted(set(tiers), reverse=True)), stranded_mib, evictions, gpus, nodes)


@dataclass(frozen=True)
class Assignment:
    pod: str  # namespace/name
    node: str
    gpu: int | None  # None: an existing free instance on a node whose per-GPU usage is unknown
    profile: str  # MIG profile, or "gpu" for a whole GPU
    instance_mib: int
    need_mib: int

    @property
    def waste_mib(self) -> int:
        return max(0, self.instance_mib - self.need_mib)


def assignment_order(a: Assignment) -> tuple[str, int, str, str]:
    """The order of a plan's assignments: node, GPU (an unknown one first), pod, profile."""
    return (a.node, a.gpu if a.gpu is not None else -1, a.pod, a.profile)


@dataclass(frozen=True)
class Eviction:
    pod: str
    node: str
    priority: int
    for_pod: str  # the higher-priority pod that needs the GPU


@dataclass(frozen=True)
class Unplaced:
    pod: str
    reason: str


@dataclass(frozen=True)
class GpuPlan:
    index: int
    model: str
    current: GpuConfig
    target: GpuConfig
    unusable_mib_before: int
    unusable_mib_after: int

    @cached_property
    def changed(self) -> bool:
        """Read for every GPU by the result, the forecast term and the writers: compared once."""
        return self.current != self.target


@dataclass(frozen=True)
class NodePlan:
    name: str
    gpus: tuple[GpuPlan, ...]

    @property
    def changed(self) -> bool:
        return any(g.changed for g in self.gpus)

    @property
    def target(self) -> NodeConfig:
        return {g.index: g.target for g in self.gpus}

    @property
    def config_name(self) -> str | None:
        """The deterministic mig-parted config name of the target layout (None when nothing changes)."""
        return config_name(self.target) if self.changed else None


@dataclass(frozen=True)
class Summary:
    pending_pods: int
    pods_placed: int
    stranded_mib_before: int
    stranded_mib_after: int
    internal_waste_mib: int
    unusable_mib: int
    evictions: int
    gpus_reconfigured: int
    nodes_reconfigured: int

    @classmethod
    def of(
        cls,
        nodes: Sequence[NodePlan],
        assignments: Sequence[Assignment],
        *,
        pending_pods: int,
        running_waste_mib: int,
        evictions: int,
    ) -> Summary:
        """The figures of a plan with these node plans and assignments (docs/plan-format.md), the one formula for
        every step that makes or revises a plan. `running_waste_mib`: the known waste of running pods, counted in
        stranded MiB before and after alike."""
        gpus = [g for n in nodes for g in n.gpus]
        changed = [g for g in gpus if g.changed]
        waste = sum(a.waste_mib for a in assignments)
        return cls(
            pending_pods=pending_pods,
            pods_placed=len({a.pod for a in assignments}),
            stranded_mib_before=sum(g.unusable_mib_before for g in gpus) + running_waste_mib,
            stranded_mib_after=sum(g.unusable_mib_after for g in gpus) + running_waste_mib + waste,
            internal_waste_mib=waste,
            unusable_mib=sum(g.unusable_mib_after for g in changed),
            evictions=evictions,
            gpus_reconfigured=len(changed),
            nodes_reconfigured=sum(1 for n in nodes if n.changed),
        )


@dataclass(frozen=True)
class Plan:
    summary: Summary
    nodes: tuple[NodePlan, ...]
    assignments: tuple[Assignment, ...]
    unplaced: tuple[Unplaced, ...]
    evictions: tuple[Eviction, ...]
    warnings: tuple[str, ...] = ()
    work_units: int = 0  # what planning spent (core/budget.py)
    budget_exhausted: bool = False  # planner.work_budget cut planning short: the best plan so far

    def key(self, priority: Mapping[str, int]) -> ObjectiveKey:
        """The objective's key of this plan (`objective_key`); `priority`: each pod's, every one of them a tier
        (a placed pod missing from it counts as priority 0)."""
        placed = [priority.get(pod, 0) for pod in {a.pod for a in self.assignments}]
        s = self.summary
        stranded = s.internal_waste_mib + s.unusable_mib
        tiers = {*priority.values(), *placed}
        return objective_key(placed, tiers, stranded, s.evictions, s.gpus_reconfigured, s.nodes_reconfigured)

    def objective(self) -> tuple[int, int]:
        """(pods placed, stranded MiB): the first two terms of `key` with every pod in one tier, the pair the
        benchmarks report and bench/exact.py's reference compares."""
        tiers, stranded, *_ = self.key({})
        return -sum(tiers), stranded

    @property
    def running_waste_mib(self) -> int:
        """The known waste of running pods in this plan's stranded MiB (what `Summary.of` was given)."""
        after = sum(g.unusable_mib_after for n in self.nodes for g in n.gpus)
        return self.summary.stranded_mib_after - self.summary.internal_waste_mib - after

    def revised(
        self,
        nodes: tuple[NodePlan, ...],
        assignments: Iterable[Assignment],
        unplaced: tuple[Unplaced, ...] | None = None,
    ) -> Plan:
        """This plan with other node plans and assignments (and reasons), its summary recomputed by `Summary.of`:
        the exact solver's and the forecast term's revisions keep its pending pods, running pods and evictions."""
        ordered = tuple(sorted(assignments, key=assignment_order))
        s = self.summary
        summary = Summary.of(
            nodes, ordered, pending_pods=s.pending_pods, running_waste_mib=self.running_waste_mib, evictions=s.evictions
        )
        return replace(
            self,
            summary=summary,
            nodes=nodes,
            assignments=ordered,
            unplaced=self.unplaced if unplaced is None else unplaced,
        )

    def to_dict(self) -> dict[str, Any]:
        s = self.summary
        return {
            "version": PLAN_FORMAT_VERSION,
            "summary": {
                "pending_pods": s.pending_pods,
                "pods_placed": s.pods_placed,
                "stranded_mib_before": s.stranded_mib_before,
                "stranded_mib_after": s.stranded_mib_after,
                "internal_waste_mib": s.internal_waste_mib,
                "unusable_mib": s.unusable_mib,
                "evictions": s.evictions,
                "gpus_reconfigured": s.gpus_reconfigured,
                "nodes_reconfigured": s.nodes_reconfigured,
            },
            "nodes": [
                {
                    "name": n.name,
                    "changed": n.changed,
                    "config_name": n.config_name,
                    "gpus": [
                        {
                            "index": g.index,
                            "model": g.model,
                            "current": _config_dict(g.current),
                            "target": _config_dict(g.target),
                            "mig_enabled": {"current": g.current.mig_enabled, "target": g.target.mig_enabled},
                            "unusable_mib": {"current": g.unusable_mib_before, "target": g.unusable_mib_after},
                            "changed": g.changed,
                        }
                        for g in n.gpus
                    ],
                }
                for n in self.nodes
            ],
            "assignments": [
                {
                    "pod": a.pod,
                    "node": a.node,
                    "gpu": a.gpu,
                    "profile": a.profile,
                    "instance_mib": a.instance_mib,
                    "need_mib": a.need_mib,
                }
                for a in self.assignments
            ],
            "evictions": [
                {"pod": e.pod, "node": e.node, "priority": e.priority, "for_pod": e.for_pod} for e in self.evictions
            ],
            "unplaced": [{"pod": u.pod, "reason": u.reason} for u in self.unplaced],
            "warnings": list(self.warnings),
            "budget": {"work_units": self.work_units, "exhausted": self.budget_exhausted},
        }


def _config_dict(cfg: GpuConfig) -> dict[str, int]:
    return dict(cfg.layout) if cfg.mig_enabled else {}
