"""Policy names to policy objects and their starting cluster (static layouts are set before the first pod)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from migctl.config import ControllerSettings
from migctl.core.catalog import GpuModel
from migctl.core.settings import PlannerSettings
from migctl.sim.baselines import Greedy, Hami, Nos
from migctl.sim.controller import Controller
from migctl.sim.fgd_mig import FgdMig
from migctl.sim.mig import Policy
from migctl.sim.names import ANALYSIS, MIG_POLICIES
from migctl.sim.shapes import Shapes, all_1g, balanced, best_static_mix, trace_mix
from migctl.sim.state import Cluster
from migctl.sim.workloads import Job


def make_policy(
    name: str,
    jobs: Sequence[Job],
    node_gpus: Sequence[int],
    model: GpuModel,
    planner: PlannerSettings | None = None,
    controller: ControllerSettings | None = None,
    seed: int = 0,
) -> tuple[Cluster, Policy]:
    """The cluster a policy starts from (MIG on, no instances, unless static) and the policy."""
    shapes = Shapes(model)
    if name == "static-all-1g":
        return Cluster(node_gpus, model, all_1g(shapes)), Greedy(name)
    if name == "static-balanced":
        return Cluster(node_gpus, model, balanced(shapes)), Greedy(name)
    cl = Cluster(node_gpus, model)
    if name == "static-best-mix":
        for g, lay in zip(cl.gpus, best_static_mix(shapes, jobs, len(cl.gpus)), strict=True):
            g.layout = Counter(dict(lay))
        return cl, Greedy(name)
    if name == "migctl":
        return cl, Controller(planner, controller)
    if name == "migctl-oracle-start":
        for g, lay in zip(cl.gpus, best_static_mix(shapes, jobs, len(cl.gpus)), strict=True):
            g.layout = Counter(dict(lay))
        return cl, Controller(planner, controller)
    if name in ("first-fit", "best-fit"):
        return cl, Greedy(name)
    if name == "nos":
        return cl, Nos(seed)
    if name == "hami":
        return cl, Hami(cl)
    if name == "fgd-mig":
        return cl, FgdMig(trace_mix(shapes, jobs))
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join((*MIG_POLICIES, *ANALYSIS))}")
