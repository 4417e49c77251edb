"""Quality run: the planner's objective against the exact optimum over many seeded instances.

For each instance: `plan(snapshot)`, `plan(snapshot, forecast off)` and `exact.solve(snapshot)`. The reference
proves the planner's objective for the snapshot's pods alone, which is what the planner optimises with
`planner.forecast: false`: that plan is compared to it as the planner's own objective (`shared_*`). The default
plan also chooses spare instances for the forecast demand, which trades stranded MiB now by design
(docs/planning.md); its figures show what that trade costs against the optimum. Objective 1 is compared as the
vector of pods placed per priority tier (highest first, compared lexicographically, as the planner ranks
plans); objective 2 (stranded MiB = internal waste + unusable MiB of changed GPUs) only where objective 1 ties.
A planner result that is lexicographically better than the proven optimum (or ties on objective 1 with fewer
stranded MiB) would mean a bug in one of the two: it is flagged as a violation, as is any problem
`exact.verify` finds in the ILP solution.

The objective's two parts are judged apart, as the planner computes them (docs/planning.md, "Objective"): the
placement (`place()`: objectives 1-3) against the reference above (`placed_*`), and the forecast term (`shape()`:
the layouts for the demand to come, the pods left where the placement put them) against its own exact model,
solved to optimality on the placement's plan (`term_*`: the greedy alone, and the plan, which adds the model's
step on small snapshots). `--reference FILE` takes the placement reference's results, and the forecast-off plan's,
from an earlier run of the same instances instead of computing them again (the ILP is most of a run's time).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import numpy as np

from bench import exact
from bench.instance_spec import Instance
from bench.instances import (
    TRACE_FAMILIES,
    hard_instance,
    random_instance,
    trace_available,
    trace_instance,
)
from migctl.core.budget import WorkBudget
from migctl.core.exact import forecast_model
from migctl.core.exact.solve import solve
from migctl.core.forecast.estimate import forecast
from migctl.core.forecast.over_time import for_the_forecast
from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import ExactSettings, PlannerSettings
from migctl.core.planner import place, plan

HEURISTIC = PlannerSettings(exact=ExactSettings(enabled=False))
SHARED = PlannerSettings(forecast=False)  # the objective the exact reference proves


@dataclass(frozen=True)
class Record:
    name: str
    family: str
    gpus: int
    pods: int
    status: str  # of the exact solver
    planner_tiers: tuple[int, ...]
    exact_tiers: tuple[int, ...]
    planner_placed: int
    exact_placed: int
    planner_stranded: int
    exact_stranded: int
    planner_s: float
    exact_s: float
    violation: str = ""
    # the heuristic alone (exact solver off), for the `hard` family only: what the exact solver adds
    heuristic_tiers: tuple[int, ...] = ()
    heuristic_stranded: int = -1
    heuristic_s: float = 0.0
    # the planner with the forecast off: the objective the reference proves
    shared_tiers: tuple[int, ...] = ()
    shared_stranded: int = -1
    shared_s: float = 0.0
    # the default plan's placement (before the forecast term) and the term: (served, stranded) stage values of
    # the greedy's layouts, of the plan's and of the term's optimum on that placement (empty: no forecast)
    placed_tiers: tuple[int, ...] = ()
    placed_stranded: int = -1
    term_greedy: tuple[int, ...] = ()
    term_plan: tuple[int, ...] = ()
    term_optimum: tuple[int, ...] = ()
    term_proven: bool = False

    def matches(self, tiers: tuple[int, ...], stranded: int | None = None) -> bool:
        """Whether a plan's tiers (and, when given, its stranded MiB) are the optimum's."""
        return tiers == self.exact_tiers and (stranded is None or stranded == self.exact_stranded)

    @property
    def tiers_match(self) -> bool:
        return self.matches(self.planner_tiers)

    @property
    def exact_match(self) -> bool:
        return self.matches(self.planner_tiers, self.planner_stranded)

    @property
    def shared_tiers_match(self) -> bool:
        return self.matches(self.shared_tiers)

    @property
    def shared_exact_match(self) -> bool:
        return self.matches(self.shared_tiers, self.shared_stranded)

    @property
    def placed_tiers_match(self) -> bool:
        return self.matches(self.placed_tiers)

    @property
    def placed_exact_match(self) -> bool:
        return self.matches(self.placed_tiers, self.placed_stranded)

    def term_match(self, values: tuple[int, ...], stages: int = 2) -> bool:
        """Whether the term's first `stages` values are the proven optimum's."""
        return self.term_proven and values[:stages] == self.term_optimum[:stages]


# Branch-and-bound nodes per stage of the forecast term's reference solve (its models are small).
TERM_NODES = 50_000


def forecast_term(snap: Snapshot, result: Plan) -> tuple[Plan, tuple[int, ...], tuple[int, ...], tuple[int, ...], bool]:
    """The default plan's placement and, on it, the term's values: the greedy's, `result`'s, the optimum's, and
    whether the optimum is proven. The placement is computed again here (`plan()` is timed whole, as users call
    it); it raises when a layout of `result` or of the greedy is not an option of the term's model."""
    s = PlannerSettings()
    demand = forecast(snap, s)
    placed = place(snap, s, WorkBudget.for_snapshot(snap, s), demand)
    if not demand.models:
        return placed, (), (), (), True
    fm = forecast_model.build(placed, snap, s, demand)
    greedy = forecast_model.value(fm, for_the_forecast(placed, snap, s, demand), TERM_NODES)
    mine = forecast_model.value(fm, result, TERM_NODES)
    best = solve(fm.model, nodes=TERM_NODES)
    if greedy is None or mine is None or best is None:
        raise AssertionError(f"the forecast term's model does not cover the plan's layouts: {greedy} {mine} {best}")
    return placed, greedy, mine, tuple(st.value for st in best.stages), best.proven


