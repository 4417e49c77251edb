"""The planner's objective as an integer program over a snapshot (or a sub-problem of one).

Scope: pending pods that each ask for ONE unit of GPU demand of kind `profile` or `vram`; `in_scope` says which.
The semantics are the planner's (`migctl.core.planner`):

* A GPU of a node whose per-GPU usage is known either KEEPS its current layout (its free instances serve pods,
  at no layout cost) or, when reconfigurable (MIG enabled, idle, node not frozen nor excluded; a MIG-disabled
  idle GPU only with `allow_mig_mode_change` on a node without GPU pods), takes a valid layout `L`, which costs
  `unusable_mib(L)` (the GPU changed).
* A node whose per-GPU usage is unknown only offers its free instances `node.mig_free` (a pool).
* A pod takes at most one instance of a profile in `profiles_for(model, demand)`, on a node that passes
  `static_misfit`; the CPU, memory and pod slots of the pods put on a node fit `node.free`. Internal waste =
  instance MiB - `need_mib(...)`.

Objective, lexicographic, as `planner.rank` compares plans: pods placed per priority tier (highest first),
then stranded MiB (internal waste + unusable MiB of changed GPUs), then disruption (GPUs reconfigured, then
nodes touched). Each is one linear `Stage`; a later lexicographic term is one more stage in `stages()`.

Aggregated without loss of exactness: interchangeable pods (same priority, demand, need, placement signature,
requests) share integer variables `y[c, n, q]` per (node, profile), since instances of one profile on a node are
interchangeable; reconfigurable GPUs of a node in the same state form a class with integer counts `z[h, L]` per
layout. Only layouts maximal under multiset inclusion are offered (a superset has every instance of the subset
and no more unusable memory), the current one excluded (keeping it is free). CPU/memory/pod rows are divided by
the gcd of their coefficients, which keeps byte-sized coefficients well scaled.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, geometry
from migctl.core.model.cluster import Node, Pod, Resources, Snapshot
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.placement import signature, static_misfit
from migctl.core.model.settings import PlannerSettings

INF = math.inf


def in_scope(pod: Pod) -> bool:
    """Whether the model can place `pod`: one unit of `profile` or `vram` demand."""
    return len(pod.gpu) == 1 and pod.gpu[0].count == 1 and pod.gpu[0].kind in ("profile", "vram")


_MAXIMAL: dict[tuple[object, ...], tuple[CanonicalLayout, ...]] = {}


def maximal_layouts(model: GpuModel) -> tuple[CanonicalLayout, ...]:
    """Valid layouts of `model` that no other valid layout strictly contains (as a multiset)."""
    geo = geometry(model)
    key = (model.id, geo.layouts)
    hit = _MAXIMAL.get(key)
    if hit is not None:
        return hit
    counters = [Counter(dict(lay)) for lay in geo.layouts]
    out = [
        geo.layouts[i]
        for i, ci in enumerate(counters)
        if not any(j != i and not (ci - cj) and cj != ci for j, cj in enumerate(counters))
    ]
    _MAXIMAL[key] = result = tuple(out)
    return result


@dataclass
class GpuClass:
    """Reconfigurable GPUs of one node in the same state: `indexes` in order (None for none known)."""

    indexes: tuple[int, ...]
    mig: bool
    current: CanonicalLayout
    keep_free: Counter[str]  # instances each offers when it keeps its current layout
    layouts: tuple[CanonicalLayout, ...]  # layouts it may take instead

    @property
    def count(self) -> int:
        return len(self.indexes)


@dataclass
class NodeModel:
    node: Node
    model: GpuModel
    geo: ModelGeometry
    fixed_free: Counter[str]  # free instances of GPUs that cannot change, and the unknown-usage pool
    fixed: dict[int, Counter[str]] = field(default_factory=dict)  # per GPU index that cannot change: free
    classes: list[GpuClass] = field(default_factory=list)


@dataclass(frozen=True)
class PodClass:
    pods: tuple[Pod, ...]  # interchangeable pods, in key order

    @property
    def pod(self) -> Pod:
        return self.pods[0]

    @property
    def count(self) -> int:
        return len(self.pods)


@dataclass
class Stage:
    """One lexicographic term, minimised: `coefs` over the variables, `name` for reports."""

    name: str
    coefs: dict[int, float]
    bound: float = -math.inf  # no solution does better: a start that reaches it is optimal without a solve
    effort: float = 1.0  # share of the per-stage node budget


@dataclass
class Model:
    """An integer program: bounds, rows, stages (objectives in order) and what each variable means."""

    lb: list[float] = field(default_factory=list)
    ub: list[float] = field(default_factory=list)
    rows: list[tuple[dict[int, float], float, float]] = field(default_factory=list)
    nodes: list[NodeModel] = field(default_factory=list)
    classes: list[PodClass] = field(default_factory=list)
    y: dict[int, tuple[int, int, str, int]] = field(default_factory=dict)  # var -> (pod class, node, profile, waste)
    z: dict[int, tuple[int, int, CanonicalLayout, int]] = field(default_factory=dict)  # -> (node, class, L, unusable)
    touch: dict[int, int] = field(default_factory=dict)  # var -> node (1 when any of its GPUs changes)
    stages: list[Stage] = field(default_factory=list)

    def var(self, lb: float, ub: float) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        return len(self.lb) - 1

    def row(self, coefs: Mapping[int, float], lb: float, ub: float) -> None:
        if coefs:
            self.rows.append((dict(coefs), lb, ub))

    @property
    def size(self) -> int:
        return len(self.lb)


def node_models(nodes: Iterable[Node], settings: PlannerSettings) -> list[NodeModel]:
    """Each MIG node's instance supply: fixed free instances and classes of reconfigurable GPUs."""
    out = []
    for node in sorted(nodes, key=lambda n: n.name):
        if node.model is None:
            continue  # non-MIG cards serve no profile/vram demand
        geo = geometry(node.model)
        frozen = not node.may_reconfigure(settings)
        mode_ok = settings.allow_mig_mode_change and not frozen and not node.gpu_pods
        nm = NodeModel(node, node.model, geo, Counter())
        if node.usage_known and node.gpus:
            states: dict[tuple[bool, CanonicalLayout], list[int]] = {}
            for gpu in sorted(node.gpus, key=lambda g: g.index):
                cfg = gpu.config
                if cfg.mig_enabled:
                    used = Counter(dict(gpu.used or {}))
                    free = Counter(dict(cfg.layout)) - used
                    reconf = used.total() == 0 and not frozen
                else:
                    free = Counter()
                    reconf = not gpu.whole_used and not frozen and mode_ok
                if reconf:
                    states.setdefault((cfg.mig_enabled, cfg.layout if cfg.mig_enabled else ()), []).append(gpu.index)
                else:
                    nm.fixed_free.update(free)
                    nm.fixed[gpu.index] = free
            for (mig_on, layout), idx in sorted(states.items(), key=lambda kv: kv[1][0]):
                alts = tuple(lay for lay in maximal_layouts(node.model) if not (mig_on and lay == layout))
                keep = Counter(dict(layout)) if mig_on else Counter()
                nm.classes.append(GpuClass(tuple(idx), mig_on, layout, keep, alts))
        else:
            nm.fixed_free.update({k: v for k, v in node.mig_free.items() if v > 0})
        out.append(nm)
    return out


