"""Terminal table, CSV files and PNG plots for a scenario (matplotlib is optional: the `sim` extra)."""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from migctl.sim.names import ALL_POLICIES
from migctl.sim.scenario import METRICS, Scenario

COLUMNS = (
    ("alloc_pct", "alloc%"),
    ("alloc_pct_at_100", "alloc%@100"),
    ("placed_pods_pct", "pods%"),
    ("placed_vram_pct", "vram%"),
    ("internal_pct", "internal%"),
    ("unusable_pct", "unusable%"),
    ("pending_s_mean", "pend s"),
    ("reconfigs_per_1k", "reconf/1k"),
    ("node_pauses_per_1k", "pauses/1k"),
    ("evictions_per_1k", "evict/1k"),
    ("plan_ms_p50", "plan ms p50"),
)


LEGEND = (
    "alloc%: placed VRAM / cluster memory; with departures the time average of the running pods' VRAM from the "
    "first to the last arrival",
    "alloc%@100: alloc% when the arrived VRAM reached 100% of cluster memory (no-departure runs only)",
    "pods% / vram%: placed / arrived, by pod count / by requested VRAM",
    "internal%: instance memory beyond the running pods' VRAM (profile rounding), of cluster memory, at the last "
    "arrival",
    "unusable%: memory the layouts of busy GPUs leave unreachable, of cluster memory, at the last arrival",
    "pend s: mean seconds from arrival to start over placed pods (reconfiguration and window waits included)",
    "reconf/1k: GPU layout changes per 1,000 placed pods; pauses/1k: node-wide reconfiguration windows (no pod "
    "lands on any GPU of the node) per 1,000 placed pods",
    "evict/1k: evictions per 1,000 placed pods (off for every policy)",
    "plan ms p50: median wall time of one planner call (migctl) or policy step (the others)",
    "(oracle): reads the whole trace in advance; cont-*: fractional sharing without MIG (FGD paper), a reference",
)
ORACLES = frozenset({"static-best-mix", "fgd-mig"})


# One colour and one line style per policy, the same in every plot (keyed by the policy's place in ALL_POLICIES):
# the Tableau 20 palette (matplotlib's tab20), its ten strong colours first, and dash patterns no two share, so
# curves that lie on top of one another can still be told apart, also in greyscale.
COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
DASHES: tuple[str | tuple[int, tuple[int, ...]], ...] = (
    "-", (0, (6, 2)), (0, (2, 2)), (0, (6, 2, 1, 2)), (0, (10, 3)), (0, (1, 1)), (0, (8, 2, 2, 2, 2, 2)),
    (0, (4, 1, 1, 1, 1, 1)), (0, (12, 2, 4, 2)), (0, (3, 4)), (0, (6, 1, 1, 1)), (0, (2, 1)),
    (0, (9, 2, 1, 2, 1, 2)), (0, (5, 5)), (0, (1, 3)), (0, (14, 3)), (0, (3, 1, 3, 4)), (0, (7, 1)),
    (0, (1, 2, 5, 2)), (0, (4, 4, 1, 4)),
)  # fmt: skip


def policy_style(policy: str) -> dict[str, Any]:
    """matplotlib keyword arguments (colour, line style) of this policy's curves."""
    i = ALL_POLICIES.index(policy) if policy in ALL_POLICIES else len(ALL_POLICIES) + sum(map(ord, policy))
    return {"color": COLOURS[i % len(COLOURS)], "linestyle": DASHES[i % len(DASHES)]}


def label(policy: str) -> str:
    return f"{policy} (oracle)" if policy in ORACLES else policy


def _cell(mean: float, std: float, nseeds: int) -> str:
    if math.isnan(mean):
        return "n/a"
    digits = 0 if abs(mean) >= 1000 else 1
    return f"{mean:.{digits}f}" + (f"±{std:.{digits}f}" if nseeds > 1 else "")


def format_table(sc: Scenario) -> str:
    table = sc.table()
    n = len(sc.seeds)
    head = ["policy", *(c for _, c in COLUMNS)]
    rows = [head]
    for policy in sc.policies:
        if policy in table:
            rows.append([label(policy), *(_cell(*table[policy][m], n) for m, _ in COLUMNS)])
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = [
        f"workload {sc.workload} on {sc.cluster.name} ({len(sc.cluster.nodes)} nodes, {sc.cluster.gpus} GPUs, "
        f"{sc.model.id}); seeds {', '.join(map(str, sc.seeds))}; reconfiguration time {sc.timing.describe()}; "
        f"in place: {sc.in_place.describe()}",
        f"source: {sc.source}",
        f"mapping: {sc.mapping}",
    ]
    for i, r in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[j]) if j == 0 else c.rjust(widths[j]) for j, c in enumerate(r)))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    lines.extend(LEGEND)
    return "\n".join(lines)


