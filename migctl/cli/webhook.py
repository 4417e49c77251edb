"""`migctl webhook`: serve the mutating admission webhook for VRAM-native pod requests (docs/vram-requests.md)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import click

from migctl.cli.output import stop_on_signals
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config import Config, load_config
from migctl.config.webhook import WebhookSettings


@click.command("webhook")
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

    cfg, settings = load_webhook_config(config_file)
    if port is not None:
        settings = settings.model_copy(update={"port": port})
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = Webhook(
        api_client(str(kubeconfig) if kubeconfig else None, context),
        load_catalog([*cfg.profiles_dirs, *profiles_dirs]),
        settings,
        cfg.planner,
        cfg.gpu_operator,
        cfg.controller,
    )
    stop = stop_on_signals()
    app.serve(stop)


def load_webhook_config(path: Path | None) -> tuple[Config, WebhookSettings]:
    """The shared config and its `webhook:` section (file, then `MIGCTL_WEBHOOK__*` environment overrides)."""
    cfg = load_config(path)
    return cfg, cfg.webhook


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in extra.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out
