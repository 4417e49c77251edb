"""`migctl webhook`: serve the mutating admission webhook for VRAM-native pod requests (docs/vram-requests.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from migctl.cli.output import Command, stop_on_signals
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config import Config, load_config
from migctl.config.cluster import in_pod_lease, with_lease
from migctl.config.webhook import WebhookSettings
from migctl.logsetup import setup_logging


@click.command("webhook", cls=Command)
@click.option(
    "--config", "config_file", type=click.Path(path_type=Path), help="migctl config file (`webhook:`, `planner:`)."
)
@click.option("--port", type=int, default=None, help="Override webhook.port.")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Default: in-cluster, then KUBECONFIG.")
@click.option("--context", help="kubeconfig context.")
@PROFILES_DIR_OPTION
def webhook_command(
    config_file: Path | None,
    port: int | None,
    kubeconfig: Path | None,
    context: str | None,
    profiles_dirs: tuple[Path, ...],
) -> None:
    """Rewrite pods that ask for VRAM (migctl.io/vram) to ask for the MIG profile that serves them best."""
    from migctl.adapters.kube import api_client
    from migctl.core.hardware.catalog import load_catalog
    from migctl.webhook.app import Webhook
    from migctl.webhook.server import serve_metrics

    cfg, settings = load_webhook_config(config_file)
    if port is not None:
        settings = settings.model_copy(update={"port": port})
    setup_logging(cfg.controller.log_format, cfg.controller.log_level)
    app = Webhook(
        api_client(str(kubeconfig) if kubeconfig else None, context),
        load_catalog([*cfg.profiles_dirs, *profiles_dirs]),
        settings,
        cfg.planner,
        cfg.gpu_operator,
        cfg.controller,
    )
    if settings.metrics_port is not None:
        serve_metrics(settings.address, settings.metrics_port, lambda: app.server, app.view.ready.is_set)
    stop = stop_on_signals()
    app.serve(stop)


def load_webhook_config(path: Path | None) -> tuple[Config, WebhookSettings]:
    """The shared config and its `webhook:` section (file, then `MIGCTL_WEBHOOK__*` environment overrides). The
    controller's Lease (the queue gate reads it) in this pod's namespace when the config leaves it empty, as the
    controller's own is (config/cluster.py); out of a pod, in webhook.namespace."""
    cfg = in_pod_lease(load_config(path))
    if not cfg.controller.leader_election.lease_namespace:
        cfg = with_lease(cfg, cfg.webhook.namespace)
    return cfg, cfg.webhook


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
