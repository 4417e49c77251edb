"""`migctl run`: the controller. Watches the cluster and reconfigures MIG layouts for pending GPU pods."""

from __future__ import annotations

from pathlib import Path

import click
from pydantic import ValidationError

from migctl.cli.output import stop_on_signals
from migctl.config import load_config
from migctl.errors import MigctlError, from_validation_error


@click.command("run")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="migctl config file (YAML).")
@click.option("--dry-run", is_flag=True, default=None, help="Plan, log and emit Events only; change nothing.")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Default: in-cluster, then KUBECONFIG or "
              "~/.kube/config.")  # fmt: skip
@click.option("--context", help="kubeconfig context.")
@click.option("--paused", is_flag=True, default=None, help="Start paused (no new reconfigurations).")
@click.option("--metrics-port", type=int, default=None, help="Port for /metrics, /healthz, /readyz.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default=None, help="Log line format.")
def run_command(
    config_file: Path | None,
    dry_run: bool | None,
    kubeconfig: Path | None,
    context: str | None,
    paused: bool | None,
    metrics_port: int | None,
    log_format: str | None,
) -> None:
    """Run the controller until SIGTERM/SIGINT. Settings: --config FILE, MIGCTL_* variables, then these flags."""
    from migctl.adapters.kube import api_client
    from migctl.controller.failpoint import failpoint_hook
    from migctl.controller.loop import Controller
    from migctl.logsetup import setup_logging

    cfg = load_config(config_file)
    flags = {"dry_run": dry_run, "paused": paused, "metrics_port": metrics_port, "log_format": log_format}
    overrides = {k: v for k, v in flags.items() if v is not None}
    if overrides:
        try:
            controller = cfg.controller.model_validate({**cfg.controller.model_dump(), **overrides})
        except ValidationError as e:
            raise from_validation_error("command line", e, prefix="controller") from e
        cfg = cfg.model_copy(update={"controller": controller})
    setup_logging(cfg.controller.log_format, cfg.controller.log_level)
    try:
        api = api_client(str(kubeconfig) if kubeconfig else None, context)
    except MigctlError as e:
        raise click.ClickException(str(e)) from e
    try:
        hook = failpoint_hook()  # inert unless MIGCTL_FAILPOINT is set (tests: docs/testing.md)
    except MigctlError as e:
        raise click.ClickException(str(e)) from e
    done = stop_on_signals()
    ctl = Controller(cfg, api, hook=hook)
    ctl.start()
    try:
        done.wait()
    finally:
        ctl.stop(release=True)