def tiers_of(snapshot: Snapshot, placed: Iterable[str]) -> tuple[int, ...]:
    """Pods placed per priority tier of the pending pods, highest priority first."""
    prio = {p.key: p.priority for p in snapshot.pending}
    count = Counter(prio[k] for k in placed if k in prio)
    return tuple(count[t] for t in sorted(set(prio.values()), reverse=True))


def compare(inst: Instance, catalog: Catalog, time_limit: float, reference: Record | None = None) -> Record:
    """One instance's record; `reference`: the same instance's record from an earlier run, whose exact results
    are taken instead of solving the ILP again."""
    snap = inst.snapshot(catalog)
    t0 = time.perf_counter()
    result: Plan = plan(snap)
    planner_s = time.perf_counter() - t0
    if reference is None or not reference.shared_tiers:
        t0 = time.perf_counter()
        shared = plan(snap, SHARED)
        shared_s = time.perf_counter() - t0
        s_tiers, s_stranded = tiers_of(snap, {a.pod for a in shared.assignments}), shared.objective()[1]
    else:  # the forecast-off plan does not depend on the forecast term: the earlier run's stands
        s_tiers, s_stranded, shared_s = tuple(reference.shared_tiers), reference.shared_stranded, reference.shared_s
    placed, term_greedy, term_plan, term_optimum, term_proven = forecast_term(snap, result)
    pl_tiers, pl_stranded = tiers_of(snap, {a.pod for a in placed.assignments}), placed.objective()[1]
    if reference is None:
        ex = exact.solve(snap, time_limit=time_limit)
        e_status, e_placed, e_stranded, e_s = ex.status, ex.pods_placed, ex.stranded_mib, ex.seconds
        e_tiers = tiers_of(snap, [k for k, _, _ in ex.assignments])
    else:
        if reference.name != inst.name or reference.pods != len(snap.pending) or reference.gpus != inst.gpus:
            raise ValueError(f"reference record {reference.name} is not instance {inst.name}")
        e_status, e_placed, e_stranded, e_s = (
            reference.status, reference.exact_placed, reference.exact_stranded, reference.exact_s
        )  # fmt: skip
        e_tiers = tuple(reference.exact_tiers)
    p_tiers = tiers_of(snap, {a.pod for a in result.assignments})
    p_placed, p_stranded = result.objective()
    h_tiers: tuple[int, ...] = ()
    h_stranded, h_s = -1, 0.0
    if inst.family == "hard":
        t0 = time.perf_counter()
        alone = plan(snap, HEURISTIC)
        h_s = time.perf_counter() - t0
        h_tiers, h_stranded = tiers_of(snap, {a.pod for a in alone.assignments}), alone.objective()[1]
    violation = ""
    problems = exact.verify(snap, ex) if reference is None and ex.optimal else []
    if reference is None and ex.optimal and e_tiers != tuple(n for _, n in ex.placed_by_priority):
        problems = [f"decoded tiers {e_tiers} != solver tiers {ex.placed_by_priority}"]
    if term_proven and (term_greedy < term_optimum or term_plan < term_optimum):
        violation = f"the forecast term beats its proven optimum: {term_greedy} / {term_plan} < {term_optimum}"
    elif e_status == "optimal":
        if problems:
            violation = "exact solution fails verification: " + "; ".join(problems[:3])
        elif pl_tiers > e_tiers or (pl_tiers == e_tiers and pl_stranded < e_stranded):
            violation = f"the placement beats the optimum: {pl_tiers}, {pl_stranded} MiB"
        elif p_tiers > e_tiers:
            violation = f"planner places more than the optimum: {p_tiers} > {e_tiers}"
        elif p_tiers == e_tiers and p_stranded < e_stranded:
            violation = f"planner strands less than the optimum: {p_stranded} < {e_stranded}"
        elif s_tiers > e_tiers:
            violation = f"planner (forecast off) places more than the optimum: {s_tiers} > {e_tiers}"
        elif s_tiers == e_tiers and s_stranded < e_stranded:
            violation = f"planner (forecast off) strands less than the optimum: {s_stranded} < {e_stranded}"
    return Record(
        inst.name,
        inst.family,
        inst.gpus,
        len(snap.pending),
        e_status,
        p_tiers,
        e_tiers,
        p_placed,
        e_placed,
        p_stranded,
        e_stranded,
        planner_s,
        e_s,
        violation,
        h_tiers,
        h_stranded,
        h_s,
        s_tiers,
        s_stranded,
        shared_s,
        pl_tiers,
        pl_stranded,
        term_greedy,
        term_plan,
        term_optimum,
        term_proven,
    )


