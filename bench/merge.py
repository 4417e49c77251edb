"""`python -m bench.merge A.json B.json ... [--json OUT]`: one quality table from runs of `python -m bench --json`
over disjoint instances (e.g. seed ranges run side by side), summarised as one run would be.

.venv/bin/python -m bench.merge r0.json r50.json trace.json hard.json --json bench-results.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.__main__ import print_quality, print_scale
from bench.instances import TRACE_FAMILIES
from bench.quality import Record, summarize


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    records = [Record(**{**r, "planner_tiers": tuple(r["planner_tiers"]), "exact_tiers": tuple(r["exact_tiers"]),
                         "heuristic_tiers": tuple(r.get("heuristic_tiers", ()))})
               for run in runs if "quality" in run for r in run["quality"]["records"]]  # fmt: skip
    names = [r.name for r in records]
    if len(set(names)) != len(names):
        raise SystemExit("bench.merge: the runs share instances; merge runs over disjoint instances only")
    groups: dict[str, list[Record]] = {"all": records}
    for fam in ("random", "hard", "trace", *TRACE_FAMILIES):
        members = [r for r in records if (r.family not in ("random", "hard") if fam == "trace" else r.family == fam)]
        if members:
            groups[fam] = members
    params = [run["quality"]["params"] for run in runs if "quality" in run]
    first = params[0] if params else {}
    return {
        "params": {
            **first,
            "n_random": sum(p["n_random"] for p in params),
            "n_trace": sum(p["n_trace"] for p in params),
            "n_hard": sum(p.get("n_hard", 0) for p in params),
            "runs": params,
        },
        "summary": {k: summarize(v) for k, v in groups.items()},
        "records": [r for run in runs if "quality" in run for r in run["quality"]["records"]],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.merge", description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("runs", nargs="+", type=Path, help="JSON files of `python -m bench --json`")
    ap.add_argument("--json", type=Path, help="write the merged results here")
    a = ap.parse_args(argv)
    runs = [json.loads(p.read_text(encoding="utf-8")) for p in a.runs]
    out: dict[str, Any] = {"argv": [str(p) for p in a.runs], "sources": [r.get("argv") for r in runs]}
    if any("quality" in r for r in runs):
        out["quality"] = merge(runs)
        print_quality(out["quality"])
    scales = [r["scale"] for r in runs if "scale" in r]
    if scales:
        out["scale"] = scales[0]
        print_scale(scales[0])
    if a.json:
        a.json.write_text(json.dumps(out, indent=1, sort_keys=True), encoding="utf-8")
    violations = out.get("quality", {}).get("summary", {}).get("all", {}).get("violations", [])
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
