"""Terminal table and PNG plots for a scenario (matplotlib is optional: the `sim` extra)."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from migctl.sim.scenario import Scenario

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
    for idx, (label, fname) in enumerate(
        (("allocated VRAM, % of cluster memory", "alloc"), ("stranded (internal + unusable), %", "stranded"))
    ):
        fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=90)
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
                ax.plot(grid, mean, label=policy, linewidth=1.2)
        ax.set_xlabel("arrived workload, % of cluster memory")
        ax.set_ylabel(label)
        ax.set_title(f"{sc.workload} on {sc.cluster.name} ({sc.model.id})", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{_stem(sc)}-{fname}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def _stem(sc: Scenario) -> str:
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
        fig, ax = plt.subplots(figsize=(7.2, 4.0), dpi=90)
        for policy in sc.policies:
            ys = []
            for tl in sc.timelines.get(policy, []):
                if len(tl.t) < 2:
                    continue
                idx = np.searchsorted(np.array(tl.t), grid, side="right") - 1  # step function: last sample
                vals = np.array(getattr(tl, what), dtype=np.float64)
                ys.append(np.where(idx >= 0, vals[np.clip(idx, 0, None)], 0.0))
            if ys:
                ax.plot(grid / 3600.0, np.mean(np.array(ys), axis=0), label=label(policy), linewidth=1.1)
        ax.set_xlabel("time, hours")
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_title(
            f"{sc.workload} on {sc.cluster.name} ({sc.model.id}), reconfiguration {sc.timing.describe()}", fontsize=8
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        path = out_dir / f"{_stem(sc)}-{fname}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
