"""`migctl run`: the controller. Watches the cluster and reconfigures MIG layouts for pending GPU pods."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click
from pydantic import ValidationError

from migctl.cli.output import Command, stop_on_signals
from migctl.config import Config, load_config
from migctl.config.cluster import in_pod_lease
from migctl.errors import from_validation_error


@click.command("run", cls=Command)
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
    """Run the controller until SIGTERM/SIGINT. Settings: --config FILE, MIGCTL_* variables, then these flags.

    Leader election uses one Lease wherever migctl runs: an empty lease_namespace is this pod's namespace; out of
    a cluster, the Lease of the controller whose config ConfigMap is on the cluster (none found: refused, exit 2).
    """
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
    api = api_client(str(kubeconfig) if kubeconfig else None, context)  # CredentialsError: exit 2, as plan's
    hook = failpoint_hook()  # inert unless MIGCTL_FAILPOINT is set (tests: docs/testing.md)
    cfg = one_lease(cfg, api)
    done = stop_on_signals()
    ctl = Controller(cfg, api, hook=hook)
    ctl.start()
    try:
        done.wait()
    finally:
        ctl.stop(release=True)


def one_lease(cfg: Config, api: Any) -> Config:
    """The config with the Lease every migctl controller of this cluster shares (config/cluster.py's rule)."""
    le = cfg.controller.leader_election
    if not le.enabled or le.lease_namespace:
        return cfg
    cfg = in_pod_lease(cfg)
    why = "this pod's namespace"
    if not cfg.controller.leader_election.lease_namespace:
        from migctl.adapters.kube import KubeApi
        from migctl.cli.cluster_config import run_lease

        cfg, why = run_lease(KubeApi(api, attempts=3), cfg)  # InputError: exit 2
    le = cfg.controller.leader_election
    logging.getLogger(__name__).info("leader election on Lease %s/%s (%s)", le.lease_namespace, le.lease_name, why)
    return cfg
