"""Exact reference for objectives 1-2 of the planner: an integer program solved by HiGHS (`scipy.optimize.milp`).

Scope: snapshots whose pending pods each ask for ONE unit of GPU demand of kind `profile` or `vram` (a single
`GpuDemand` with count 1). `supported()` says why a snapshot is out of scope. Semantics follow
`migctl.core.planner`:

* A GPU of a node whose per-GPU usage is known either KEEPS its current layout (its free instances serve pods,
  at no layout cost) or, when it is reconfigurable (MIG enabled, idle, node not frozen: no `frozen_reason`, no
  exclude label; a MIG-disabled idle GPU only with `allow_mig_mode_change` on a node without GPU pods), takes any
  valid layout `L` of `geometry(model).layouts`, which costs `geo.unusable_mib(L)` (the GPU changed).
* A node whose per-GPU usage is unknown (`usage_known` False) only offers its free instances `node.mig_free`
  (a pool; no reconfiguration).
* A pending pod is served by at most one instance of a profile in `profiles_for(model, demand)`, on a node where
  `static_misfit(pod, node) is None`; the CPU, memory and pod slots of the pods put on a node fit `node.free`.
  Internal waste of a placed pod = instance MiB - `need_mib(demand, instance MiB, pod.need_mib)`.
* Objective 1 (lexicographic over priority tiers, highest first): maximise pods placed in the tier, with the
  optimum of every higher tier fixed as a constraint (one MILP per tier), so a higher-priority pod is never
  traded for any number of lower-priority ones.
* Objective 2: with every tier's optimum fixed, minimise internal waste + unusable MiB of changed GPUs.

The model is aggregated without loss of exactness:
* Pods with the same (priority, demand, need, placement signature, CPU/memory requests) are interchangeable:
  integer variable `y[c, n, q]` = how many pods of class `c` node `n` serves with profile `q`.
* Within a node, instances of one profile are interchangeable, so only the node's per-profile instance supply
  matters: `sum_c y[c, n, q] <= supply(n, q)`.
* Reconfigurable GPUs of a node in the same state form a class of `m` GPUs: integer `keep[h]` plus `z[h, L]`
  with `keep + sum_L z = m`. Only layouts that are maximal under multiset inclusion are offered (a superset layout
  has at least the same instances and no more unusable memory, so it dominates), excluding the current one
  (taking it again is `keep`, at no cost).
* CPU/memory/pod rows are divided by the gcd of their integer coefficients (exact for integer variables), which
  keeps byte-sized coefficients well scaled.

HiGHS runs with `mip_rel_gap = 0`, so `status == "optimal"` means proven optimal (up to HiGHS's feasibility
tolerance of 1e-6 on integrality, harmless with these integer data).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import csr_matrix

from migctl.core.catalog import GpuModel
from migctl.core.cluster import Node, Pod, Resources, Snapshot
from migctl.core.demand import need_mib, profiles_for
from migctl.core.geometry import CanonicalLayout, ModelGeometry, geometry
from migctl.core.placement import signature, static_misfit
from migctl.core.settings import PlannerSettings

_STATUS = {0: "optimal", 1: "limit", 2: "infeasible", 3: "unbounded", 4: "error"}


@dataclass(frozen=True)
class ExactResult:
    """The exact optimum of objectives 1-2 (or the best found, when `status` is not `optimal`)."""

    status: str  # optimal | limit (time limit hit: not proven) | unsupported | infeasible | error
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
        if len(pod.gpu) != 1 or pod.gpu[0].count != 1 or pod.gpu[0].kind not in ("profile", "vram"):
            return f"pod {pod.key}: only single-unit profile/vram demand is modelled (has {pod.gpu})"
    return None


_MAXIMAL: dict[int, tuple[GpuModel, tuple[CanonicalLayout, ...]]] = {}


def maximal_layouts(model: GpuModel) -> tuple[CanonicalLayout, ...]:
    """Valid layouts of `model` that no other valid layout strictly contains (as a multiset)."""
    hit = _MAXIMAL.get(id(model))
    if hit is not None and hit[0] is model:
        return hit[1]
    layouts = geometry(model).layouts
    counters = [Counter(dict(lay)) for lay in layouts]
    out = []
    for i, ci in enumerate(counters):
        dominated = any(j != i and not (ci - cj) and cj != ci for j, cj in enumerate(counters))
        if not dominated:
            out.append(layouts[i])
    result = tuple(out)
    _MAXIMAL[id(model)] = (model, result)
    return result


# ---------------------------------------------------------------------------------------------------------
# Model building


@dataclass
class _GpuClass:
    count: int
    keep_free: Counter[str]  # instances the GPU offers when it keeps its current layout
    layouts: tuple[CanonicalLayout, ...]  # layouts it may take instead (each costs its unusable MiB)


@dataclass
class _NodeModel:
    node: Node
    model: GpuModel
    geo: ModelGeometry
    fixed_free: Counter[str]  # free instances of GPUs that cannot change, and the unknown-usage pool
    classes: list[_GpuClass] = field(default_factory=list)


@dataclass(frozen=True)
class _PodClass:
    pod: Pod  # a representative
    count: int


class _Lp:
    """A tiny sparse-row builder for `milp`."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def var(self, lb: float, ub: float) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        return len(self.lb) - 1

    def row(self, coefs: Mapping[int, float], lb: float, ub: float) -> None:
        if coefs:
            self.rows.append((dict(coefs), lb, ub))

    def constraint(self) -> LinearConstraint:
        data: list[float] = []
        cols: list[int] = []
        ptr = [0]
        lbs, ubs = [], []
        for coefs, lo, hi in self.rows:
            for j, v in coefs.items():
                cols.append(j)
                data.append(v)
            ptr.append(len(cols))
            lbs.append(lo)
            ubs.append(hi)
        a = csr_matrix((data, cols, ptr), shape=(len(self.rows), len(self.lb)))
        return LinearConstraint(a, np.array(lbs), np.array(ubs))


