"""Exact reference for objectives 1-2 of the planner: the planner's own integer program
(`migctl.core.exact.model`, one model for the runtime and the benchmark), solved to proven optimality by HiGHS
(`highspy`) with a time limit instead of the runtime's work budget.

Scope: snapshots whose pending pods each ask for ONE unit of GPU demand of kind `profile` or `vram` (a single
`GpuDemand` with count 1). `supported()` says why a snapshot is out of scope. The model's docstring states the
semantics; in short:

* A GPU of a node whose per-GPU usage is known either KEEPS its current layout or, when reconfigurable, takes
  any maximal valid layout and pays its unusable MiB; a node with unknown per-GPU usage is a pool of
  `node.mig_free` instances.
* Objective 1 (lexicographic over priority tiers, highest first): one MILP per tier, the optimum of every higher
  tier fixed as a constraint. Objective 2: with every tier fixed, minimise internal waste + unusable MiB of changed
  GPUs. The runtime's last stage (disruption: GPUs reconfigured, nodes touched) is left out: it is not compared,
  and proving it costs more than the rest.

`status == "optimal"` means every stage proven optimal (integer objectives, absolute gap below 1).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from migctl.core.exact.model import build, in_scope, maximal_layouts, node_models
from migctl.core.exact.solve import solve as solve_model
from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.model.cluster import Resources, Snapshot
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.placement import static_misfit
from migctl.core.model.settings import PlannerSettings

__all__ = ["ExactResult", "maximal_layouts", "solve", "supported", "verify"]


@dataclass(frozen=True)
class ExactResult:
    """The exact optimum of objectives 1-2 (or the best found, when `status` is not `optimal`)."""

    status: str  # optimal | limit (time limit hit: not proven) | unsupported | infeasible
    placed_by_priority: tuple[tuple[int, int], ...] = ()  # (priority, pods placed), highest priority first
    internal_waste_mib: int = 0
    unusable_mib: int = 0
    gpus_changed: int = 0
    seconds: float = 0.0
    stage_seconds: tuple[float, ...] = ()
    variables: int = 0
    constraints: int = 0
    reason: str = ""
    assignments: tuple[tuple[str, str, str], ...] = ()  # (pod key, node, profile) of an optimal solution
    new_layouts: tuple[tuple[str, int, CanonicalLayout, int], ...] = ()  # (node, GPU class, layout, GPUs)

    @property
    def pods_placed(self) -> int:
        return sum(n for _, n in self.placed_by_priority)

    @property
    def stranded_mib(self) -> int:
        return self.internal_waste_mib + self.unusable_mib

    def objective(self) -> tuple[int, int]:
        """(pods placed, stranded MiB): the same pair as `Plan.objective()`."""
        return self.pods_placed, self.stranded_mib

    @property
    def optimal(self) -> bool:
        return self.status == "optimal"


def supported(snapshot: Snapshot) -> str | None:
    """Why the exact reference cannot model `snapshot` (None when it can)."""
    for pod in snapshot.pending:
        if not in_scope(pod):
            return f"pod {pod.key}: only single-unit profile/vram demand is modelled (has {pod.gpu})"
    return None


def solve(
    snapshot: Snapshot,
    settings: PlannerSettings | None = None,
    time_limit: float = 60.0,
) -> ExactResult:
    """Solve objectives 1-2 exactly (see the module docstring); `time_limit` bounds all MILP stages together."""
    settings = settings or PlannerSettings()
    start = time.perf_counter()
    why = supported(snapshot)
    if why:
        return ExactResult("unsupported", reason=why)
    model = build(snapshot.nodes, list(snapshot.pending), settings)
    tiers = sorted({pc.pod.priority for pc in model.classes}, reverse=True)
    model.stages = model.stages[: len(tiers) + 1]  # objectives 1-2; disruption is not compared
    sol = solve_model(model, nodes=2**31 - 1, time_limit=time_limit, stop_unproven=True)
    seconds = time.perf_counter() - start
    if sol is None:
        return ExactResult("infeasible", seconds=seconds, variables=model.size, constraints=len(model.rows))
    placed = tuple((t, -s.value) for t, s in zip(tiers, sol.stages, strict=False) if s.proven)
    objective_stages = sol.stages
    if len(objective_stages) < len(tiers) + 1 or not all(s.proven for s in objective_stages):
        at = len([s for s in objective_stages if s.proven])
        where = f"stage 1, priority {tiers[at]}" if at < len(tiers) else "stage 2"
        return ExactResult(
            "limit", placed, seconds=seconds, variables=model.size, constraints=len(model.rows), reason=where
        )
    x = sol.x
    waste = sum(x[j] * w for j, (_, _, _, w) in model.y.items())
    unusable = sum(x[j] * u for j, (_, _, _, u) in model.z.items())
    changed = sum(x[j] for j in model.z)
    queues = [list(pc.pods) for pc in model.classes]
    assignments = []
    for j, (c, n, prof, _) in sorted(model.y.items()):
        for _ in range(x[j]):
            assignments.append((queues[c].pop(0).key, model.nodes[n].node.name, prof))
    layouts = tuple(
        (model.nodes[n].node.name, h, lay, x[j]) for j, (n, h, lay, _) in sorted(model.z.items()) if x[j] > 0
    )
    return ExactResult(
        "optimal",
        placed,
        waste,
        unusable,
        changed,
        seconds,
        (seconds,),
        model.size,
        len(model.rows),
        assignments=tuple(sorted(assignments)),
        new_layouts=layouts,
    )


def verify(snapshot: Snapshot, result: ExactResult, settings: PlannerSettings | None = None) -> list[str]:
    """Independent check of a decoded solution: valid layouts on GPUs that may change, instance supply per node
    and profile, acceptable profiles, static fit and CPU/memory/pod slots. Returns the problems found."""
    settings = settings or PlannerSettings()
    problems: list[str] = []
    nodes = {nm.node.name: nm for nm in node_models(snapshot.nodes, settings)}
    pods = {p.key: p for p in snapshot.pending}
    changes: dict[str, list[tuple[int, CanonicalLayout, int]]] = {}
    for node, h_idx, layout, count in result.new_layouts:
        changes.setdefault(node, []).append((h_idx, layout, count))
    supply: dict[str, Counter[str]] = {}
    for name, nm in nodes.items():
        have = Counter(nm.fixed_free)
        left = [h.count for h in nm.classes]
        for h_idx, layout, count in changes.get(name, []):
            if not nm.geo.is_valid(layout):
                problems.append(f"{name}: invalid layout {layout}")
            left[h_idx] -= count
            have.update({p: n * count for p, n in layout})
        for h_idx, h in enumerate(nm.classes):
            if left[h_idx] < 0:
                problems.append(f"{name}: more GPUs of class {h_idx} change than it has")
            have.update({p: n * max(0, left[h_idx]) for p, n in h.keep_free.items()})
        supply[name] = have
    used: dict[str, Counter[str]] = {}
    req: dict[str, Resources] = {}
    waste = 0
    for key, node, profile in result.assignments:
        pod, nm = pods[key], nodes[node]
        if static_misfit(pod, nm.node) is not None:
            problems.append(f"{key} on {node}: {static_misfit(pod, nm.node)}")
        accepted = {p.name: p for p in profiles_for(nm.model, pod.gpu[0])}
        if profile not in accepted:
            problems.append(f"{key}: profile {profile} does not serve {pod.gpu[0]}")
            continue
        mib = accepted[profile].memory_mib
        waste += mib - need_mib(pod.gpu[0], mib, pod.need_mib)
        used.setdefault(node, Counter())[profile] += 1
        req[node] = req.get(node, Resources()) + pod.requests
    for node, cnt in used.items():
        if cnt - supply[node]:
            problems.append(f"{node}: uses {dict(cnt)} but has {dict(supply[node])}")
        if not req[node].fits_in(nodes[node].node.free):
            problems.append(f"{node}: requests {req[node]} exceed free {nodes[node].node.free}")
    if len({k for k, _, _ in result.assignments}) != len(result.assignments):
        problems.append("a pod is assigned twice")
    if waste != result.internal_waste_mib:
        problems.append(f"internal waste {waste} != reported {result.internal_waste_mib}")
    unusable = sum(nodes[n].geo.unusable_mib(lay) * c for n, _, lay, c in result.new_layouts)
    if unusable != result.unusable_mib:
        problems.append(f"unusable {unusable} != reported {result.unusable_mib}")
    return problems
