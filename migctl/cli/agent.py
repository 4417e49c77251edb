"""`migctl agent`: the node agent (a DaemonSet on GPU nodes), and with `--once --print` a read-only hardware probe."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import click

from migctl.cli.output import Group
from migctl.config import load_config
from migctl.core.model.inventory import Inventory
from migctl.logsetup import setup_logging


@click.group("agent", cls=Group, invoke_without_command=True)
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
@click.pass_context
def agent_command(
    ctx: click.Context,
    once: bool,
    print_only: bool,
    node: str | None,
    config_file: Path | None,
    kubeconfig: Path | None,
    context: str | None,
) -> None:
    """Read the GPUs through NVML and publish an inventory on this Node (annotation migctl.io/gpus).

    NVML is only queried, never changed (unless agent.in_place is set; then see `migctl agent apply`).
    `migctl agent --once --print` is safe on any GPU machine.
    """
    if ctx.invoked_subcommand is not None:
        return
    from migctl.adapters.nvml import NvmlError, NvmlReader
    from migctl.agent.runner import AgentRunner, Reader, serve_health

    cfg = load_config(config_file)
    settings = cfg.agent
    setup_logging(cfg.controller.log_format, cfg.controller.log_level)
    reader: Reader = NvmlReader()
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

    before_read = None
    if settings.in_place and sink is not None:
        from migctl.adapters.podresources import PodResourcesClient
        from migctl.agent.dra import DraNode
        from migctl.agent.inplace_loop import InPlaceLoop
        from migctl.agent.usage import KubeletAwareReader
        from migctl.cli.agent_apply import build_applier

        applier = build_applier(cfg, None, None)
        dra = DraNode(kube, name, settings.dra, applier.catalog) if settings.dra.enabled else None
        loop = InPlaceLoop(kube, name, applier, settings.device_plugin_configs, dra)
        kubelet = PodResourcesClient(settings.pod_resources_socket, settings.pod_resources_timeout_seconds)
        reader = KubeletAwareReader(reader, kubelet)
        before_read = loop.tick
        try:
            loop.start()
        except Exception as e:  # the journal or NVML: say so and keep publishing; each tick tries again
            logging.getLogger(__name__).error("in-place start: %s", e)
    runner = AgentRunner(reader, sink, settings, on_inventory=show, before_read=before_read)
    if once:
        if not runner.tick():
            click.echo(f"error: {runner.last_error}", err=True)
            raise SystemExit(1)
        return
    if settings.health_port is not None:
        serve_health(runner, settings.health_port)
    runner.run()


@agent_command.command("apply")
@click.option("--layout", "layout_file", required=True, type=click.Path(path_type=Path), help="Target per GPU index.")
@click.option("--dry-run", is_flag=True, help="Print the steps; change nothing. Exit 0 if reachable, 3 if not.")
@click.option("--pod-resources-socket", help="The kubelet's PodResources socket (default: agent setting).")
@click.option("--state-dir", type=click.Path(path_type=Path), help="Journal directory (default: agent setting).")
@click.option("-o", "--output", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--config", "config_file", type=click.Path(path_type=Path), help="migctl config file (`agent:` section).")
def apply_command(
    layout_file: Path,
    dry_run: bool,
    pod_resources_socket: str | None,
    state_dir: Path | None,
    fmt: str,
    config_file: Path | None,
) -> None:
    """Reshape MIG instances in place, safe on busy GPUs: keep the instances in use, destroy only free ones the
    target drops, create the missing ones at explicit placements. Never changes MIG mode.

    Exit codes: 0 applied (or nothing to change), 1 failed (rolled back) or the kubelet/NVML could not be read
    (nothing changed), 2 bad input (nothing changed), 3 blocked by an instance in use (that GPU unchanged).
    """
    from migctl.adapters.podresources import PodResourcesError
    from migctl.agent.journal import JournalError
    from migctl.agent.target_file import read_target
    from migctl.cli.agent_apply import build_applier, render
    from migctl.errors import InputError, MigctlError

    setup_logging(level="WARNING")  # the result goes to stdout; the log only for problems (--log-level: more)
    try:
        cfg = load_config(config_file)
        target = read_target(layout_file)
        applier = build_applier(cfg, pod_resources_socket, state_dir)
        result = applier.apply(target, dry_run=dry_run)
    except InputError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(2) from e
    except PodResourcesError as e:
        click.echo(f"error: {e}; nothing was changed (no instance may be assumed free)", err=True)
        raise SystemExit(1) from e
    except JournalError as e:
        click.echo(f"error: {e}; the next run undoes what the journal recorded", err=True)
        raise SystemExit(1) from e
    except MigctlError as e:
        click.echo(f"error: {e}", err=True)
        raise SystemExit(1) from e
    click.echo(render(result, fmt, dry_run))
    raise SystemExit(result.exit_code)
