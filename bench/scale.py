"""Scale run: 1,000 nodes × 8 GPUs (four models) and 10,000 pending pods.

Times, in one process and one run (best of `repeats`, `time.perf_counter`):
  parse    `json.loads` of the snapshot's `kubectl get -o json` text: the baseline;
  adapter  `snapshot_from_objects` (objects -> Snapshot), cold: the mig-parted config is parsed each time;
  adapter_warm  the same with that parse cached, as a controller that re-plans an unchanged ConfigMap has it;
  plan     `plan(snapshot)` on the adapter's snapshot.
A `plan()` slower than 5 s is timed once. The headline is plan / parse (goal <= 1.0). It also checks, on a
100-node prefix, that the directly built snapshot plans to the same objective as the adapter's; computes a lower
bound on stranded MiB (see `stranded_lower_bound`); and runs the exact solver on growing prefixes of the instance
(8 GPUs per node, 10 pods per node) until it no longer proves optimality within the time limit, reporting
planner time / exact time on the largest one it solved; times `plan()` on an overloaded prefix (a fifth of the
nodes, 20 pods per node), where every pass of the portfolio runs; and `plan()` of the instance with its pods each
pinned to one node by hostname against the same pods unpinned (`pinned`); the fallback's per-GPU fit of the
instance without MIG against the parse of its objects (`fallback`); and a greedy pass of a quarter prefix whose
every third pod asks for two units against the same pass with one (`multi_unit`).

The dry run as a user runs it: `migctl plan --snapshot FILE -o json` as a whole process (interpreter start,
imports, the objects read once, the plan, the fallback and VRAM sections, the JSON written) against
`python -c 'json.load(open(FILE))'` as a whole process, on the same file in the same run (best of `repeats`
each, alternating): `dry_run_over_load` (goal <= 10, beyond that 3), and the same ratio of CPU seconds
(`dry_run_cpu_over_load`), steadier where other work shares the machine.

The controller's adapter, incremental (`incremental`): the objects given a uid and resourceVersion as the API
server gives them, `snapshot_from_objects` with a fresh `ConversionMemo` (everything converted) against the same
call after one pod event (one pending pod written again: a new resourceVersion), best of `repeats` each, and
whether that snapshot equals a fresh conversion: `adapter_one_event_over_full`.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from bench import exact
from bench.instance_spec import HOSTNAME_LABEL, Instance
from bench.instances import scale_instance, subset
from bench.quality import tiers_of
from bench.scale_io import best_of, dry_run, fallback, incremental
from migctl.adapters.objects import snapshot_from_objects
from migctl.core.forecast.estimate import forecast
from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.migparted.config import forget_parsed
from migctl.core.model.cluster import Node, Pod, Snapshot
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.placement import signature, static_misfit
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan
from migctl.core.planner.passes import Planner


def min_waste(pods: Iterable[Pod], nodes: Iterable[Node]) -> dict[str, int | None]:
    """Per pending pod: the least internal waste any single instance could give it (None: no node can serve it).

    Considers every node that passes `static_misfit`, has the CPU/memory/pod slot for the pod alone and has a
    MIG model with an acceptable profile; pods and nodes are grouped so the work is per distinct kind."""
    kinds: dict[tuple[object, ...], Node] = {}
    for n in nodes:
        if n.model is None:
            continue
        node_key = (n.model.id, tuple(sorted(n.labels.items())), n.taints, n.unschedulable, n.free)
        kinds.setdefault(node_key, n)
    memo: dict[tuple[object, ...], int | None] = {}
    out: dict[str, int | None] = {}
    for pod in pods:
        d = pod.gpu[0]
        key = (signature(pod), d, pod.need_mib, pod.requests)
        if key not in memo:
            best: int | None = None
            for n in kinds.values():
                if n.model is None or static_misfit(pod, n) is not None or not pod.requests.fits_in(n.free):
                    continue
                for p in profiles_for(n.model, d):
                    w = p.memory_mib - need_mib(d, p.memory_mib, pod.need_mib)
                    best = w if best is None else min(best, w)
            memo[key] = best
        out[pod.key] = memo[key]
    return out


def stranded_lower_bound(snapshot: Snapshot, tiers: tuple[int, ...]) -> int:
    """A lower bound on the stranded MiB of ANY plan that places `tiers[i]` pods of the i-th priority tier
    (highest first): per tier, the sum of the `tiers[i]` smallest per-pod minimum internal wastes (unusable MiB
    of changed GPUs is bounded below by 0). When the planner places every pending pod, the lexicographic optimum
    places every pod as well, so with the planner's tiers this bounds the optimum itself."""
    pending = [p for p in snapshot.pending if len(p.gpu) == 1 and p.gpu[0].count == 1]
    waste = min_waste(pending, snapshot.nodes)
    levels = sorted({p.priority for p in snapshot.pending}, reverse=True)
    total = 0
    for level, k in zip(levels, tiers, strict=False):
        ws = sorted(w for p in pending if p.priority == level and (w := waste[p.key]) is not None)
        total += sum(ws[:k])
    return total


