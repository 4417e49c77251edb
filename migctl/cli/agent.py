"""`migctl agent`: the node agent (a DaemonSet on GPU nodes), and with `--once --print` a read-only hardware probe."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import click

from migctl.config import load_config
from migctl.core.inventory import Inventory


@click.command("agent")
@click.option("--once", is_flag=True, help="Read (and publish) once, then exit; exit code 1 if NVML fails.")
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the inventory JSON instead of publishing it: changes nothing, needs no cluster.",
)
@click.option("--node", help="Node to publish on (default: the env var named by agent.node_name_env, NODE_NAME).")
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="migctl config file (`agent:` section).")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Default: in-cluster, then KUBECONFIG.")
@click.option("--context", help="kubeconfig context.")
def agent_command(
    once: bool,
    print_only: bool,
    node: str | None,
    config_file: Path | None,
    kubeconfig: Path | None,
    context: str | None,
) -> None:
    """Read the GPUs through NVML and publish an inventory on this Node (annotation migctl.io/gpus).

    NVML is only queried, never changed. `migctl agent --once --print` is safe on any GPU machine.
    """
    from migctl.adapters.nvml import NvmlError, NvmlReader
    from migctl.agent.runner import AgentRunner, serve_health

    settings = load_config(config_file).agent
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    reader = NvmlReader()
    if once and print_only:
        try:
            inventory = reader.read()
        except NvmlError as e:
            click.echo(f"error: {e}", err=True)
            raise SystemExit(1) from e
        click.echo(json.dumps(inventory.model_dump(mode="json"), indent=2, sort_keys=True))
        return

    sink = None
    if not print_only:
        from migctl.adapters.kube import KubeApi, api_client
        from migctl.agent.publisher import Publisher
        from migctl.cli.output import fail

        name = node or os.environ.get(settings.node_name_env, "")
        if not name:
            fail(f"no node name: pass --node or set {settings.node_name_env} (downward API spec.nodeName)")
        kube = KubeApi(api_client(str(kubeconfig) if kubeconfig else None, context), attempts=5, max_wait_s=10.0)
        sink = Publisher(kube, name, settings.annotation)

    def show(inventory: Inventory) -> None:
        if print_only:
            click.echo(inventory.to_annotation())

    runner = AgentRunner(reader, sink, settings, on_inventory=show)
    if once:
        if not runner.tick():
            click.echo(f"error: {runner.last_error}", err=True)
            raise SystemExit(1)
        return
    if settings.health_port is not None:
        serve_health(runner, settings.health_port)
    runner.run()
