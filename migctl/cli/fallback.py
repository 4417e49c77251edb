"""`migctl fallback`: VRAM capacity on GPUs without MIG, and the per-GPU scheduler for `schedulerName: migctl`."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import click

from migctl.cli.output import stop_on_signals
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config import load_config
from migctl.core.hardware.catalog import load_catalog


@click.command("fallback")
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
    from migctl.fallback.scheduler import FallbackScheduler

    cfg = load_config(config_file)
    settings, planner = cfg.fallback, cfg.planner
    catalog = load_catalog(profiles_dirs)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
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
    stop = stop_on_signals()
    scheduler.serve(stop)