def plot(sc: Scenario, out_dir: Path) -> list[Path]:
    """Runs without departures: allocation and stranded memory vs arrived workload; runs with departures: queue
    length and allocated memory over time. One line per policy (mean over seeds)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise RuntimeError("plots need matplotlib: pip install 'migctl[sim]'") from e
    out_dir.mkdir(parents=True, exist_ok=True)
    if sc.timelines:  # pods come and go: the story is over time, not over arrived workload
        return _plot_time(sc, out_dir, plt)
    grid = np.linspace(0, 140, 141)
    paths = []
    for idx, (ylabel, fname) in enumerate(
        (("allocated VRAM, % of cluster memory", "alloc"), ("stranded (internal + unusable), %", "stranded"))
    ):
        fig, ax = plt.subplots(figsize=(8.0, 4.0), dpi=90)
        for policy in sc.policies:
            curves = sc.curves.get(policy, [])
            ys = []
            for c in curves:
                x, y = np.array(c[0]), np.array(c[1 + idx])
                if len(x) < 2 or np.all(np.isnan(y)):
                    continue
                ys.append(np.interp(grid, x, y, left=np.nan, right=np.nan))
            if ys:
                with warnings.catch_warnings():  # grid points beyond a run's last sample are NaN
                    warnings.simplefilter("ignore", RuntimeWarning)
                    mean = np.nanmean(np.array(ys), axis=0)
                ax.plot(grid, mean, label=label(policy), linewidth=1.3, **policy_style(policy))
        ax.set_xlabel("arrived workload, % of cluster memory")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{sc.workload} on {sc.cluster.name} ({sc.model.id})", fontsize=9)
        _finish(ax)
        path = out_dir / f"{stem(sc)}-{fname}.png"
        fig.savefig(path, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


def _finish(ax: Any) -> None:
    """Grid, and the legend outside the axes, to the right: inside it covered the curves' rising part."""
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, handlelength=3.5)


def stem(sc: Scenario) -> str:
    """The file name every output of this scenario starts with (plots, CSV, JSON)."""
    base = f"{sc.workload}-{sc.cluster.name.replace('/', '_')}-{sc.model.id}"
    return base if not sc.timelines else f"{base}-r{sc.reconfig_s:g}-a{sc.readvertise_s:g}"


def _plot_time(sc: Scenario, out_dir: Path, plt: Any) -> list[Path]:
    """Queue length and allocated (running) VRAM over time, one line per policy (mean over seeds)."""
    end = max((t.t[-1] for ts in sc.timelines.values() for t in ts if t.t), default=0.0)
    grid = np.linspace(0.0, end, 400)
    paths = []
    for what, ylabel, fname in (
        ("queued", "pods queued (pending or waiting for a reconfiguration)", "queue"),
        ("running_pct", "allocated VRAM (running pods), % of cluster memory", "allocated"),
    ):
        fig, ax = plt.subplots(figsize=(8.8, 4.0), dpi=90)
        for policy in sc.policies:
            ys = []
            for tl in sc.timelines.get(policy, []):
                if len(tl.t) < 2:
                    continue
                idx = np.searchsorted(np.array(tl.t), grid, side="right") - 1  # step function: last sample
                vals = np.array(getattr(tl, what), dtype=np.float64)
                ys.append(np.where(idx >= 0, vals[np.clip(idx, 0, None)], 0.0))
            if ys:
                mean = np.mean(np.array(ys), axis=0)
                ax.plot(grid / 3600.0, mean, label=label(policy), linewidth=1.2, **policy_style(policy))
        ax.set_xlabel("time, hours")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(
            f"{sc.workload} on {sc.cluster.name} ({sc.model.id}), reconfiguration {sc.timing.describe()}", fontsize=8
        )
        _finish(ax)
        path = out_dir / f"{stem(sc)}-{fname}.png"
        fig.savefig(path, bbox_inches="tight")
        plt.close(fig)
        paths.append(path)
    return paths


# -- CSV ----------------------------------------------------------------------------------------------------

SERIES_COLUMNS = ("policy", "seed", "sample", "arrived_pct", "alloc_pct", "stranded_pct", "time_s", "queued",
                  "running_pct")  # fmt: skip


def _num(value: float | int | None) -> str:
    """A CSV cell: empty for an unknown (NaN) value, else the number as Python writes it."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return repr(value) if isinstance(value, float) else str(value)


def write_csv(sc: Scenario, out_dir: Path) -> list[Path]:
    """STEM-summary.csv: one row per policy, each metric's mean and std over the seeds (the table, unrounded).
    STEM-series.csv: one row per policy, seed and sample: arrived, allocated and stranded memory (% of cluster
    memory, the no-departure plots), and with departures the time, pods queued and running VRAM % (the plots
    over time); a cell is empty where the run has no such value."""
    out_dir.mkdir(parents=True, exist_ok=True)
    summary, series = out_dir / f"{stem(sc)}-summary.csv", out_dir / f"{stem(sc)}-series.csv"
    table = sc.table()
    with summary.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["policy", "seeds", *(f"{m}_{x}" for m in METRICS for x in ("mean", "std"))])
        for policy in sc.policies:
            if policy in table:
                cells = [_num(v) for m in METRICS for v in table[policy][m]]
                w.writerow([policy, len(sc.runs.get(policy, [])), *cells])
    with series.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(SERIES_COLUMNS)
        for policy in sc.policies:
            timelines = sc.timelines.get(policy, [])
            for k, (arrived, alloc, stranded) in enumerate(sc.curves.get(policy, [])):
                tl = timelines[k] if k < len(timelines) else None
                for i in range(len(arrived)):
                    timed = tl is not None and i < len(tl.t)
                    over_time = [tl.t[i], tl.queued[i], tl.running_pct[i]] if tl is not None and timed else ["", "", ""]
                    row = [arrived[i], alloc[i], stranded[i], *over_time]
                    w.writerow([policy, sc.seeds[k], i, *(c if c == "" else _num(c) for c in row)])
    return [summary, series]