def profile_plan(snapshot: Snapshot, top: int = 18) -> str:
    """cProfile of one `plan()` call: the functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    plan(snapshot)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def profile_adapter(objects: list[dict[str, Any]], catalog: Catalog, top: int = 12) -> str:
    """cProfile of one `snapshot_from_objects` call: the functions with the most own time."""
    prof = cProfile.Profile()
    prof.enable()
    snapshot_from_objects(objects, catalog)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue()


def exact_ladder(
    instance: Instance, catalog: Catalog, sizes: Iterable[int], time_limit: float, repeats: int
) -> list[dict[str, Any]]:
    """Exact solver vs planner on prefixes of `instance` with `n` nodes and 10 pods per node."""
    rows = []
    for n in sizes:
        sub = subset(instance, n, 10 * n)
        snap = sub.snapshot(catalog)
        ex = exact.solve(snap, time_limit=time_limit)
        plan_s, result = best_of(lambda s=snap: plan(s), repeats)  # type: ignore[misc]
        rows.append(
            {
                "nodes": n,
                "gpus": sub.gpus,
                "pods": len(sub.pods),
                "exact_status": ex.status,
                "exact_s": ex.seconds,
                "plan_s": plan_s,
                "plan_over_exact": plan_s / ex.seconds if ex.seconds else None,
                "planner": list(result.objective()),
                "exact": list(ex.objective()) if ex.optimal else None,
                "planner_tiers": list(tiers_of(snap, {a.pod for a in result.assignments})),
                "exact_tiers": [k for _, k in ex.placed_by_priority] if ex.optimal else None,
            }
        )
        if not ex.optimal:
            break
    return rows


def overloaded(instance: Instance, catalog: Catalog, nodes: int, pods: int) -> dict[str, Any]:
    """A prefix with twice the full instance's pods per node, so the first pass leaves pods that fit somewhere:
    then the whole portfolio, the squeaky rounds and the polish run. Times one `plan()` against its parse."""
    sub = subset(instance, nodes, pods)
    text = sub.json_text(catalog)
    parse_s, doc = best_of(lambda: json.loads(text), 3)
    snap = snapshot_from_objects(doc["items"], catalog)
    plan_s, result = best_of(lambda: plan(snap), 1)
    return {
        "nodes": nodes,
        "pending_pods": len(snap.pending),
        "parse_s": parse_s,
        "plan_s": plan_s,
        "plan_over_parse": plan_s / parse_s,
        "pods_placed": result.summary.pods_placed,
        "unplaceable_alone": sum(1 for w in min_waste(snap.pending, snap.nodes).values() if w is None),
    }


def pinned(instance: Instance, catalog: Catalog, nodes: int, pods: int) -> dict[str, Any]:
    """A prefix whose pending pods each name one node by hostname, as per-node jobs and pinned replicas do: each
    pod the unpinned plan places is pinned to the node it gives it (so a plan placing them all exists, and the
    pass is timed, not the portfolio that left-out pods start), the others keep their selectors. `plan()` of it
    against `plan()` of the same pods unpinned, in the same run. Every pinned node is a placement signature of its
    own; the nodes a signature may use come from a label index (`NodeIndex`), not from a check of every node."""
    sub = subset(instance, nodes, pods)
    plain = snapshot_from_objects(sub.objects(catalog), catalog)
    plain_s, plain_plan = best_of(lambda: plan(plain), 1)
    on = {a.pod.split("/", 1)[1]: a.node for a in plain_plan.assignments}
    pins = tuple(replace(p, selector=((HOSTNAME_LABEL, on[p.name]),)) if p.name in on else p for p in sub.pods)
    pinned_snap = snapshot_from_objects(replace(sub, pods=pins).objects(catalog), catalog)
    pinned_s, pinned_plan = best_of(lambda: plan(pinned_snap), 1)
    return {
        "nodes": nodes,
        "pending_pods": len(pinned_snap.pending),
        "signatures": len({signature(p) for p in pinned_snap.pending}),
        "unpinned_plan_s": plain_s,
        "pinned_plan_s": pinned_s,
        "pinned_over_unpinned": pinned_s / plain_s,
        "unpinned_placed": plain_plan.summary.pods_placed,
        "pinned_placed": pinned_plan.summary.pods_placed,
    }


def multi_unit(instance: Instance, catalog: Catalog, nodes: int, pods: int) -> dict[str, Any]:
    """A prefix where every third pending pod asks for two units of its request (two MIG instances, or two
    containers' VRAM), so `_place_multi` tries it on every node its signature reaches: the first greedy pass of
    it against the same pass with those pods asking for one unit, in the same run. A node's trial is remembered
    per pod class until the node changes (`Greedy._place_multi`), so most pods read it instead of trying again."""
    sub = subset(instance, nodes, pods)
    one = snapshot_from_objects(sub.objects(catalog), catalog)
    doubled = tuple(
        replace(p, gpu=tuple(replace(d, count=2) for d in p.gpu)) if p.pending and i % 3 == 0 else p
        for i, p in enumerate(one.pods)
    )
    two = replace(one, pods=doubled)
    demand = forecast(one, PlannerSettings())

    def first_pass(snap: Snapshot) -> Plan:
        return Planner(snap, PlannerSettings(), shapes={}, completions={}, demand=demand).run()

    one_s, one_plan = best_of(lambda: first_pass(one), 1)
    two_s, two_plan = best_of(lambda: first_pass(two), 1)
    return {
        "nodes": nodes,
        "pending_pods": len(two.pending),
        "two_unit_pods": sum(1 for p in two.pending if p.units > 1),
        "one_unit_pass_s": one_s,
        "two_unit_pass_s": two_s,
        "two_unit_over_one_unit": two_s / one_s,
        "one_unit_placed": one_plan.summary.pods_placed,
        "two_unit_placed": two_plan.summary.pods_placed,
    }


def run(
    nodes: int = 1000,
    pods: int = 10_000,
    repeats: int = 3,
    ladder: Iterable[int] = (2, 4, 8, 16, 32),
    exact_time_limit: float = 60.0,
    profile: bool = True,
) -> dict[str, Any]:
    catalog = load_catalog()
    t0 = time.perf_counter()
    inst = scale_instance(catalog, nodes=nodes, pods=pods)
    text = inst.json_text(catalog)
    gen_s = time.perf_counter() - t0

    parse_s, doc = best_of(lambda: json.loads(text), repeats)
    objects = doc["items"]

    def cold() -> Snapshot:
        forget_parsed()
        return snapshot_from_objects(objects, catalog)

    whole = dry_run(text, repeats)
    adapter_s, snap = best_of(cold, repeats)
    adapter_warm_s, _ = best_of(lambda: snapshot_from_objects(objects, catalog), repeats)
    plan_s, result = best_of(lambda: plan(snap), repeats)
    inc = incremental(objects, catalog, repeats)

    check = subset(inst, min(nodes, 100), min(pods, 1000))  # the adapter round trip, on a prefix (cheaper)
    check_parsed = snapshot_from_objects(json.loads(check.json_text(catalog))["items"], catalog)
    same = plan(check.snapshot(catalog)).objective() == plan(check_parsed).objective()
    s = result.summary
    tiers = tiers_of(snap, {a.pod for a in result.assignments})
    lb = stranded_lower_bound(snap, tiers)
    stranded = s.internal_waste_mib + s.unusable_mib
    out: dict[str, Any] = {
        "nodes": len(inst.nodes),
        "gpus": inst.gpus,
        "pending_pods": len(snap.pending),
        "objects": len(objects),
        "json_mib": len(text.encode()) / 2**20,
        "generate_s": gen_s,
        "parse_s": parse_s,
        "adapter_s": adapter_s,
        "adapter_warm_s": adapter_warm_s,
        "plan_s": plan_s,
        "plan_over_parse": plan_s / parse_s,
        "adapter_plus_plan_over_parse": (adapter_s + plan_s) / parse_s,
        **whole,
        **inc,
        "pods_placed": s.pods_placed,
        "placed_by_tier": list(tiers),
        "gpus_reconfigured": s.gpus_reconfigured,
        "stranded_mib": stranded,
        "internal_waste_mib": s.internal_waste_mib,
        "unusable_mib": s.unusable_mib,
        "stranded_lower_bound_mib": lb,
        "gap_to_bound_pct": 100.0 * (stranded - lb) / lb if lb else None,
        "all_placed": s.pods_placed == len(snap.pending),
        "unplaceable_alone": sum(
            1 for w in min_waste(snap.pending, snap.nodes).values() if w is None
        ),  # no node could serve the pod even on an empty cluster
        "direct_snapshot_same_objective": same,
        "model_kinds": dict(Counter(n.model for n in inst.nodes)),
        "exact_ladder": exact_ladder(inst, catalog, ladder, exact_time_limit, repeats),
        "overloaded": overloaded(inst, catalog, max(1, nodes // 5), 4 * pods // 10),
        "pinned": pinned(inst, catalog, nodes, pods),
        "fallback": fallback(objects, catalog),
        "multi_unit": multi_unit(inst, catalog, max(1, nodes // 4), pods // 4),
    }
    if profile:
        prefix = subset(inst, min(nodes, 200), min(pods, 2000))
        out["profile_instance"] = prefix.name
        out["profile"] = profile_plan(snapshot_from_objects(prefix.objects(catalog), catalog))
        out["profile_adapter"] = profile_adapter(objects, catalog)
    return out
