"""The planner's result: target layouts per GPU, which pod goes where, evictions, and the figures behind it.

`Plan.to_dict()` is the stable JSON schema documented in docs/plan-format.md (`migctl plan --output json`).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from migctl.core.model.gpu_config import GpuConfig, NodeConfig, config_name

PLAN_FORMAT_VERSION = "v1"


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

    def objective(self) -> tuple[int, int]:
        """(pods placed, stranded MiB of the objective): what the exact reference compares."""
        return self.summary.pods_placed, self.summary.internal_waste_mib + self.summary.unusable_mib

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
