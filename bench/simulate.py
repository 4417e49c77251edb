"""Simulation benchmark: the FGD-paper validation (full protocol) and the MIG policy comparison.

    python -m bench.simulate validate [--seeds 42-51]      # continuous BestFit/FGD vs the paper (≈3 min)
    python -m bench.simulate table RESULTS.json [MORE.json]      # markdown tables of `mig --json` runs
    python -m bench.simulate mig [--seeds 42-44] [--plot docs/img] [--reconfig 60,20] [--readvertise 5,30]
        [--only miso,genai]
        # MIG policies: openb (packing) and every workload with departures at each median reconfiguration time;
        # migctl-inplace also at each further median re-advertise window

Results are printed (and, with --json FILE, written); docs/simulation.md quotes these runs.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import numpy as np

from migctl.core.hardware.catalog import load_catalog
from migctl.sim.continuous import run_protocol, typical_pods
from migctl.sim.names import DEFAULT_READVERTISE_S
from migctl.sim.report import format_table, plot
from migctl.sim.scenario import ALL_POLICIES, MIG_POLICIES, Scenario, load_cluster
from migctl.sim.workloads import OPENB, data_dir, load_openb_nodes, load_openb_pods

PAPER = {"bestfit": 93.08, "fgd": 95.39}  # fgd-atc23-expected-results/summary_derived.csv, default, @130%
TOLERANCE = 0.5


def _seeds(spec: str) -> list[int]:
    if "-" in spec:
        lo, hi = (int(x) for x in spec.split("-"))
        return list(range(lo, hi + 1))
    return [int(s) for s in spec.split(",")]


def validate(seeds: list[int]) -> dict[str, object]:
    d = data_dir(OPENB)
    pods = load_openb_pods(d / "openb_pod_list_default.csv")
    nodes = load_openb_nodes(d / "openb_node_list_gpu_node.csv")
    tp = typical_pods(pods)
    out: dict[str, object] = {}
    ok = True
    for policy in ("bestfit", "fgd"):
        vals, t0 = [], time.perf_counter()
        for seed in seeds:
            c = run_protocol(pods, nodes, policy, seed, typical=tp)
            vals.append((c.alloc_pct_at(100), c.alloc_pct_at(130)))
        arr = np.array(vals)
        mean130 = float(arr[:, 1].mean())
        passed = abs(mean130 - PAPER[policy]) <= TOLERANCE
        ok &= passed
        out[policy] = {
            "alloc_at_100": [round(float(x), 3) for x in arr[:, 0]],
            "alloc_at_130": [round(float(x), 3) for x in arr[:, 1]],
            "mean_at_100": round(float(arr[:, 0].mean()), 3),
            "mean_at_130": round(mean130, 3),
            "std_at_130": round(float(arr[:, 1].std()), 3),
            "paper_at_130": PAPER[policy],
            "pass": passed,
            "seconds": round(time.perf_counter() - t0, 1),
        }
        print(
            f"{policy:8s} alloc@130 {mean130:.2f} ± {arr[:, 1].std():.2f} (paper {PAPER[policy]:.2f}, "
            f"{'PASS' if passed else 'FAIL'} ±{TOLERANCE}); @100 {arr[:, 0].mean():.2f}; "
            f"{len(seeds)} seeds in {time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    out["pass"] = ok
    return out


# Workloads with departures, on an A100 and an H100 cluster each; openb (no departures) is the packing check.
TIMED = (
    ("miso", "2x4", "a100-40gb"),
    ("miso", "1x4", "h100-80gb"),
    ("genai", "8x8", "a100-40gb"),
    ("genai", "4x8", "h100-80gb"),
)
PACKING = (("openb", "openb/8", "h100-80gb"), ("openb", "openb/8", "a100-40gb"))


def mig(
    seeds: list[int],
    plot_dir: Path | None,
    medians: list[float],
    only: str | None,
    json_path: Path | None = None,
    readvertise: tuple[float, ...] = (DEFAULT_READVERTISE_S,),
    policies: tuple[str, ...] | None = None,
) -> dict[str, object]:
    """Every scenario at each median reconfiguration time, at the first re-advertise median; the other
    re-advertise medians run `migctl-inplace` alone (the only policy they change), keyed `...:a<s>:r<median>`."""
    cat = load_catalog()
    runs: list[tuple[str, str, str, tuple[str, ...], float, float]] = []
    for workload, cluster, model in PACKING:
        runs.append((workload, cluster, model, ALL_POLICIES, medians[0], readvertise[0]))
    for workload, cluster, model in TIMED:
        for median in medians:
            runs.append((workload, cluster, model, policies or MIG_POLICIES, median, readvertise[0]))
            if policies is None:
                runs.extend((workload, cluster, model, ("migctl-inplace",), median, a) for a in readvertise[1:])
    out: dict[str, object] = {}
    for workload, cluster, model, names, median, window in runs:
        extra = f":a{window:g}" if window != readvertise[0] else ""
        key = f"{workload}:{cluster}:{model}{extra}:r{median:g}"
        if only and not any(part in key for part in only.split(",")):
            continue
        t0 = time.perf_counter()
        sc = Scenario(
            workload,
            load_cluster(cluster),
            cat.model(model),
            names,
            seeds,
            reconfig_s=median,
            readvertise_s=window,
        )
        sc.run()
        print(format_table(sc), f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
        if plot_dir is not None:
            plot(sc, plot_dir)
        out[key] = sc.to_dict()
        if json_path is not None:  # after every scenario: a long grid keeps what it has finished
            json_path.write_text(json.dumps(out, indent=1, default=lambda o: None))
    return out


MD_COLUMNS = (
    ("alloc_pct", "alloc%", 1),
    ("placed_pods_pct", "pods%", 1),
    ("pending_s_mean", "pend s", 0),
    ("internal_pct", "internal%", 1),
    ("reconfigs_per_1k", "reconf/1k", 0),
    ("node_pauses_per_1k", "pauses/1k", 1),
    ("plan_ms_p50", "plan ms", 1),
)


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One results dict from runs of the same scenarios on different seeds: runs concatenated, mean ± std again."""
    out: dict[str, Any] = {}
    for part in parts:
        for key, sc in part.items():
            if key not in out:
                out[key] = json.loads(json.dumps(sc))
                continue
            have = out[key]
            have["seeds"] = have["seeds"] + sc["seeds"]
            for policy, runs in sc["runs"].items():
                have["runs"].setdefault(policy, []).extend(runs)
    for sc in out.values():
        for policy, runs in sc["runs"].items():
            for m in runs[0]:
                vals = np.array([np.nan if r.get(m) is None else r[m] for r in runs], dtype=np.float64)
                ok = not np.all(np.isnan(vals))
                sc["metrics"][policy][m] = {
                    "mean": float(np.nanmean(vals)) if ok else None,
                    "std": float(np.nanstd(vals)) if ok else None,
                }
    return out


