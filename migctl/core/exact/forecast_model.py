"""The objective's forecast term as an integer program (docs/planning.md, "Objective over time").

The term: with every pod left on the GPU the placement gave it, choose the layout of each GPU the plan reshapes,
and whether to pre-shape each idle GPU (`over_time.groups` says which GPUs are which), to
  1. serve the most forecast demand: per model, a GPU's worth of pods per GPU in the forecast's classes, served
     by the instances of every layout of the model's GPUs, each pod counting its class's need plus a GPU's memory
     per pod (`spare.py`), less the pause price of every idle GPU pre-shaped (`over_time.pause_price`);
  2. then strand the least MiB on the GPUs the term chooses (waste of their pods + unusable MiB of changed ones).
`over_time.for_the_forecast` is the greedy for this term, GPU by GPU against what the ones before left; this model
is its exact reference (bench/quality.py) and, on plans small enough, the planner's last step (`improve`).

Variables, all integer: per class of reshaped GPUs (same model and requests) a count per layout that serves the
requests the way `Completions.regroup` does (`spare.match`); per class of idle GPUs (same model, layout and price)
a count per layout other than its own; per model, forecast class and profile, a flow in eighths of a pod (the
demand is fractional; eighths, as `over_time._at` rounds it), bounded by the class's demand and by the instances
of all the model's layouts. So served demand is a maximum flow. Coefficients are rounded to whole MiB (served) and
whole eighths (prices), which keeps every stage's value an integer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from migctl.core.exact.model import INF, Model, Stage
from migctl.core.exact.solve import AVAILABLE, solve
from migctl.core.forecast.estimate import Forecast
from migctl.core.forecast.over_time import ModelGroup, groups, requests
from migctl.core.forecast.spare import match
from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.demand import need_mib
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Assignment, GpuPlan, NodePlan, Plan
from migctl.core.model.settings import PlannerSettings

EIGHTHS = 8
Reqs = tuple[tuple[tuple[str, ...], int], ...]


@dataclass
class Option:
    var: int
    layout: CanonicalLayout
    got: tuple[str, ...]  # instance per request (reshaped GPUs)
    waste: int
    unusable: int


@dataclass
class GpuClass:
    """GPUs of one model the term chooses alike: reshaped ones with the same requests, or idle ones with the same
    layout and price. `gpus`: (node, index, assignment indexes of its pods in `reqs` order), in plan order."""

    gpus: list[tuple[str, int, list[int]]]
    reqs: Reqs
    idle: bool
    current: CanonicalLayout = ()
    price: float = 0.0
    options: list[Option] = field(default_factory=list)


@dataclass
class ForecastModel:
    model: Model
    classes: list[GpuClass]


def build(plan: Plan, snapshot: Snapshot, settings: PlannerSettings, demand: Forecast) -> ForecastModel:
    """The forecast term of `plan` (the placement's plan, before `for_the_forecast`) as an integer program."""
    m = Model()
    pods = {p.key: p for p in snapshot.pending}
    on_gpu: dict[tuple[str, int], list[int]] = {}
    for i, a in enumerate(plan.assignments):
        if a.gpu is not None:
            on_gpu.setdefault((a.node, a.gpu), []).append(i)
    classes: list[GpuClass] = []
    served: dict[int, float] = {}
    stranded: dict[int, float] = {}
    for group in groups(plan, snapshot, settings, demand):
        geo = group.base.geo
        pool: Counter[str] = Counter()
        supply: dict[str, dict[int, float]] = {}

        idle_layouts = _maximal([f.layout for f in geo.completions({})])
        for cls, gps in _classes(group, plan.assignments, on_gpu, pods):
            count = len(cls.gpus)
            if cls.idle:
                pool.update({n: c * count for n, c in cls.current})  # kept, they offer their own instances
                for lay in idle_layouts:
                    if lay != cls.current:
                        j = m.var(0, count)
                        cls.options.append(Option(j, lay, (), 0, geo.unusable_mib(lay)))
                        served[j] = float(round(EIGHTHS * cls.price))  # stage 1 is minimised: a pause costs
                        _offers(supply, j, lay)
                        _offers(supply, j, cls.current, -1.0)
                m.row({o.var: 1.0 for o in cls.options}, 0, count)
            else:
                for lay, have, unusable, variants in group.base.layouts:
                    matched = match(geo, have, variants, cls.reqs)
                    if matched is not None:
                        j = m.var(0, count)
                        cls.options.append(Option(j, lay, matched[0], matched[1], unusable))
                        _offers(supply, j, lay)
                if not cls.options:  # regroup leaves such GPUs as the placement shaped them
                    for gp in gps:
                        pool.update(dict(gp.target.layout))
                    continue
                m.row({o.var: 1.0 for o in cls.options}, count, count)
            for o in cls.options:
                if o.waste + o.unusable:
                    stranded[o.var] = float(o.waste + o.unusable)
            classes.append(cls)
        for gp in group.fixed:
            if gp.target.mig_enabled:
                pool.update(dict(gp.target.layout))
        flows: dict[str, dict[int, float]] = {}
        for c, want in group.base.with_want(group.want).want:
            pods_8 = round(want * EIGHTHS)
            value = round(group.base.pod_mib + c.need_mib)
            if pods_8 <= 0:
                continue
            js = []
            for name in c.accepts:
                j = m.var(0, pods_8)
                js.append(j)
                served[j] = -float(value)
                flows.setdefault(name, {})[j] = 1.0
            m.row(dict.fromkeys(js, 1.0), -INF, pods_8)
        for name, row in flows.items():
            m.row({**row, **supply.get(name, {})}, -INF, float(pool.get(name, 0) * EIGHTHS))
    m.stages = [
        Stage("forecast demand served (eighths of a pod x MiB), less pause prices", served),
        Stage("stranded MiB of the GPUs the forecast shapes", stranded),
    ]
    return ForecastModel(m, classes)


def _offers(supply: dict[str, dict[int, float]], j: int, layout: CanonicalLayout, sign: float = 1.0) -> None:
    """Choice `j`'s terms in the supply rows: flow - EIGHTHS * (instances the choice adds) <= EIGHTHS * pool."""
    for n, c in layout:
        row = supply.setdefault(n, {})
        row[j] = row.get(j, 0.0) - sign * c * EIGHTHS


def _maximal(layouts: list[CanonicalLayout]) -> list[CanonicalLayout]:
    """The layouts no other of `layouts` strictly contains (as multisets): a superset serves every request the
    subset serves and strands no more."""
    counters = [Counter(dict(lay)) for lay in layouts]
    return [
        layouts[i]
        for i, ci in enumerate(counters)
        if not any(j != i and cj != ci and not (ci - cj) for j, cj in enumerate(counters))
    ]


def _classes(
    group: ModelGroup,
    assignments: Sequence[Assignment],
    on_gpu: Mapping[tuple[str, int], list[int]],
    pods: Mapping[str, Pod],
) -> list[tuple[GpuClass, list[GpuPlan]]]:
    """`group`'s GPUs the term chooses, in classes with their GPU plans; the others join `group.fixed`."""
    out: dict[tuple[object, ...], tuple[GpuClass, list[GpuPlan]]] = {}
    for node, gp in group.reshaped:
        reqs = requests(group.model, on_gpu.get((node.name, gp.index), []), list(assignments), pods)
        if reqs is None or not gp.target.mig_enabled:
            group.fixed.append(gp)  # as regroup leaves it
            continue
        key = tuple(r for r, _ in reqs)
        cls, gps = out.setdefault(("r", key), (GpuClass([], key, False), []))
        cls.gpus.append((node.name, gp.index, [i for _, i in reqs]))
        gps.append(gp)
    for node, gp, price in group.idle:
        if price is None or not gp.current.mig_enabled:
            group.fixed.append(gp)
            continue
        cls, gps = out.setdefault(
            ("i", gp.current.layout, price), (GpuClass([], (), True, gp.current.layout, price), [])
        )
        cls.gpus.append((node.name, gp.index, []))
        gps.append(gp)
    return list(out.values())


def start(fm: ForecastModel, plan: Plan) -> list[int] | None:
    """`plan` (after `for_the_forecast`) as a solution of the model: its layout counts, no flow; None when one of
    its layouts is not an option."""
    targets = {(n.name, g.index): g.target for n in plan.nodes for g in n.gpus}
    x = [0] * fm.model.size
    for cls in fm.classes:
        for node, index, _ in cls.gpus:
            target = targets[(node, index)]
            if cls.idle and target.layout == cls.current:
                continue
            option = next((o for o in cls.options if o.layout == target.layout), None)
            if option is None:
                return None
            x[option.var] += 1
    return x


def fixed_to(fm: ForecastModel, x: Sequence[int]) -> Model:
    """The model with every layout count fixed to `x`'s: what is left to choose is the flow, so its optimum is what
    those layouts serve."""
    m = replace(fm.model, lb=list(fm.model.lb), ub=list(fm.model.ub))
    for cls in fm.classes:
        for o in cls.options:
            m.lb[o.var] = m.ub[o.var] = float(x[o.var])
    return m


def decode(fm: ForecastModel, x: Sequence[int], plan: Plan, snapshot: Snapshot) -> Plan:
    """`plan` (the placement's) with the layouts of solution `x`, and the instances `spare.match` gives the pods of
    reshaped GPUs: each class's GPUs, in plan order, take its options' counts in option order."""
    models = {n.name: n.model for n in snapshot.nodes}
    pods = {p.key: p for p in snapshot.pending}
    assignments = list(plan.assignments)
    targets: dict[tuple[str, int], Option] = {}
    for cls in fm.classes:
        queue = [o for o in cls.options for _ in range(x[o.var])]
        for (node, index, idx), option in zip(cls.gpus, queue, strict=False):
            targets[(node, index)] = option
            model = models[node]
            assert model is not None
            for i, profile in zip(idx, option.got, strict=True):
                a, pod = assignments[i], pods[assignments[i].pod]
                mib = model.profile(profile).memory_mib
                need = need_mib(pod.gpu[0], mib, pod.need_mib)
                assignments[i] = replace(a, profile=profile, instance_mib=mib, need_mib=need)

    def shaped(node: str, g: GpuPlan) -> GpuPlan:
        o = targets.get((node, g.index))
        return g if o is None else replace(g, target=GpuConfig.mig(o.layout), unusable_mib_after=o.unusable)

    nodes = tuple(NodePlan(n.name, tuple(shaped(n.name, g) for g in n.gpus)) for n in plan.nodes)
    return plan.revised(nodes, assignments)


def improve(placed: Plan, shaped: Plan, snapshot: Snapshot, settings: PlannerSettings, demand: Forecast) -> Plan:
    """`shaped` (the greedy's layouts for the forecast, from `placed`) or, when the model finds a better value of the
    term within `planner.exact`'s budget, the model's layouts. Only on snapshots of at most
    `exact.forecast_max_gpus` MIG GPUs: at 1,000 nodes the greedy is within 0.01 % of the optimum and the model
    costs more than the rest of the plan (docs/benchmarks.md)."""
    cfg = settings.exact
    if not (cfg.enabled and AVAILABLE and demand.models) or snapshot.mig_gpus > cfg.forecast_max_gpus:
        return shaped
    fm = build(placed, snapshot, settings, demand)
    x0 = start(fm, shaped)
    if x0 is None:
        return shaped
    base = solve(fixed_to(fm, x0), nodes=cfg.forecast_nodes)
    if base is None:
        return shaped
    sol = solve(fm.model, nodes=cfg.forecast_nodes, start=base.x)
    if sol is None or [s.value for s in sol.stages] >= [s.value for s in base.stages]:
        return shaped
    return decode(fm, sol.x, placed, snapshot)


def value(fm: ForecastModel, plan: Plan, nodes: int = 10_000) -> tuple[int, ...] | None:
    """The term's value (stage by stage) of `plan`'s layouts: the flow they serve at best, then their stranded MiB;
    None when one of its layouts is not an option (the benchmark's measure of a plan)."""
    x0 = start(fm, plan)
    if x0 is None:
        return None
    got = solve(fixed_to(fm, x0), nodes=nodes)
    return None if got is None else tuple(s.value for s in got.stages)