def _node_models(snapshot: Snapshot, settings: PlannerSettings) -> list[_NodeModel]:
    out = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        if node.model is None:
            continue  # non-MIG cards serve no profile/vram demand
        geo = geometry(node.model)
        frozen = bool(node.frozen_reason) or node.labels.get(settings.exclude_label) == "true"
        mode_ok = settings.allow_mig_mode_change and not frozen and not node.gpu_pods
        nm = _NodeModel(node, node.model, geo, Counter())
        if node.usage_known and node.gpus:
            states: Counter[tuple[object, ...]] = Counter()
            for gpu in node.gpus:
                cfg = gpu.config
                if cfg.mig_enabled:
                    used = Counter(dict(gpu.used or {}))
                    free = Counter(dict(cfg.layout)) - used
                    reconf = used.total() == 0 and not frozen
                else:
                    free = Counter()
                    reconf = not gpu.whole_used and not frozen and mode_ok
                if reconf:
                    states[(cfg.mig_enabled, cfg.layout)] += 1
                else:
                    nm.fixed_free.update(free)
            for (mig_on, layout), m in sorted(states.items(), key=repr):
                assert isinstance(layout, tuple)
                alts = tuple(lay for lay in maximal_layouts(node.model) if not (mig_on and lay == layout))
                keep = Counter(dict(layout)) if mig_on else Counter()
                nm.classes.append(_GpuClass(m, keep, alts))
        else:
            nm.fixed_free.update({k: v for k, v in node.mig_free.items() if v > 0})
        out.append(nm)
    return out


def _class_key(pod: Pod) -> tuple[object, ...]:
    d = pod.gpu[0]
    return (pod.priority, d.kind, d.profile, d.vram_mib, pod.need_mib, signature(pod), pod.requests)


def _pod_classes(pods: Sequence[Pod]) -> list[_PodClass]:
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for pod in pods:
        groups.setdefault(_class_key(pod), []).append(pod)
    return [_PodClass(g[0], len(g)) for _, g in sorted(groups.items(), key=lambda kv: repr(kv[0]))]