def class_key(pod: Pod) -> tuple[object, ...]:
    d = pod.gpu[0]
    return (pod.priority, d.kind, d.profile, d.vram_mib, pod.need_mib, signature(pod), pod.requests)


def pod_classes(pods: Sequence[Pod]) -> list[PodClass]:
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for pod in sorted(pods, key=lambda p: p.key):
        groups.setdefault(class_key(pod), []).append(pod)
    return [PodClass(tuple(g)) for _, g in sorted(groups.items(), key=lambda kv: repr(kv[0]))]


def _resource_rows(m: Model, terms: list[tuple[int, Resources, int]], free: Resources) -> None:
    """CPU, memory and pod-slot rows of one node: `terms` are (variable, per-pod requests, upper bound)."""
    for attr in ("cpu_m", "memory", "pods"):
        cap = getattr(free, attr)
        coefs = [(j, getattr(r, attr), ub) for j, r, ub in terms if getattr(r, attr) > 0]
        if not coefs or sum(a * ub for _, a, ub in coefs) <= cap:
            continue  # cannot bind
        g = 0
        for _, a, _ in coefs:
            g = math.gcd(g, a)
        m.row({j: a // g for j, a, _ in coefs}, -INF, cap // g)


def build(nodes: Iterable[Node], pods: Sequence[Pod], settings: PlannerSettings) -> Model:
    """The model of placing `pods` (all in scope) on `nodes` as they are in the snapshot."""
    m = Model(nodes=node_models(nodes, settings), classes=pod_classes(pods))
    by_class: dict[int, list[int]] = {}
    for n_idx, nm in enumerate(m.nodes):
        supply_rows: dict[str, dict[int, float]] = {}
        res_terms: list[tuple[int, Resources, int]] = []
        for c_idx, pc in enumerate(m.classes):
            pod = pc.pod
            if static_misfit(pod, nm.node) is not None or not pod.requests.fits_in(nm.node.free):
                continue
            demand = pod.gpu[0]
            for prof in profiles_for(nm.model, demand):
                j = m.var(0, pc.count)
                w = prof.memory_mib - need_mib(demand, prof.memory_mib, pod.need_mib)
                m.y[j] = (c_idx, n_idx, prof.name, w)
                by_class.setdefault(c_idx, []).append(j)
                supply_rows.setdefault(prof.name, {})[j] = 1.0
                res_terms.append((j, pod.requests, pc.count))
        if not supply_rows:
            continue  # nothing can be served here: no layout variables needed
        node_z: list[int] = []
        for h_idx, h in enumerate(nm.classes):
            z_vars = []
            for lay in h.layouts:
                j = m.var(0, h.count)
                m.z[j] = (n_idx, h_idx, lay, nm.geo.unusable_mib(lay))
                z_vars.append(j)
                lay_c = dict(lay)
                for prof_name, row in supply_rows.items():
                    # supply = keep_free * (m - sum z) + sum z * L  ->  y - sum z * (L - keep_free) <= m * keep_free
                    delta = lay_c.get(prof_name, 0) - h.keep_free.get(prof_name, 0)
                    if delta:
                        row[j] = row.get(j, 0.0) - delta
            m.row(dict.fromkeys(z_vars, 1.0), 0, h.count)  # keep = m - sum z >= 0
            node_z.extend(z_vars)
        for prof_name, row in supply_rows.items():
            m.row(row, -INF, _supply_rhs(nm, prof_name))
        _resource_rows(m, res_terms, nm.node.free)
        if node_z:  # touched >= each GPU change / GPUs of the node
            t = m.var(0, 1)
            m.touch[t] = n_idx
            gpus = sum(h.count for h in nm.classes)
            m.row({**dict.fromkeys(node_z, 1.0), t: -float(gpus)}, -INF, 0)
    for c_idx, js in by_class.items():
        if len(js) > 1:
            m.row(dict.fromkeys(js, 1.0), 0, m.classes[c_idx].count)
    m.stages = stages(m)
    return m


def stages(m: Model) -> list[Stage]:
    """The objective in `planner.rank`'s order, each term minimised: -pods placed per tier (highest first),
    stranded MiB, then disruption (GPUs reconfigured, then nodes touched, as one weighted term)."""
    out = []
    for tier in sorted({pc.pod.priority for pc in m.classes}, reverse=True):
        js = [j for j, (c, _, _, _) in m.y.items() if m.classes[c].pod.priority == tier]
        pods = sum(pc.count for pc in m.classes if pc.pod.priority == tier)
        out.append(Stage(f"pods placed, priority {tier}", dict.fromkeys(js, -1.0), -float(pods)))
    stranded = {j: float(w) for j, (_, _, _, w) in m.y.items() if w}
    stranded.update({j: float(u) for j, (_, _, _, u) in m.z.items() if u})
    out.append(Stage("stranded MiB", stranded, 0.0))
    if m.z:
        weight = float(len(m.nodes) + 1)
        disruption = dict.fromkeys(m.z, weight)
        disruption.update(dict.fromkeys(m.touch, 1.0))
        # a tenth of the budget: many layouts tie here, and proving the last GPU needless is rarely worth more
        out.append(Stage("GPUs reconfigured, then nodes touched", disruption, 0.0, 0.1))
    return out


def _supply_rhs(nm: NodeModel, profile: str) -> float:
    """Right-hand side of a supply row: fixed free instances + every reconfigurable class kept as it is."""
    total = nm.fixed_free.get(profile, 0)
    for h in nm.classes:
        total += h.count * h.keep_free.get(profile, 0)
    return float(total)


def sub_snapshot(snapshot: Snapshot, nodes: set[str], pending: Iterable[Pod]) -> tuple[list[Node], list[Pod]]:
    """The nodes named and the pending pods given, for `build` (running pods only matter through the nodes)."""
    return [n for n in snapshot.nodes if n.name in nodes], sorted(pending, key=lambda p: p.key)
