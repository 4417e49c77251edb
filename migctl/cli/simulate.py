"""`migctl simulate`: trace-driven comparison of layout policies (docs/simulation.md).

With no arguments it runs the bundled scenario: a 400-pod slice of the Alibaba openb trace on a 25-node /
116-GPU slice of its cluster, GPUs replaced by H100-80GB, every policy, two seeds — well under a minute.

Every option is checked before anything runs (click types and callbacks): a bad value is a usage error
(`error: ...`, exit 2) naming the option, never a traceback, a hang or an empty table.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from migctl.cli.output import OUTPUT_OPTION, Command, emit_json, fail
from migctl.config import load_config
from migctl.core.hardware.catalog import load_catalog
from migctl.sim.names import (
    ALL_POLICIES,
    ANALYSIS,
    CONTINUOUS,
    DEFAULT_DRA_FENCE_S,
    DEFAULT_DRA_RESTART_S,
    DEFAULT_POLICIES,
    DEFAULT_READVERTISE_S,
    DEFAULT_RECONFIG_S,
    DEFAULT_SIGMA,
    DRA_POLICIES,
    WORKLOADS,
)

MAX_SEEDS = 1000  # one run per policy and seed: more is a typo (42-4200), not an experiment
MAX_GPUS_PER_NODE = 16
_SEED_TERM = re.compile(r"(\d+)(?:-(\d+))?")
_CLUSTER = re.compile(r"openb-slice|openb(?:/(\d+))?|(\d+)x(\d+)", re.IGNORECASE)


class Finite(click.FloatRange):
    """A FloatRange that also refuses `nan` and `inf` (FloatRange lets NaN through: it compares false)."""

    name = "finite float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def parse_seeds(_ctx: click.Context | None, _param: click.Parameter | None, value: str) -> list[int]:
    """`42,43`, `42-44` or a mix (`1,5-7`): whole numbers >= 0 (numpy's generators take no negative seed)."""
    seeds: list[int] = []
    for raw in value.split(","):
        term = raw.strip()
        m = _SEED_TERM.fullmatch(term)
        if m is None:
            raise click.BadParameter(
                f"{term!r} is not a seed; expected whole numbers >= 0, comma-separated, or a range A-B "
                "(e.g. 42,43 or 42-44)"
            )
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo:
            raise click.BadParameter(f"{term!r} is an empty range; expected A-B with A <= B")
        if hi - lo + len(seeds) >= MAX_SEEDS:
            raise click.BadParameter(f"more than {MAX_SEEDS} seeds; each seed runs every policy once")
        seeds.extend(range(lo, hi + 1))
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise click.BadParameter(f"seed {', '.join(map(str, twice))} given twice (it would count twice in the means)")
    return seeds


def parse_cluster(_ctx: click.Context | None, _param: click.Parameter | None, value: str) -> str:
    """`openb-slice`, `openb`, `openb/K` (K >= 1) or `NxG` (N nodes >= 1 of G GPUs, 1..16)."""
    m = _CLUSTER.fullmatch(value.strip())
    expected = "expected openb-slice, openb, openb/K (every K-th node, K >= 1) or NxG (e.g. 4x8)"
    if m is None:
        raise click.BadParameter(f"{value!r}: {expected}")
    if m[1] is not None and int(m[1]) < 1:
        raise click.BadParameter(f"{value!r}: K must be >= 1; {expected}")
    if m[2] is not None:
        nodes, gpus = int(m[2]), int(m[3])
        if nodes < 1 or not 1 <= gpus <= MAX_GPUS_PER_NODE:
            raise click.BadParameter(f"{value!r}: need at least 1 node of 1 to {MAX_GPUS_PER_NODE} GPUs; {expected}")
        return f"{nodes}x{gpus}"
    return value.strip().lower()


def parse_policies(_ctx: click.Context | None, _param: click.Parameter | None, value: str) -> list[str]:
    chosen = [p.strip() for p in value.split(",") if p.strip()]
    bad = [p for p in chosen if p not in ALL_POLICIES]
    if bad:
        raise click.BadParameter(f"unknown policies {', '.join(bad)}; choose from {', '.join(ALL_POLICIES)}")
    if not chosen:
        raise click.BadParameter(f"no policy given; choose from {', '.join(ALL_POLICIES)}")
    return list(dict.fromkeys(chosen))


def _json_safe(obj: object) -> object:
    """NaN is not JSON: write null instead."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


@contextmanager
def progress(total: int, shown: bool) -> Iterator[Callable[[str, int], None]]:
    """A bar on stderr, one step per (policy, seed) run, when `shown`; else a callback that does nothing."""
    if not shown:
        yield lambda policy, seed: None
        return
    with click.progressbar(length=total, label="simulating", file=sys.stderr, show_pos=True) as bar:

        def step(policy: str, seed: int) -> None:
            bar.label = f"simulating (done: {policy}, seed {seed})"
            bar.update(1)

        yield step


@click.command("simulate", cls=Command)
@click.option(
    "--workload",
    type=click.Choice(WORKLOADS),
    default="openb-slice",
    show_default=True,
    help="openb-slice is bundled; openb, miso and genai read ../shared/data (or $MIGCTL_SIM_DATA).",
)
@click.option(
    "--cluster",
    default="openb-slice",
    show_default=True,
    callback=parse_cluster,
    help="openb-slice (bundled), openb (1,213 nodes / 6,212 GPUs), openb/K (every K-th node), or NxG.",
)
@click.option("--model", default="h100-80gb", show_default=True, help="MIG model replacing every GPU.")
@click.option(
    "--policies",
    default=",".join(DEFAULT_POLICIES),
    show_default=True,
    callback=parse_policies,
    help=f"Comma-separated. Also for analysis: {', '.join(ANALYSIS)}; DRA nodes: {', '.join(DRA_POLICIES)} "
    "(docs/simulation.md).",
)
@click.option(
    "--seeds",
    default="42,43",
    show_default=True,
    callback=parse_seeds,
    help="Comma-separated seeds (>= 0), or A-B.",
)
@click.option(
    "--reconfig-s",
    type=Finite(min=0),
    default=DEFAULT_RECONFIG_S,
    show_default=True,
    help="Median seconds of a reconfiguration (node-wide for migctl and nos; no published figure, so report two).",
)
@click.option(
    "--reconfig-sigma",
    type=Finite(min=0),
    default=DEFAULT_SIGMA,
    show_default=True,
    help="Lognormal shape of the reconfiguration time (0: always --reconfig-s).",
)
@click.option(
    "--readvertise-s",
    type=Finite(min=0),
    default=DEFAULT_READVERTISE_S,
    show_default=True,
    help="Median seconds of migctl-inplace's re-advertise window (lognormal; unmeasured: 5 s is the device "
    "plugin's in-process restart, about 30 s its pod's). No pod lands on the node meanwhile.",
)
@click.option(
    "--dra-restart-s",
    type=Finite(min=0),
    default=DEFAULT_DRA_RESTART_S,
    show_default=True,
    help="Median seconds of the static-MIG DRA kubelet plugin's restart after migctl-dra-static re-cuts a GPU "
    "(lognormal; unmeasured: report 5 and 30). No new pod of the node starts meanwhile.",
)
@click.option(
    "--dra-fence-s",
    type=Finite(min=0),
    default=DEFAULT_DRA_FENCE_S,
    show_default=True,
    help="Seconds from migctl writing a DeviceTaintRule to the scheduler honouring it (DRA policies).",
)
@click.option(
    "--batch", type=click.IntRange(min=1), default=32, show_default=True, help="Arrivals per planning round (openb)."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="migctl config file: migctl's policies run with its planner: and controller: settings (MIGCTL_* too).",
)
@click.option(
    "--plot", "plot_dir", type=click.Path(path_type=Path, file_okay=False), help="Write PNG plots into this directory."
)
@click.option(
    "--out-dir",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    help="Write the results into this directory: STEM.json (the -o json document), STEM-summary.csv (per policy: "
    "each metric's mean and std over seeds) and STEM-series.csv (per policy, seed and sample: the time series "
    "the plots draw).",
)
@OUTPUT_OPTION
def simulate_command(
    workload: str,
    cluster: str,
    model: str,
    policies: list[str],
    seeds: list[int],
    reconfig_s: float,
    reconfig_sigma: float,
    readvertise_s: float,
    dra_restart_s: float,
    dra_fence_s: float,
    batch: int,
    config_file: Path | None,
    plot_dir: Path | None,
    out_dir: Path | None,
    output: str,
) -> None:
    """Replay a GPU trace against every layout policy and compare placement, stranded memory and churn."""
    try:  # numpy is in the `sim` extra; the rest of the CLI must not need it
        from migctl.sim.scenario import Scenario, load_cluster
    except ImportError as e:
        fail(f"migctl simulate needs numpy (pip install 'migctl[sim]'): {e}")
    cfg = load_config(config_file)  # InputError: exit 2, naming the file and the field
    try:
        gpu_model = load_catalog(cfg.profiles_dirs).model(model)
    except KeyError as e:
        raise click.BadParameter(str(e.args[0]), param_hint="'--model'") from e
    chosen = policies if workload.startswith("openb") else [p for p in policies if p not in CONTINUOUS]
    if not chosen:
        raise click.BadParameter(
            f"{', '.join(CONTINUOUS)} pack gpu_milli shares and need an openb workload; none left for {workload}",
            param_hint="'--policies'",
        )
    try:
        shape = load_cluster(cluster)
    except FileNotFoundError as e:
        fail(f"trace data not found ({e.filename}); set MIGCTL_SIM_DATA to the shared data directory")
    sc = Scenario(
        workload,
        shape,
        gpu_model,
        chosen,
        seeds,
        reconfig_s=reconfig_s,
        reconfig_sigma=reconfig_sigma,
        readvertise_s=readvertise_s,
        dra_restart_s=dra_restart_s,
        dra_fence_s=dra_fence_s,
        batch=batch,
        planner=cfg.planner,
        controller=cfg.controller,
    )
    shown = output == "text" and sys.stderr.isatty()
    try:
        with progress(len(chosen) * len(seeds), shown) as step:
            sc.run(on_run=step)
    except FileNotFoundError as e:
        fail(f"trace data not found ({e.filename}); set MIGCTL_SIM_DATA to the shared data directory")
    from migctl.sim import report

    written: list[Path] = []
    try:
        if plot_dir is not None:
            written += report.plot(sc, plot_dir)
        if out_dir is not None:
            written += report.write_csv(sc, out_dir)
            doc = out_dir / f"{report.stem(sc)}.json"
            doc.write_text(json.dumps(_json_safe(sc.to_dict()), indent=2) + "\n", encoding="utf-8")
            written.append(doc)
    except RuntimeError as e:  # matplotlib missing
        fail(str(e))
    except OSError as e:
        fail(f"cannot write the results: {e}", 1)
    if output == "text":
        for p in written:
            click.echo(f"wrote {p}", err=True)
    if output == "json":
        emit_json(_json_safe(sc.to_dict()))
    else:
        click.echo(report.format_table(sc))
