"""The plan's last step: shape what it reshapes, and idle GPUs nothing waits for, for the demand to come.

Under the stock mig-manager a GPU can only be re-cut while it is idle, so a layout chosen now lasts until the
GPU drains, and with a standing queue that is a long time. `for_the_forecast` therefore looks at the plan's GPUs
once more with the objective over time (`spare.py`, docs/planning.md). The demand is the cluster's: a GPU's worth
of forecast pods per GPU of the model, less what the layouts that stay as they are serve; then GPU by GPU, in
name order, each serves what the ones before it left, so rare requests get instances on some GPUs, not on all.

- **Regroup.** Every GPU the plan reshapes gets the layout, and its pods the instances, that serve the most of
  that demand (`Completions.regroup`). Its pods stay, so objective 1 and the disruption count are untouched.
- **Pre-shape.** An idle GPU the plan leaves alone (no layout change, no pod assigned) is reshaped toward the
  demand (`Completions.best` of an empty GPU) when that serves at least `planner.preshape_min_gain` of its
  memory more. A relabel pauses the whole node, so the gain must pay for it: on a node the plan relabels anyway
  the pause is paid and half the gain is enough (its GPUs go in the same relabel, which is what batching a
  node's GPUs means here). Pausing a quiet node for the forecast is opt-in (`planner.preshape_quiet_nodes`;
  on openb it cost allocation) and then needs a forecast resting on half a window of pods
  (`forecast_half_life_pods` / 2 of weight), so a quiet cluster does not bet a pause on two pods.
- **No thrash.** A GPU whose layout already is the best for the demand gains nothing, so the same snapshot
  planned twice never reshapes twice; the controller's dwell and cool-down hold a forecast that swings.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from migctl.core.forecast.estimate import DemandClass, Forecast
from migctl.core.forecast.spare import Completions, pour
from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import canonical, geometry
from migctl.core.inplace.reach import around
from migctl.core.model.cluster import Gpu, Node, Pod, Snapshot
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Assignment, GpuPlan, NodePlan, Plan
from migctl.core.model.settings import PlannerSettings


@dataclass
class ModelGroup:
    """The GPUs of one model as the forecast term sees them (`groups`)."""

    model: GpuModel
    base: Completions  # the model's forecast, a GPU's worth of pods per GPU
    want: dict[object, float]  # the cluster's demand: a GPU's worth of pods per GPU of the model
    fixed: list[GpuPlan] = field(default_factory=list)  # layouts the forecast does not choose
    reshaped: list[tuple[Node, GpuPlan]] = field(default_factory=list)  # the plan reshapes them: layout free
    idle: list[tuple[Node, GpuPlan, float | None]] = field(default_factory=list)  # (.., pause price or None: kept)


def groups(result: Plan, snapshot: Snapshot, settings: PlannerSettings, demand: Forecast) -> list[ModelGroup]:
    """Per model in id order, its GPUs in plan order: fixed, reshaped by the plan, or idle and pre-shapable, with
    the price in served MiB a pre-shape must beat (`pause_price`). The one reading of a plan for the forecast
    term, by the greedy (`for_the_forecast`) and the exact model (`migctl/core/exact/forecast_model.py`)."""
    nodes = {n.name: n for n in snapshot.nodes}
    busy = {(a.node, a.gpu) for a in result.assignments if a.gpu is not None}
    by_model: dict[str, list[tuple[Node, GpuPlan]]] = {}
    for npl in result.nodes:
        node = nodes.get(npl.name)
        if node is not None and node.model is not None:
            by_model.setdefault(node.model.id, []).extend((node, g) for g in npl.gpus)
    touched = {node.name for members in by_model.values() for node, gp in members if gp.changed}
    out = []
    for mid, members in sorted(by_model.items()):
        model = members[0][0].model
        assert model is not None
        mf = demand.of(mid)
        base = Completions(geometry(model), mf)
        # pre-shaping bets a pause on the forecast: only once it rests on half a window of pods
        sure = mf is not None and mf.evidence >= settings.forecast_half_life_pods / 2
        group = ModelGroup(model, base, {c.key: n * len(members) for c, n in base.want})
        gpus: dict[str, dict[int, Gpu]] = {}
        for node, gp in members:
            on_node = gpus.get(node.name)
            if on_node is None:
                on_node = gpus[node.name] = {}
                for g in node.gpus:
                    on_node.setdefault(g.index, g)  # the first of an index, as the plan reads it
            gpu = on_node.get(gp.index)
            if gp.changed and gpu is not None and around(node, gpu) is not None:
                group.fixed.append(gp)  # re-cut in place around instances in use: the planner chose it for the forecast
            elif gp.changed:
                group.reshaped.append((node, gp))
            elif (
                settings.preshape
                and gpu is not None
                and (node.name, gp.index) not in busy
                and _reshapable(node, gpu, settings)
            ):
                group.idle.append((node, gp, pause_price(model, node.name in touched, sure, settings)))
            else:
                group.fixed.append(gp)
        out.append(group)
    return out


def pause_price(model: GpuModel, touched: bool, sure: bool, settings: PlannerSettings) -> float | None:
    """Served MiB a pre-shape must gain to pay for its pause, None when the GPU is not pre-shaped at all. A node
    the plan relabels anyway pays no extra pause: its idle GPUs join the same relabel even before the forecast is
    sure, at half the gain; elsewhere a pause is only bet on a forecast with evidence."""
    if not (touched or (sure and settings.preshape_quiet_nodes)):
        return None
    return settings.preshape_min_gain * model.full_profile.memory_mib * (0.5 if touched else 1.0)


def for_the_forecast(result: Plan, snapshot: Snapshot, settings: PlannerSettings, demand: Forecast) -> Plan:
    """`result` with its reshaped GPUs regrouped and idle GPUs pre-shaped (module docstring): the greedy for the
    forecast term, GPU by GPU."""
    if not demand.models:
        return result
    pods = {p.key: p for p in snapshot.pending}
    on_gpu: dict[tuple[str, int], list[int]] = {}
    for i, a in enumerate(result.assignments):
        if a.gpu is not None:
            on_gpu.setdefault((a.node, a.gpu), []).append(i)
    assignments = list(result.assignments)
    gpus: dict[tuple[str, int], GpuPlan] = {(n.name, g.index): g for n in result.nodes for g in n.gpus}
    for group in groups(result, snapshot, settings, demand):
        base = group.base
        pooled: Counter[str] = Counter()
        for gp in group.fixed:
            if gp.target.mig_enabled:
                pooled.update(dict(gp.target.layout))
        want = base.with_want(group.want).residual(canonical(pooled))
        cache: dict[tuple[tuple[DemandClass, float], ...], Completions] = {}
        for node, gp in group.reshaped:
            comp = _at(base, cache, want)
            new = _regroup(gp, comp, node, on_gpu.get((node.name, gp.index), []), assignments, pods)
            gpus[(node.name, gp.index)] = new
            if new.target.mig_enabled:
                want = comp.residual(new.target.layout)
        for node, gp, price in group.idle:
            if price is None:  # kept as it is: only what it serves of the demand matters, no memos needed
                want = pour(_quantized(base, want), gp.target.layout, base.pod_mib)[1]
                continue
            comp = _at(base, cache, want)
            new = _preshape(gp, comp, price)
            gpus[(node.name, gp.index)] = new
            want = comp.residual(new.target.layout)
    node_plans = tuple(NodePlan(n.name, tuple(gpus[(n.name, g.index)] for g in n.gpus)) for n in result.nodes)
    return result.revised(node_plans, assignments)


def _at(
    base: Completions, cache: dict[tuple[tuple[DemandClass, float], ...], Completions], want: dict[object, float]
) -> Completions:
    """`base` for `want`, rounded to eighths of a pod so that GPUs in the same spot share memos."""
    q = _quantized(base, want)
    hit = cache.get(q)
    if hit is None:
        hit = cache[q] = base.with_want({c.key: n for c, n in q})
    return hit


def _quantized(base: Completions, want: dict[object, float]) -> tuple[tuple[DemandClass, float], ...]:
    """`want` as `_at(base, ..., want).want` holds it (eighths of a pod, in `base`'s class order), for a GPU that
    only passes the demand on."""
    return tuple((c, round(want.get(c.key, 0.0) * 8) / 8) for c, _ in base.want)


def requests(
    model: GpuModel, idx: list[int], assignments: list[Assignment] | tuple[Assignment, ...], pods: Mapping[str, Pod]
) -> list[tuple[tuple[tuple[str, ...], int], int]] | None:
    """The requests of the pods on one reshaped GPU (assignment indexes `idx`) as `Completions.regroup` takes them:
    ((profiles that serve it, smallest first; real need MiB), assignment index), exact profiles first, then VRAM
    requests largest first (smallest-fit is then exact for threshold requests); None when a pod has several
    instances (which request an instance serves is not one-to-one) or none fits."""
    reqs: list[tuple[tuple[tuple[str, ...], int], int]] = []
    for i in idx:
        a = assignments[i]
        pod = pods.get(a.pod)
        if pod is None or pod.units != 1:
            return None
        fits = profiles_for(model, pod.gpu[0])
        if not fits:
            return None
        reqs.append(((tuple(p.name for p in fits), need_mib(pod.gpu[0], fits[0].memory_mib, pod.need_mib)), i))
    reqs.sort(
        key=lambda r: (
            len(r[0][0]) > 1 or pods[assignments[r[1]].pod].gpu[0].kind == "vram",
            -model.profile(r[0][0][0]).memory_mib,
            r[0][1],
            r[1],
        )
    )
    return reqs


def _regroup(
    gp: GpuPlan, comp: Completions, node: Node, idx: list[int], assignments: list[Assignment], pods: dict[str, Pod]
) -> GpuPlan:
    """A reshaped GPU's layout and its pods' instances, chosen for the forecast (or `gp` unchanged)."""
    model = node.model
    if not gp.changed or not gp.target.mig_enabled or model is None:
        return gp
    reqs = requests(model, idx, assignments, pods)
    if reqs is None:
        return gp
    found = comp.regroup(tuple(r for r, _ in reqs))
    if found is None:
        return gp
    layout, got = found
    for (_, i), profile in zip(reqs, got, strict=True):
        a = assignments[i]
        mib = model.profile(profile).memory_mib
        pod = pods[a.pod]
        assignments[i] = replace(a, profile=profile, instance_mib=mib, need_mib=need_mib(pod.gpu[0], mib, pod.need_mib))
    return replace(gp, target=GpuConfig.mig(layout), unusable_mib_after=comp.geo.unusable_mib(layout))


def _preshape(gp: GpuPlan, comp: Completions, price: float) -> GpuPlan:
    """An idle GPU the plan leaves alone, reshaped toward the forecast when the gain pays for the pause (`price`)."""
    best = comp.best(())
    if best is None or best[0] == gp.current.layout:
        return gp
    gain = comp.served_of(best[0]) - comp.served_of(gp.current.layout)
    if gain <= 0 or gain < price:
        return gp
    return replace(gp, target=GpuConfig.mig(best[0]), unusable_mib_after=best[1])


def _reshapable(node: Node, gpu: Gpu, settings: PlannerSettings) -> bool:
    """The planner's own rule for reshaping a GPU: MIG on, known to be idle, on a node it may reconfigure."""
    return gpu.config.mig_enabled and node.usage_known and gpu.busy is False and node.may_reconfigure(settings)
