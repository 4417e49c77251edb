"""Where a read-only command gets its objects and its settings: a snapshot file, or one read of the live cluster.

`migctl plan` and `migctl status` read the same way. A snapshot is read offline, with `--config FILE` or the
defaults. On the live cluster the settings are the controller's own unless `--config` says otherwise
(`cluster_config.live_config`), and stderr says which were used. The Kubernetes client is imported only for a
live read, so a command on a file starts without it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from migctl.adapters.objects import load_objects
from migctl.config import Config, load_config
from migctl.config.cluster import CONFIG_SELECTOR
from migctl.errors import InputError

EMPTY = (
    "no Kubernetes objects found (an empty file?); expected the output of kubectl get nodes,pods,configmaps -A -o yaml"
)

_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?")  # a namespace or ConfigMap name (DNS subdomain)


def parse_ref(_ctx: click.Context | None, _param: click.Parameter | None, value: str | None) -> tuple[str, str] | None:
    """`--config-from-cluster NAMESPACE/NAME`."""
    if value is None:
        return None
    ns, sep, name = value.partition("/")
    if not sep or not _NAME.fullmatch(ns) or not _NAME.fullmatch(name) or len(ns) > 63 or len(name) > 253:
        raise click.BadParameter(f"{value!r}: expected NAMESPACE/NAME of a ConfigMap, e.g. migctl/migctl-config")
    return ns, name


CONFIG_FROM_CLUSTER_OPTION = click.option(
    "--config-from-cluster",
    "config_from_cluster",
    metavar="NAMESPACE/NAME",
    callback=parse_ref,
    help="Live cluster: read the controller's config from this ConfigMap (key config.yaml). Default: the one "
    f"ConfigMap labelled {CONFIG_SELECTOR} (the chart's <release>-config), else the built-in defaults.",
)


@dataclass(frozen=True)
class Inputs:
    cfg: Config
    objects: list[dict[str, Any]]
    source: str  # where the objects came from: the file (or `label`), or "live cluster"


def read_inputs(
    path: Path | None,
    kubeconfig: Path | None,
    context: str | None,
    config_file: Path | None,
    config_from_cluster: tuple[str, str] | None,
    label: str = "",
) -> Inputs:
    """The settings and the objects: from `path` when given (named `label` if set), else from the live cluster.
    An input without a single object is an InputError: nothing can be planned or shown from it."""
    if path is not None:
        if config_from_cluster is not None:
            raise click.UsageError("--config-from-cluster reads the live cluster; a snapshot is read offline: --config")
        cfg = load_config(config_file)
        source = label or str(path)
        objects = load_objects(path)
        if not objects:
            raise InputError(source, EMPTY)
        return Inputs(cfg, objects, source)
    if config_file is not None and config_from_cluster is not None:
        raise click.UsageError("use either --config FILE or --config-from-cluster NAMESPACE/NAME, not both")
    from migctl.adapters.kube import KubeApi, api_client, read_objects
    from migctl.cli.cluster_config import live_config

    api = api_client(str(kubeconfig) if kubeconfig else None, context)  # CredentialsError: exit 2
    cfg, which = live_config(KubeApi(api, attempts=1), config_file, config_from_cluster)
    click.echo(f"config: {which}", err=True)
    return Inputs(cfg, read_objects(api, cfg.gpu_operator), "live cluster")  # KubeError: exit 1
