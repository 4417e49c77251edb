"""Where a read-only command gets its objects: a snapshot file, or one read of the live cluster.

`migctl plan` and `migctl status` read the same way; the Kubernetes client is imported only for a live read, so
a command on a file starts without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from migctl.adapters.objects import load_objects
from migctl.cli.output import fail
from migctl.core.model.settings import GpuOperatorSettings
from migctl.errors import MigctlError


def read_input(
    path: Path | None, kubeconfig: Path | None, context: str | None, operator: GpuOperatorSettings, label: str = ""
) -> tuple[list[dict[str, Any]], str]:
    """(the objects, where they came from): `path` when given (named `label` if set), else the live cluster."""
    if path is not None:
        return load_objects(path), label or str(path)
    from migctl.adapters.kube import api_client, read_objects

    try:
        objects = read_objects(api_client(str(kubeconfig) if kubeconfig else None, context), operator)
    except MigctlError as e:
        fail(str(e))
    return objects, "live cluster"
