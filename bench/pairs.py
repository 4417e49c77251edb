"""`python -m bench.pairs`: are the planner's misses local to two nodes?

For each benchmark instance where the planner places fewer pods per priority than the exact optimum (read from
a results file of `python -m bench --json`), the plan's part on every node, and on every pair of nodes, is solved
again exactly with the rest of the plan fixed: the exact solver gets those nodes, the pods the plan puts there and
the pods it leaves out. A result with more pods per priority there (lexicographically) is a better plan for the
whole cluster, since every other node keeps its pods. It reports the best such gain per instance and how long the
exact solver took per group.

A development experiment behind docs/benchmarks.md ("Against the issue's goals"): it tells whether what the
planner misses could be found by placing the pods of two nodes again together, and what that costs an exact
solver; the planner's own searches of that kind (repack, reshuffle) are capped depth-first searches.

.venv/bin/python -m bench.pairs                                  # the misses in bench/last-run.json
.venv/bin/python -m bench.pairs --names random-16 random-85      # only these
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path

from bench import exact
from bench.quality import instances, tiers_of
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.planner import plan

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Gain:
    """The best exact re-placement of a group of nodes: pods per priority gained (highest priority first)."""

    delta: tuple[int, ...]
    nodes: tuple[str, ...]
    groups: int  # groups solved
    unproven: int  # groups where the exact solver hit its time limit
    seconds: float  # exact solver time over all groups


def group_snapshot(snapshot: Snapshot, result: Plan, nodes: set[str]) -> Snapshot:
    """The sub-problem of `nodes`: those nodes as they are now, their running pods, and as pending pods the pods
    `result` places on them and the pods it leaves out."""
    where = {a.pod: a.node for a in result.assignments}
    pending = [p for p in snapshot.pending if where.get(p.key) in nodes or p.key not in where]
    running = [p for p in snapshot.pods if not p.pending and p.node in nodes]
    return Snapshot(nodes=tuple(n for n in snapshot.nodes if n.name in nodes), pods=(*running, *pending))


def best_gain(snapshot: Snapshot, result: Plan, size: int = 2, time_limit: float = 20.0) -> Gain:
    """Solve every group of up to `size` nodes again exactly (`group_snapshot`); the largest gain in pods per
    priority, lexicographically (all zeros when no group gains)."""
    where = {a.pod: a.node for a in result.assignments}
    names = [n.name for n in snapshot.nodes]
    best: tuple[tuple[int, ...], tuple[str, ...]] = (tuple(0 for _ in tiers_of(snapshot, ())), ())
    groups = unproven = 0
    seconds = 0.0
    for k in range(1, size + 1):
        for group in combinations(names, k):
            chosen = set(group)
            sub = exact.solve(group_snapshot(snapshot, result, chosen), time_limit=time_limit)
            groups += 1
            seconds += sub.seconds
            if not sub.optimal:
                unproven += 1
                continue
            now = tiers_of(snapshot, [p for p, n in where.items() if n in chosen])
            got = tiers_of(snapshot, [key for key, _, _ in sub.assignments])
            delta = tuple(g - c for g, c in zip(got, now, strict=True))
            if delta > best[0]:
                best = (delta, group)
    return Gain(best[0], best[1], groups, unproven, seconds)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.pairs", description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "last-run.json", help="a `bench --json` file")
    ap.add_argument("--names", nargs="*", help="instances to look at (default: every one that misses objective 1)")
    ap.add_argument("--size", type=int, default=2, help="largest group of nodes solved again (default 2)")
    ap.add_argument("--time-limit", type=float, default=20.0, help="exact solver limit per group, seconds")
    args = ap.parse_args(argv)
    try:
        quality = json.loads(args.results.read_text())["quality"]
        records = {r["name"]: r for r in quality["records"]}
        params = quality["params"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(
            f"bench.pairs: {args.results}: expected the JSON of `python -m bench --json` with its quality run "
            f"(quality.records, quality.params); {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 2
    names = args.names or [
        n for n, r in records.items() if r["status"] == "optimal" and r["planner_tiers"] != r["exact_tiers"]
    ]
    catalog = load_catalog()
    made = instances(
        catalog,
        params["n_random"],
        params["n_trace"],
        params["max_gpus"],
        params["max_pods"],
        params["seed0"],
        params.get("n_hard", 0),
    )
    by_name = {i.name: i for i in made}
    gained = 0
    print(f"{'instance':<16} {'planner':>16} {'optimum':>16} {'best gain':>12}  nodes  groups  exact s/group")
    for name in names:
        snap = by_name[name].snapshot(catalog)
        result = plan(snap)
        t0 = time.perf_counter()
        g = best_gain(snap, result, args.size, args.time_limit)
        mine = list(tiers_of(snap, {a.pod for a in result.assignments}))
        gained += any(g.delta)
        print(
            f"{name:<16} {mine!s:>16} {records[name]['exact_tiers']!s:>16} {list(g.delta)!s:>12}  "
            f"{','.join(g.nodes) or '-'}  {g.groups} ({g.unproven} unproven)  {g.seconds / max(1, g.groups):.2f}"
            f"  [{time.perf_counter() - t0:.0f} s]",
            flush=True,
        )
    print(f"{gained} of {len(names)} instances gain pods per priority from one group of up to {args.size} nodes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
