"""Quality run: the planner's objectives 1-2 against the exact optimum over many seeded instances.

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
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from bench import exact
from bench.instances import (
    TRACE_FAMILIES,
    Instance,
    hard_instance,
    random_instance,
    trace_available,
    trace_instance,
)
from migctl.core.catalog import Catalog, load_catalog
from migctl.core.cluster import Snapshot
from migctl.core.plan import Plan
from migctl.core.planner import plan
from migctl.core.settings import ExactSettings, PlannerSettings

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


def tiers_of(snapshot: Snapshot, placed: Iterable[str]) -> tuple[int, ...]:
    """Pods placed per priority tier of the pending pods, highest priority first."""
    prio = {p.key: p.priority for p in snapshot.pending}
    count = Counter(prio[k] for k in placed if k in prio)
    return tuple(count[t] for t in sorted(set(prio.values()), reverse=True))


def compare(inst: Instance, catalog: Catalog, time_limit: float) -> Record:
    snap = inst.snapshot(catalog)
    t0 = time.perf_counter()
    result: Plan = plan(snap)
    planner_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    shared = plan(snap, SHARED)
    shared_s = time.perf_counter() - t0
    s_tiers, s_stranded = tiers_of(snap, {a.pod for a in shared.assignments}), shared.objective()[1]
    ex = exact.solve(snap, time_limit=time_limit)
    p_tiers = tiers_of(snap, {a.pod for a in result.assignments})
    e_tiers = tiers_of(snap, [k for k, _, _ in ex.assignments])
    p_placed, p_stranded = result.objective()
    h_tiers: tuple[int, ...] = ()
    h_stranded, h_s = -1, 0.0
    if inst.family == "hard":
        t0 = time.perf_counter()
        alone = plan(snap, HEURISTIC)
        h_s = time.perf_counter() - t0
        h_tiers, h_stranded = tiers_of(snap, {a.pod for a in alone.assignments}), alone.objective()[1]
    violation = ""
    if ex.optimal:
        problems = exact.verify(snap, ex)
        if problems:
            violation = "exact solution fails verification: " + "; ".join(problems[:3])
        elif e_tiers != tuple(n for _, n in ex.placed_by_priority):
            violation = f"decoded tiers {e_tiers} != solver tiers {ex.placed_by_priority}"
        elif p_tiers > e_tiers:
            violation = f"planner places more than the optimum: {p_tiers} > {e_tiers}"
        elif p_tiers == e_tiers and p_stranded < ex.stranded_mib:
            violation = f"planner strands less than the optimum: {p_stranded} < {ex.stranded_mib}"
        elif s_tiers > e_tiers:
            violation = f"planner (forecast off) places more than the optimum: {s_tiers} > {e_tiers}"
        elif s_tiers == e_tiers and s_stranded < ex.stranded_mib:
            violation = f"planner (forecast off) strands less than the optimum: {s_stranded} < {ex.stranded_mib}"
    return Record(
        inst.name,
        inst.family,
        inst.gpus,
        len(snap.pending),
        ex.status,
        p_tiers,
        e_tiers,
        p_placed,
        ex.pods_placed,
        p_stranded,
        ex.stranded_mib,
        planner_s,
        ex.seconds,
        violation,
        h_tiers,
        h_stranded,
        h_s,
        s_tiers,
        s_stranded,
        shared_s,
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
        "planner_s": _dist([r.planner_s for r in records]),
        "exact_s": _dist([r.exact_s for r in solved]),
        "violations": [f"{r.name}: {r.violation}" for r in records if r.violation],
        "not_solved": [f"{r.name}: {r.status}" for r in records if r.status != "optimal"],
    }


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
) -> dict[str, Any]:
    catalog = load_catalog()
    records = []
    for inst in instances(catalog, n_random, n_trace, max_gpus, max_pods, seed0, n_hard):
        rec = compare(inst, catalog, time_limit)
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
