"""`migctl agent apply`'s wiring and output: the applier built from the settings, the result as text or JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import PodResourcesClient
from migctl.agent.apply import Applier, Result, Retry
from migctl.agent.journal import Journal, LayoutRecord
from migctl.config import Config
from migctl.core.hardware.catalog import load_catalog
from migctl.errors import MigctlError


def run_caps(command: tuple[str, ...], timeout_s: float = 120.0) -> None:
    """Create /dev/nvidia-caps nodes on the host the way mig-manager does (nvidia-smi in the host's root)."""
    try:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MigctlError(f"{' '.join(command)} could not run: {e}") from e
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-300:]
        raise MigctlError(f"{' '.join(command)} exited {done.returncode}: {tail}")


def build_applier(cfg: Config, socket: str | None, state_dir: Path | None) -> Applier:
    s = cfg.agent
    state = Path(state_dir or s.state_dir)
    return Applier(
        MigNvml(),
        PodResourcesClient(socket or s.pod_resources_socket, s.pod_resources_timeout_seconds),
        Journal(state),
        load_catalog(cfg.profiles_dirs),
        caps=lambda: run_caps(s.caps_command),
        retry=Retry(s.destroy_attempts, s.destroy_backoff_seconds, s.destroy_backoff_max_seconds),
        layouts=LayoutRecord(state),
    )


def to_dict(result: Result) -> dict[str, Any]:
    return {
        "exit_code": result.exit_code,
        "notes": result.notes,
        "caps_error": result.caps_error,
        "gpus": [
            {
                "index": g.index,
                "state": g.state,
                "message": g.message,
                "steps": [str(o) for o in g.ops],
                "instances": [
                    {"profile": f.profile, "start": f.start, "size": f.size, "uuid": f.uuid, "held_by": f.holder}
                    for f in g.instances
                ],
            }
            for g in result.gpus
        ],
    }


def render(result: Result, fmt: str, dry_run: bool) -> str:
    if fmt == "json":
        return json.dumps(to_dict(result), indent=2, sort_keys=True)
    lines = list(result.notes)
    for g in result.gpus:
        head = f"GPU {g.index}: {g.state}"
        if g.state == "planned" or (dry_run and g.state == "unchanged"):
            head += " (dry run: nothing changed)"
        lines.append(head + (f": {g.message}" if g.message else ""))
        lines.extend(f"  {'would ' if dry_run else ''}{o}" for o in g.ops)
    if result.caps_error:
        lines.append(f"error: {result.caps_error}")
    return "\n".join(lines) if lines else "no GPU listed"