def markdown(results: dict[str, Any]) -> str:
    """docs/simulation.md tables from a `mig --json` file: one table per workload and cluster, both
    reconfiguration times side by side (mean ± std over the seeds)."""
    from migctl.sim.report import label

    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, sc in results.items():
        groups.setdefault(key.rsplit(":r", 1)[0], []).append((key.rsplit(":r", 1)[1], sc))
    out = []
    for group, runs in groups.items():
        runs.sort(key=lambda r: -float(r[0]))
        first = runs[0][1]
        out.append(f"#### {group} (seeds {', '.join(map(str, first['seeds']))})\n")
        out.append(f"Reconfiguration time: {'; '.join(str(sc['reconfig']) for _, sc in runs)}.\n")
        head = ["policy"] + [f"{name} @{r}s" for r, _ in runs for _, name, _ in MD_COLUMNS]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|" + "---:|" * (len(head) - 1))
        for policy in first["metrics"]:
            cells = [label(policy)]
            for _, sc in runs:
                m = sc["metrics"][policy]
                for key, _, digits in MD_COLUMNS:
                    mean, std = m[key]["mean"], m[key]["std"]
                    if mean is None or math.isnan(mean):  # not defined for this policy
                        cells.append("n/a")
                        continue
                    d = 0 if abs(mean) >= 1000 else digits
                    cells.append(f"{mean:.{d}f}±{std:.{d}f}" if len(sc["seeds"]) > 1 else f"{mean:.{d}f}")
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["validate", "mig", "table"])
    ap.add_argument("files", nargs="*", type=Path, help="table: `mig --json` results files (seeds are merged)")
    ap.add_argument("--seeds", default=None)
    ap.add_argument("--plot", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--reconfig", default="60,20", help="median reconfiguration times to report (s), comma-separated")
    ap.add_argument("--readvertise", default="5", help="median re-advertise windows (s); the first for every policy")
    ap.add_argument("--policies", default=None, help="mig: these policies instead of every MIG policy (timed runs)")
    ap.add_argument("--only", default=None, help="comma-separated substrings of run keys, e.g. miso:1x4 or genai")
    a = ap.parse_args()
    if a.what == "table":
        if not a.files:
            ap.error("table needs the results file(s) of `mig --json`")
        print(markdown(merge([json.loads(f.read_text()) for f in a.files])))
        return
    seeds = _seeds(a.seeds or ("42-51" if a.what == "validate" else "42-44"))
    medians = [float(x) for x in a.reconfig.split(",")]
    windows = tuple(float(x) for x in a.readvertise.split(","))
    chosen = tuple(a.policies.split(",")) if a.policies else None
    res = validate(seeds) if a.what == "validate" else mig(seeds, a.plot, medians, a.only, a.json, windows, chosen)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1, default=lambda o: None))


if __name__ == "__main__":
    main()
