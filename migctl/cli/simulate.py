"""`migctl simulate`: trace-driven comparison of layout policies (docs/simulation.md).

With no arguments it runs the bundled scenario: a 400-pod slice of the Alibaba openb trace on a 25-node /
116-GPU slice of its cluster, GPUs replaced by H100-80GB, every policy, two seeds — well under a minute.
"""

from __future__ import annotations

import math
from pathlib import Path

import click

from migctl.cli.output import OUTPUT_OPTION, emit_json, fail
from migctl.config import load_config
from migctl.core.hardware.catalog import load_catalog
from migctl.errors import InputError
from migctl.sim.names import (
    ALL_POLICIES,
    ANALYSIS,
    DEFAULT_POLICIES,
    DEFAULT_READVERTISE_S,
    DEFAULT_RECONFIG_S,
    DEFAULT_SIGMA,
    WORKLOADS,
)


def _json_safe(obj: object) -> object:
    """NaN is not JSON: write null instead."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_json_safe(v) for v in obj]
    return obj


@click.command("simulate")
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
    help="openb-slice (bundled), openb (1,213 nodes / 6,212 GPUs), openb/K (every K-th node), or NxG.",
)
@click.option("--model", default="h100-80gb", show_default=True, help="MIG model replacing every GPU.")
@click.option(
    "--policies",
    default=",".join(DEFAULT_POLICIES),
    show_default=True,
    help=f"Comma-separated. Also for analysis: {', '.join(ANALYSIS)} (docs/simulation.md).",
)
@click.option("--seeds", default="42,43", show_default=True, help="Comma-separated seeds, or A-B.")
@click.option(
    "--reconfig-s",
    type=float,
    default=DEFAULT_RECONFIG_S,
    show_default=True,
    help="Median seconds of a reconfiguration (node-wide for migctl and nos; no published figure, so report two).",
)
@click.option(
    "--reconfig-sigma",
    type=click.FloatRange(min=0),
    default=DEFAULT_SIGMA,
    show_default=True,
    help="Lognormal shape of the reconfiguration time (0: always --reconfig-s).",
)
@click.option(
    "--readvertise-s",
    type=click.FloatRange(min=0),
    default=DEFAULT_READVERTISE_S,
    show_default=True,
    help="Median seconds of migctl-inplace's re-advertise window (lognormal; unmeasured: 5 s is the device "
    "plugin's in-process restart, about 30 s its pod's). No pod lands on the node meanwhile.",
)
@click.option("--batch", type=int, default=32, show_default=True, help="Arrivals per planning round (openb).")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="migctl config file: migctl's policies run with its planner: and controller: settings (MIGCTL_* too).",
)
@click.option("--plot", "plot_dir", type=click.Path(path_type=Path), help="Write PNG plots into this directory.")
@OUTPUT_OPTION
def simulate_command(
    workload: str,
    cluster: str,
    model: str,
    policies: str,
    seeds: str,
    reconfig_s: float,
    reconfig_sigma: float,
    readvertise_s: float,
    batch: int,
    config_file: Path | None,
    plot_dir: Path | None,
    output: str,
) -> None:
    """Replay a GPU trace against every layout policy and compare placement, stranded memory and churn."""
    try:  # numpy is in the `sim` extra; the rest of the CLI must not need it
        from migctl.sim.scenario import Scenario, load_cluster
    except ImportError as e:
        fail(f"migctl simulate needs numpy (pip install 'migctl[sim]'): {e}")
    chosen = [p.strip() for p in policies.split(",") if p.strip()]
    bad = [p for p in chosen if p not in ALL_POLICIES]
    if bad:
        fail(f"unknown policies {', '.join(bad)}; choose from {', '.join(ALL_POLICIES)}")
    if not workload.startswith("openb"):
        chosen = [p for p in chosen if not p.startswith("cont-")]
    if "-" in seeds and "," not in seeds:
        lo, hi = (int(x) for x in seeds.split("-"))
        seed_list = list(range(lo, hi + 1))
    else:
        seed_list = [int(s) for s in seeds.split(",") if s.strip()]
    try:
        shape = load_cluster(cluster)
        gpu_model = load_catalog().model(model)
    except (OSError, ValueError, KeyError) as e:
        fail(f"cannot load the cluster or model: {e}")
    if reconfig_s < 0:
        fail("--reconfig-s must be >= 0")
    try:
        cfg = load_config(config_file)
    except InputError as e:
        fail(str(e))
    sc = Scenario(
        workload,
        shape,
        gpu_model,
        chosen,
        seed_list,
        reconfig_s=reconfig_s,
        reconfig_sigma=reconfig_sigma,
        readvertise_s=readvertise_s,
        batch=batch,
        planner=cfg.planner,
        controller=cfg.controller,
    )
    try:
        sc.run()
    except FileNotFoundError as e:
        fail(f"trace data not found ({e.filename}); set MIGCTL_SIM_DATA to the shared data directory")
    if plot_dir is not None:
        from migctl.sim.report import plot

        try:
            written = plot(sc, plot_dir)
        except RuntimeError as e:
            fail(str(e))
        if output == "text":
            for p in written:
                click.echo(f"wrote {p}", err=True)
    if output == "json":
        emit_json(_json_safe(sc.to_dict()))
    else:
        from migctl.sim.report import format_table

        click.echo(format_table(sc))