def _resource_rows(lp: _Lp, terms: list[tuple[int, Resources, int]], free: Resources) -> None:
    """CPU, memory and pod-slot rows of one node: `terms` are (variable, per-pod requests, upper bound)."""
    for attr in ("cpu_m", "memory", "pods"):
        cap = getattr(free, attr)
        coefs = [(j, getattr(r, attr), ub) for j, r, ub in terms if getattr(r, attr) > 0]
        if not coefs or sum(a * ub for _, a, ub in coefs) <= cap:
            continue  # cannot bind
        g = 0
        for _, a, _ in coefs:
            g = math.gcd(g, a)
        lp.row({j: a // g for j, a, _ in coefs}, -np.inf, cap // g)


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
    pods = list(snapshot.pending)
    classes = _pod_classes(pods)
    nodes = _node_models(snapshot, settings)
    lp = _Lp()
    waste: dict[int, float] = {}
    unusable: dict[int, float] = {}
    by_class: dict[int, list[int]] = {}
    y_meta: dict[int, tuple[int, int]] = {}  # variable -> (pod class, waste MiB)
    y_where: dict[int, tuple[str, str]] = {}  # variable -> (node, profile)
    z_where: dict[int, tuple[str, int, CanonicalLayout]] = {}  # variable -> (node, GPU class, layout)

    for nm in nodes:
        supply_rows: dict[str, dict[int, float]] = {}
        res_terms: list[tuple[int, Resources, int]] = []
        for c_idx, pc in enumerate(classes):
            pod = pc.pod
            if static_misfit(pod, nm.node) is not None or not pod.requests.fits_in(nm.node.free):
                continue
            demand = pod.gpu[0]
            for prof in profiles_for(nm.model, demand):
                j = lp.var(0, pc.count)
                w = prof.memory_mib - need_mib(demand, prof.memory_mib, pod.need_mib)
                waste[j] = w
                y_meta[j] = (c_idx, w)
                y_where[j] = (nm.node.name, prof.name)
                by_class.setdefault(c_idx, []).append(j)
                supply_rows.setdefault(prof.name, {})[j] = 1.0
                res_terms.append((j, pod.requests, pc.count))
        if not supply_rows:
            continue  # nothing can be served here: no layout variables needed
        for h_idx, h in enumerate(nm.classes):
            z_vars = []
            for lay in h.layouts:
                j = lp.var(0, h.count)
                unusable[j] = nm.geo.unusable_mib(lay)
                z_where[j] = (nm.node.name, h_idx, lay)
                z_vars.append(j)
                lay_c = dict(lay)
                for prof_name, row in supply_rows.items():
                    # supply = keep_free * (m - sum z) + sum z * L  ->  y - sum z * (L - keep_free) <= m * keep_free
                    delta = lay_c.get(prof_name, 0) - h.keep_free.get(prof_name, 0)
                    if delta:
                        row[j] = row.get(j, 0.0) - delta
            lp.row(dict.fromkeys(z_vars, 1.0), 0, h.count)  # keep = m - sum z >= 0
        for prof_name, row in supply_rows.items():
            lp.row(row, -np.inf, _supply_rhs(nm, prof_name))
        _resource_rows(lp, res_terms, nm.node.free)

    for c_idx, js in by_class.items():
        if len(js) > 1:
            lp.row(dict.fromkeys(js, 1.0), 0, classes[c_idx].count)

    nvars = len(lp.lb)
    integrality = np.ones(nvars)
    bounds = Bounds(np.array(lp.lb, dtype=float), np.array(lp.ub, dtype=float))
    tiers = sorted({pc.pod.priority for pc in classes}, reverse=True)
    tier_vars = {t: [j for j, (c, _) in y_meta.items() if classes[c].pod.priority == t] for t in tiers}
    placed: list[tuple[int, int]] = []
    stage_times: list[float] = []

    def run(c: np.ndarray) -> tuple[str, np.ndarray | None, float]:
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            return "limit", None, 0.0
        t0 = time.perf_counter()
        constraints = [lp.constraint()] if lp.rows else []
        res = milp(
            c,
            integrality=integrality,
            bounds=bounds,
            constraints=constraints,
            options={"mip_rel_gap": 0.0, "time_limit": left, "presolve": True},
        )
        stage_times.append(time.perf_counter() - t0)
        status = _STATUS.get(res.status, "error")
        return status, (None if res.x is None else np.asarray(res.x)), float(res.fun if res.fun is not None else 0)

    def fail(status: str, reason: str) -> ExactResult:
        return ExactResult(
            status,
            tuple(placed),
            seconds=time.perf_counter() - start,
            stage_seconds=tuple(stage_times),
            variables=nvars,
            constraints=len(lp.rows),
            reason=reason,
        )

    if nvars == 0:
        return ExactResult(
            "optimal",
            tuple((t, 0) for t in tiers),
            seconds=time.perf_counter() - start,
        )
    for t in tiers:
        js = tier_vars[t]
        if not js:
            placed.append((t, 0))
            continue
        c = np.zeros(nvars)
        c[js] = -1.0
        status, x, fun = run(c)
        if status != "optimal" or x is None:
            return fail(status, f"stage 1, priority {t}")
        best = round(-fun)
        placed.append((t, best))
        lp.row(dict.fromkeys(js, 1.0), best - 0.5, np.inf)
    c = np.zeros(nvars)
    for j, wj in waste.items():
        c[j] = wj
    for j, u in unusable.items():
        c[j] = u
    status, x, _ = run(c)
    if status != "optimal" or x is None:
        return fail(status, "stage 2")
    xi = np.rint(x).astype(np.int64)
    got_waste = int(sum(xi[j] * wj for j, wj in waste.items()))
    got_unusable = int(sum(xi[j] * u for j, u in unusable.items()))
    changed = int(sum(xi[j] for j in unusable))
    queues = {c: [p.key for p in pods if _class_key(p) == _class_key(pc.pod)] for c, pc in enumerate(classes)}
    assignments = []
    for j, (c_idx, _) in sorted(y_meta.items()):
        for _ in range(int(xi[j])):
            assignments.append((queues[c_idx].pop(), *y_where[j]))
    layouts = tuple((*z_where[j], int(xi[j])) for j in sorted(z_where) if xi[j] > 0)
    return ExactResult(
        "optimal",
        tuple(placed),
        got_waste,
        got_unusable,
        changed,
        time.perf_counter() - start,
        tuple(stage_times),
        nvars,
        len(lp.rows),
        assignments=tuple(sorted(assignments)),
        new_layouts=layouts,
    )


def _supply_rhs(nm: _NodeModel, profile: str) -> float:
    """Right-hand side of a supply row: fixed free instances + every reconfigurable class kept as it is."""
    total = nm.fixed_free.get(profile, 0)
    for h in nm.classes:
        total += h.count * h.keep_free.get(profile, 0)
    return float(total)


def verify(snapshot: Snapshot, result: ExactResult, settings: PlannerSettings | None = None) -> list[str]:
    """Independent check of a decoded solution: valid layouts on GPUs that may change, instance supply per node
    and profile, acceptable profiles, static fit and CPU/memory/pod slots. Returns the problems found."""
    settings = settings or PlannerSettings()
    problems: list[str] = []
    nodes = {nm.node.name: nm for nm in _node_models(snapshot, settings)}
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
