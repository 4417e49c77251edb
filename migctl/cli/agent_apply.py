"""`migctl agent apply`'s wiring and output: the applier built from the settings, the result as text or JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import PodResourcesClient
from migctl.agent.apply import Applier, Result, Retry
from migctl.agent.journal import Journal, LayoutRecord
from migctl.config import Config
from migctl.core.hardware.catalog import load_catalog
from migctl.errors import MigctlError

HOST_ROOT = Path("/host")  # where the in-place DaemonSet mounts the host's / (deploy/helm/migctl/templates)
HOST_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")  # inside a chroot


def in_root(root: Path, program: str) -> Path | None:
    """The executable `program` resolves to inside `root` (a path, or a name on the usual PATH), or None."""
    candidates = [root / program.lstrip("/")] if "/" in program else [root / d.lstrip("/") / program for d in HOST_PATH]
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def caps_command(configured: Sequence[str], host_root: Path | None = None) -> tuple[str, ...]:
    """`agent.caps_command`, or when empty the one that works where migctl runs: in the DaemonSet the host's
    nvidia-smi in the host's root (mig-manager's way), on a host its own nvidia-smi."""
    if configured:
        return tuple(configured)
    root = host_root or HOST_ROOT
    if in_root(root, "nvidia-smi") is not None:
        return ("chroot", str(root), "nvidia-smi")
    return ("nvidia-smi",)


def caps_problem(command: Sequence[str]) -> str:
    """Why `command` cannot run here ("" when it can): the program is missing, or for `chroot ROOT PROGRAM`, the
    root, the program inside it, or the privilege chroot needs."""
    shown = " ".join(command)
    exe = shutil.which(command[0])
    if exe is None:
        return f"{shown}: {command[0]} is not on PATH"
    if Path(exe).name == "chroot" and len(command) >= 3:
        root, program = Path(command[1]), command[2]
        if not root.is_dir():
            return f"{shown}: {root} is no directory (the in-place DaemonSet mounts the host's / there)"
        if in_root(root, program) is None:
            return f"{shown}: {root} holds no executable {program}"
        if os.geteuid() != 0:
            return f"{shown}: chroot needs root"
    return ""


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
    caps = caps_command(s.caps_command)
    return Applier(
        MigNvml(),
        PodResourcesClient(socket or s.pod_resources_socket, s.pod_resources_timeout_seconds),
        Journal(state),
        load_catalog(cfg.profiles_dirs),
        caps=lambda: run_caps(caps),
        retry=Retry(s.destroy_attempts, s.destroy_backoff_seconds, s.destroy_backoff_max_seconds),
        layouts=LayoutRecord(state),
        caps_ready=lambda: caps_problem(caps),
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