def _dist(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    a = np.asarray(values, dtype=float)
    return {
        "n": len(a),
        "mean": float(a.mean()),
        "median": float(np.median(a)),
        "p95": float(np.percentile(a, 95)),
        "max": float(a.max()),
    }


def summarize(records: Sequence[Record]) -> dict[str, Any]:
    solved = [r for r in records if r.status == "optimal"]
    tie = [r for r in solved if r.tiers_match]
    shared_tie = [r for r in solved if r.shared_tiers_match]

    def pct(flags: Sequence[bool]) -> float:
        return 100.0 * sum(flags) / len(flags) if flags else 0.0

    return {
        "instances": len(records),
        "solved_optimal": len(solved),
        "objective1_match_pct": 100.0 * len(tie) / len(solved) if solved else 0.0,
        "exact_match_pct": 100.0 * sum(r.exact_match for r in solved) / len(solved) if solved else 0.0,
        "pods_gap": _dist([r.exact_placed - r.planner_placed for r in solved]),
        "pods_gap_pct": _dist([100.0 * (r.exact_placed - r.planner_placed) / max(1, r.exact_placed) for r in solved]),
        "top_tier_gap": _dist([r.exact_tiers[0] - r.planner_tiers[0] for r in solved if r.exact_tiers]),
        "stranded_gap_mib_where_obj1_ties": _dist([r.planner_stranded - r.exact_stranded for r in tie]),
        "stranded_gap_pct_where_obj1_ties": _dist(
            [100.0 * (r.planner_stranded - r.exact_stranded) / max(1, r.exact_stranded) for r in tie]
        ),
        "shared_objective1_match_pct": pct([r.shared_tiers_match for r in solved]),
        "shared_exact_match_pct": pct([r.shared_exact_match for r in solved]),
        "shared_stranded_gap_pct_where_obj1_ties": _dist(
            [100.0 * (r.shared_stranded - r.exact_stranded) / max(1, r.exact_stranded) for r in shared_tie]
        ),
        # what the forecast's choice of spare instances costs in stranded MiB now, where both place the same pods
        "forecast_stranded_cost_pct": _dist(
            [
                100.0 * (r.planner_stranded - r.shared_stranded) / max(1, r.shared_stranded)
                for r in solved
                if r.planner_tiers == r.shared_tiers
            ]
        ),
        "placed_objective1_match_pct": pct([r.placed_tiers_match for r in solved]),
        "placed_exact_match_pct": pct([r.placed_exact_match for r in solved]),
        "term_instances": sum(1 for r in records if r.term_optimum),
        "term_proven": sum(1 for r in records if r.term_optimum and r.term_proven),
        "term_served_greedy_match_pct": pct([r.term_match(r.term_greedy, 1) for r in records if r.term_optimum]),
        "term_greedy_match_pct": pct([r.term_match(r.term_greedy) for r in records if r.term_optimum]),
        "term_served_plan_match_pct": pct([r.term_match(r.term_plan, 1) for r in records if r.term_optimum]),
        "term_plan_match_pct": pct([r.term_match(r.term_plan) for r in records if r.term_optimum]),
        # served MiB the greedy leaves to the optimum, in % of the optimum's (stage 1 is minus served, in eighths)
        "term_greedy_served_gap_pct": _dist(
            [
                100.0 * (r.term_greedy[0] - r.term_optimum[0]) / max(1, -r.term_optimum[0])
                for r in records
                if r.term_optimum and r.term_proven
            ]
        ),
        "planner_s": _dist([r.planner_s for r in records]),
        "exact_s": _dist([r.exact_s for r in solved]),
        "violations": [f"{r.name}: {r.violation}" for r in records if r.violation],
        "not_solved": [f"{r.name}: {r.status}" for r in records if r.status != "optimal"],
    }


def load_records(path: Path) -> dict[str, Record]:
    """The records of an earlier run's JSON (`python -m bench --json`), by instance name."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    fields = {f.name for f in dataclass_fields(Record)}
    out = {}
    for raw in doc.get("quality", doc)["records"]:
        kept: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items() if k in fields}
        out[raw["name"]] = Record(**kept)
    return out


def instances(
    catalog: Catalog,
    n_random: int,
    n_trace: int,
    max_gpus: int = 64,
    max_pods: int = 300,
    seed0: int = 0,
    n_hard: int = 0,
) -> list[Instance]:
    """`n_random` random instances, `n_trace` trace-derived ones (spread over the trace families) and `n_hard`
    of the `hard` family."""
    out = [random_instance(seed0 + i, catalog, max_gpus, max_pods) for i in range(n_random)]
    out += [hard_instance(seed0 + i, catalog, max_gpus, max_pods) for i in range(n_hard)]
    if n_trace and trace_available():
        for i in range(n_trace):
            fam = TRACE_FAMILIES[i % len(TRACE_FAMILIES)]
            out.append(trace_instance(fam, seed0 + i, catalog, max_gpus, max_pods))
    return out


def run(
    n_random: int = 100,
    n_trace: int = 40,
    max_gpus: int = 64,
    max_pods: int = 300,
    time_limit: float = 60.0,
    seed0: int = 0,
    progress: Callable[[Record], None] | None = None,
    n_hard: int = 0,
    reference: Mapping[str, Record] | None = None,
) -> dict[str, Any]:
    """Every instance's record and the summaries per family; `reference`: earlier records by instance name, whose
    exact results are reused (`compare`)."""
    catalog = load_catalog()
    records = []
    for inst in instances(catalog, n_random, n_trace, max_gpus, max_pods, seed0, n_hard):
        rec = compare(inst, catalog, time_limit, None if reference is None else reference[inst.name])
        records.append(rec)
        if progress:
            progress(rec)
    groups: dict[str, list[Record]] = {"all": records, "random": [r for r in records if r.family == "random"]}
    if n_hard:
        groups["hard"] = [r for r in records if r.family == "hard"]
    trace = [r for r in records if r.family not in ("random", "hard")]
    if trace:
        groups["trace"] = trace
        for fam in TRACE_FAMILIES:
            groups[fam] = [r for r in records if r.family == fam]
    return {
        "params": {
            "n_random": n_random,
            "n_trace": n_trace if trace else 0,
            "n_hard": n_hard,
            "max_gpus": max_gpus,
            "max_pods": max_pods,
            "time_limit_s": time_limit,
            "seed0": seed0,
            "trace_data": trace_available(),
        },
        "summary": {k: summarize(v) for k, v in groups.items() if v},
        "records": [asdict(r) for r in records],
    }
