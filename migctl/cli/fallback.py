"""`migctl fallback`: VRAM capacity on GPUs without MIG, and the per-GPU scheduler for `schedulerName: migctl`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from migctl.cli.output import Command, stop_on_signals
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config import load_config
from migctl.core.hardware.catalog import load_catalog
from migctl.logsetup import setup_logging


@click.command("fallback", cls=Command)
@click.option("--once", is_flag=True, help="One pass (capacity sync, placement, binding), print what it did, exit.")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="migctl config file (`fallback:`).")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Default: in-cluster, then KUBECONFIG.")
@click.option("--context", help="kubeconfig context.")
@PROFILES_DIR_OPTION
def fallback_command(
    once: bool,
    config_file: Path | None,
    kubeconfig: Path | None,
    context: str | None,
    profiles_dirs: tuple[Path, ...],
) -> None:
    """Advertise VRAM on GPUs without MIG and place `schedulerName: migctl` pods on one GPU each."""
    from migctl.adapters.kube import api_client
    from migctl.fallback.metrics import serve_metrics
    from migctl.fallback.scheduler import FallbackScheduler

    cfg = load_config(config_file)
    settings, planner = cfg.fallback, cfg.planner
    catalog = load_catalog(profiles_dirs)
    setup_logging(cfg.controller.log_format, cfg.controller.log_level)
    scheduler = FallbackScheduler(
        api_client(str(kubeconfig) if kubeconfig else None, context), catalog, settings, planner
    )
    if once:
        result = scheduler.run_once()
        click.echo(
            json.dumps(
                {
                    "bound": [{"pod": p.pod, "node": p.node, "gpu": p.gpu, "uuid": p.uuid} for p in result.bound],
                    "unplaced": result.unplaced,
                    "capacity_changes": result.capacity_changes,
                },
                indent=2,
            )
        )
        return
    if settings.metrics_port is not None:
        serve_metrics(scheduler.metrics, settings.metrics_port, settings.interval_seconds)
    stop = stop_on_signals()
    scheduler.serve(stop)
