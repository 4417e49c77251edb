"""`python -m bench`: the quality run (planner vs exact ILP) and the scale run, printed as tables.

.venv/bin/python -m bench                      # full: 100 random + 40 trace instances, 1000 nodes × 8 GPUs
.venv/bin/python -m bench --quick              # a smoke run in well under a minute
.venv/bin/python -m bench --json results.json  # also write every figure and per-instance record as JSON
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

from bench import quality, scale
from bench.quality import Record


def _fmt(d: dict[str, float], unit: str = "", digits: int = 1) -> str:
    if not d.get("n"):
        return "-"
    return (
        f"mean {d['mean']:.{digits}f}{unit}, median {d['median']:.{digits}f}{unit}, "
        f"p95 {d['p95']:.{digits}f}{unit}, max {d['max']:.{digits}f}{unit}"
    )


def print_quality(res: dict[str, Any]) -> None:
    p = res["params"]
    print(
        f"\n== Quality: planner vs exact ILP (objectives 1-2) — {p['n_random']} random + {p['n_trace']} trace "
        f"+ {p.get('n_hard', 0)} hard instances, <= {p['max_gpus']} GPUs, <= {p['max_pods']} pods, "
        f"exact time limit {p['time_limit_s']:.0f} s"
    )
    head = f"{'group':<11} {'n':>4} {'solved':>6} {'obj1 =':>7} {'exact =':>8}  {'pods gap mean/p95/max':>22}"
    head += f"  {'stranded gap % (obj1 ties) med/p95/max':>38}  {'plan s mean/max':>15}  {'ILP s med/max':>13}"
    print(head)
    for name, s in res["summary"].items():
        g, sg, pt, et = s["pods_gap"], s["stranded_gap_pct_where_obj1_ties"], s["planner_s"], s["exact_s"]
        pods = f"{g['mean']:.2f}/{g['p95']:.1f}/{g['max']:.0f}" if g.get("n") else "-"
        strand = f"{sg['median']:.1f}/{sg['p95']:.1f}/{sg['max']:.1f}" if sg.get("n") else "-"
        times = f"{pt['mean']:.3f}/{pt['max']:.3f}" if pt.get("n") else "-"
        etimes = f"{et['median']:.2f}/{et['max']:.2f}" if et.get("n") else "-"
        print(
            f"{name:<11} {s['instances']:>4} {s['solved_optimal']:>6} {s['objective1_match_pct']:>6.1f}% "
            f"{s['exact_match_pct']:>7.1f}%  {pods:>22}  {strand:>38}  {times:>15}  {etimes:>13}"
        )
    print("the planner's own objective (planner.forecast: false, what the reference proves):")
    for name, s in res["summary"].items():
        if "shared_exact_match_pct" not in s:
            continue
        sg = s["shared_stranded_gap_pct_where_obj1_ties"]
        strand = f"{sg['median']:.1f}/{sg['p95']:.1f}/{sg['max']:.1f}" if sg.get("n") else "-"
        print(
            f"{name:<11} {s['instances']:>4} {s['solved_optimal']:>6} {s['shared_objective1_match_pct']:>6.1f}% "
            f"{s['shared_exact_match_pct']:>7.1f}%  stranded gap % (obj1 ties) med/p95/max {strand}"
        )
    print(
        "the default plan in its two parts: the placement (objectives 1-3) vs the reference, and the forecast term "
        "(the layouts for the demand to come) vs its own exact model on that placement:"
    )
    print(f"{'group':<11} {'place obj1 =':>12} {'place both =':>12}  {'term n/proven':>13} {'greedy served/both =':>21}"
          f" {'plan served/both =':>19}  greedy served gap % med/p95/max")  # fmt: skip
    for name, s in res["summary"].items():
        if "term_plan_match_pct" not in s:
            continue
        tg = s["term_greedy_served_gap_pct"]
        gap = f"{tg['median']:.3f}/{tg['p95']:.3f}/{tg['max']:.3f}" if tg.get("n") else "-"
        print(
            f"{name:<11} {s['placed_objective1_match_pct']:>11.1f}% {s['placed_exact_match_pct']:>11.1f}%  "
            f"{s['term_instances']:>6}/{s['term_proven']:<6} "
            f"{s['term_served_greedy_match_pct']:>9.1f}%/{s['term_greedy_match_pct']:>5.1f}% "
            f"{s['term_served_plan_match_pct']:>9.1f}%/{s['term_plan_match_pct']:>5.1f}%  {gap}"
        )
    allv = res["summary"]["all"]
    print(
        "the forecast's stranded cost (default vs forecast off, same pods): "
        f"{_fmt(allv['forecast_stranded_cost_pct'], '%', 2)}"
    )
    print(f"pods gap % of optimum (all): {_fmt(allv['pods_gap_pct'], '%', 2)}")
    print(f"top-tier pods gap (all): {_fmt(allv['top_tier_gap'], '', 2)}")
    print(f"stranded gap MiB where obj1 ties (all): {_fmt(allv['stranded_gap_mib_where_obj1_ties'], '', 0)}")
    print(f"violations (planner better than the proven optimum, or a bad ILP solution): {len(allv['violations'])}")
    for v in allv["violations"]:
        print(f"  !! {v}")
    for v in allv["not_solved"]:
        print(f"  not proven optimal: {v}")


def print_scale(res: dict[str, Any]) -> None:
    print(
        f"\n== Scale: {res['nodes']} nodes, {res['gpus']} GPUs, {res['pending_pods']} pending pods, "
        f"{res['objects']} objects, {res['json_mib']:.1f} MiB of JSON (best of repeats, same process)"
    )
    print(f"{'step':<34} {'seconds':>9} {'÷ parse':>8}")
    for label, key in (
        ("json.loads (baseline)", "parse_s"),
        ("snapshot_from_objects", "adapter_s"),
        ("snapshot_from_objects, config cached", "adapter_warm_s"),
        ("plan()", "plan_s"),
    ):
        print(f"{label:<34} {res[key]:>9.3f} {res[key] / res['parse_s']:>8.2f}")
    print(f"planner / parse = {res['plan_over_parse']:.2f} (goal <= 1.0); (adapter + planner) / parse = "
          f"{res['adapter_plus_plan_over_parse']:.2f}")  # fmt: skip
    print(
        f"whole processes: `migctl plan --snapshot FILE -o json` {res['dry_run_process_s']:.3f} s / "
        f"`python -c json.load(FILE)` {res['load_process_s']:.3f} s = {res['dry_run_over_load']:.2f} "
        "(target <= 10, goal 3); CPU seconds "
        f"{res['dry_run_process_cpu_s']:.3f} / {res['load_process_cpu_s']:.3f} = {res['dry_run_cpu_over_load']:.2f}"
    )
    print(
        f"controller adapter: full conversion {res['adapter_full_s']:.3f} s, after one pod event "
        f"{res['adapter_one_event_s']:.3f} s = {res['adapter_one_event_over_full']:.3f} of it (converted "
        f"{res['adapter_one_event_converted']}; same snapshot as a fresh conversion: {res['adapter_one_event_same']})"
    )
    print(
        f"placed {res['pods_placed']}/{res['pending_pods']} (per tier {res['placed_by_tier']}; "
        f"{res['unplaceable_alone']} pods no node could ever serve), {res['gpus_reconfigured']} GPUs reconfigured"
    )
    gap = res["gap_to_bound_pct"]
    print(
        f"stranded {res['stranded_mib']} MiB (internal {res['internal_waste_mib']}, unusable {res['unusable_mib']}); "
        f"lower bound {res['stranded_lower_bound_mib']} MiB; gap {gap:.2f}%"
        if gap is not None
        else "no lower bound"
    )
    print(f"direct and adapter Snapshot (100-node prefix) plan alike: {res['direct_snapshot_same_objective']}")
    print(f"\n{'exact ladder: nodes':<20} {'GPUs':>5} {'pods':>5} {'ILP status':>10} {'ILP s':>8} {'plan s':>8}"
          f" {'plan/ILP':>9}  planner vs exact (placed, stranded)")  # fmt: skip
    for r in res["exact_ladder"]:
        ratio = f"{r['plan_over_exact']:.4f}" if r["plan_over_exact"] is not None else "-"
        print(
            f"{r['nodes']:<20} {r['gpus']:>5} {r['pods']:>5} {r['exact_status']:>10} {r['exact_s']:>8.2f} "
            f"{r['plan_s']:>8.3f} {ratio:>9}  {tuple(r['planner'])} vs {tuple(r['exact']) if r['exact'] else '-'}"
        )
    o = res["overloaded"]
    print(
        f"\noverloaded prefix: {o['nodes']} nodes, {o['pending_pods']} pending pods: plan() {o['plan_s']:.2f} s = "
        f"{o['plan_over_parse']:.1f}x its parse ({o['parse_s']:.3f} s); placed {o['pods_placed']}, "
        f"{o['unplaceable_alone']} no node could ever serve"
    )
    if "profile" in res:
        print(f"\n== cProfile of one plan() call on {res['profile_instance']} (own time)\n" + res["profile"])
        print("\n== cProfile of one snapshot_from_objects call, full size (own time)\n" + res["profile_adapter"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("--quick", action="store_true", help="small smoke run (20+8 instances, 100 nodes × 8 GPUs)")
    ap.add_argument("--json", type=Path, help="write all results to this JSON file")
    ap.add_argument("--random", type=int, help="random instances in the quality run (default 100; quick 20)")
    ap.add_argument("--trace", type=int, help="trace-derived instances (default 40; quick 8)")
    ap.add_argument("--hard", type=int, help="instances of the hard family (default 20; quick 4)")
    ap.add_argument("--time-limit", type=float, help="exact solver time limit per instance, s (default 60)")
    ap.add_argument("--nodes", type=int, help="scale run nodes (default 1000; quick 100)")
    ap.add_argument("--pods", type=int, help="scale run pending pods (default 10000; quick 1000)")
    ap.add_argument("--seed", type=int, default=0, help="first seed of the quality instances")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--skip-scale", action="store_true")
    ap.add_argument("--no-profile", action="store_true", help="do not cProfile plan() at scale")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line per quality instance")
    ap.add_argument(
        "--reference", type=Path, help="reuse the exact results of an earlier --json run of the same instances"
    )
    a = ap.parse_args(argv)
    q = a.quick
    results: dict[str, Any] = {
        "machine": {"python": sys.version.split()[0], "platform": platform.platform(), "processor": platform.machine()},
        "argv": sys.argv[1:] if argv is None else argv,
    }
    t0 = time.perf_counter()

    def show(r: Record) -> None:
        if a.verbose:
            print(
                f"  {r.name:<18} {r.gpus:>3} GPUs {r.pods:>3} pods  planner {r.planner_tiers} {r.planner_stranded:>8}"
                f"  exact {r.exact_tiers} {r.exact_stranded:>8} [{r.status}]  {r.planner_s:.3f}s / {r.exact_s:.2f}s"
                + (
                    f"  heuristic {r.heuristic_tiers} {r.heuristic_stranded} {r.heuristic_s:.3f}s"
                    if r.heuristic_tiers
                    else ""
                )
                + (f"  term {r.term_greedy} / {r.term_plan} / {r.term_optimum}" if r.term_optimum else "")
                + (f"  !! {r.violation}" if r.violation else ""),
                flush=True,
            )

    if not a.skip_quality:
        res = quality.run(
            n_random=a.random if a.random is not None else (20 if q else 100),
            n_trace=a.trace if a.trace is not None else (8 if q else 40),
            max_gpus=32 if q else 64,
            max_pods=120 if q else 300,
            time_limit=a.time_limit or (20.0 if q else 60.0),
            seed0=a.seed,
            progress=show,
            n_hard=a.hard if a.hard is not None else (4 if q else 20),
            reference=quality.load_records(a.reference) if a.reference else None,
        )
        results["quality"] = res
        print_quality(res)
    if not a.skip_scale:
        res = scale.run(
            nodes=a.nodes or (100 if q else 1000),
            pods=a.pods or (1000 if q else 10_000),
            repeats=3,
            ladder=(1, 2, 4) if q else (2, 4, 8, 16, 32),
            exact_time_limit=a.time_limit or (20.0 if q else 60.0),
            profile=not a.no_profile,
        )
        results["scale"] = res
        print_scale(res)
    results["total_s"] = time.perf_counter() - t0
    print(f"\ntotal {results['total_s']:.1f} s")
    if a.json:
        a.json.write_text(json.dumps(results, indent=1, sort_keys=True), encoding="utf-8")
        print(f"results written to {a.json}")
    violations = results.get("quality", {}).get("summary", {}).get("all", {}).get("violations", [])
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
