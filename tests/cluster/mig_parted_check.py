"""NVIDIA's own check of mig-parted configs: the real `nvidia-mig-parted assert --valid-config`, v0.10.0.

The binary is built from the Go module proxy by `hack/testbin.sh` (its own cache directory; `--mig-parted`
prints it) or taken from `MIGCTL_MIG_PARTED`. It parses the whole file with mig-parted's decoder, so any config
it cannot read fails the file, exactly as mig-manager fails every node's reconfiguration.

SKIPPED, and said so wherever it happens: v0.10.0 is the oldest release the proxy serves and it predates the
profile names `+me.all` and `-me` (added in v0.12.3 with go-nvlib v0.7.4). A config holding such a name is
removed from the copy the binary reads; every other config in the file is still checked. Nothing else is
skipped. The names are matched literally here, not with migctl's grammar, so migctl's own code never decides
what NVIDIA's check gets to see.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[2]
VERSION = "v0.10.0"
PREDATES = ("+me.all", "-me")  # names v0.10.0 cannot read: newer than it, not wrong


def find_binary() -> tuple[Path | None, str]:
    """The nvidia-mig-parted binary, or None and why."""
    env = os.environ.get("MIGCTL_MIG_PARTED")
    if env:
        path = Path(env)
        return (path, "") if os.access(path, os.X_OK) else (None, f"MIGCTL_MIG_PARTED={env} is not executable")
    try:
        out = subprocess.run(
            [str(REPO_ROOT / "hack" / "testbin.sh"), "--mig-parted"],
            check=False,
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"hack/testbin.sh --mig-parted failed: {e}"
    if out.returncode != 0 or not out.stdout.strip():
        return None, "nvidia-mig-parted is not built (run hack/testbin.sh)"
    return Path(out.stdout.strip()), ""


def _predated(entries: Any) -> list[str]:
    names: list[str] = []
    for e in entries if isinstance(entries, list) else []:
        devices = e.get("mig-devices") if isinstance(e, dict) else None
        if isinstance(devices, dict):
            names += [str(k) for k in devices if any(s in str(k) for s in PREDATES)]
    return names


@dataclass
class Verdict:
    """What NVIDIA's check said about one file."""

    ok: bool
    output: str
    skipped: dict[str, list[str]] = field(default_factory=dict)  # config -> the names v0.10.0 predates
    checked: list[str] = field(default_factory=list)  # configs the binary read


class MigPartedCheck:
    def __init__(self, binary: Path) -> None:
        self.binary = binary

    def run(self, text: str, selected: str) -> tuple[int, str]:
        """The binary itself on `text`: (exit status, its output)."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(text)
            path = f.name
        try:
            out = subprocess.run(
                [str(self.binary), "assert", "--valid-config", "-f", path, "-c", selected],
                check=False,
                capture_output=True,
                text=True,
                timeout=30,
            )
        finally:
            os.unlink(path)
        return out.returncode, (out.stdout + out.stderr).strip()

    def check(self, text: str, selected: str | None = None) -> Verdict:
        """Validate a whole config file (and that `selected`, if given and not skipped, is in it)."""
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError:
            data = None
        skipped: dict[str, list[str]] = {}
        configs = data.get("mig-configs") if isinstance(data, dict) else None
        if isinstance(configs, dict):
            skipped = {str(n): names for n, e in configs.items() if (names := _predated(e))}
        feed = text
        if skipped:
            assert isinstance(data, dict) and isinstance(configs, dict)
            kept = {n: e for n, e in configs.items() if str(n) not in skipped}
            if not kept:
                return Verdict(True, f"SKIPPED: every config uses names {VERSION} predates", skipped)
            feed = yaml.safe_dump({**data, "mig-configs": kept}, sort_keys=False)
            configs = kept
        names = [str(n) for n in configs] if isinstance(configs, dict) else []
        target = selected if selected is not None and selected not in skipped else (names[0] if names else "-")
        code, output = self.run(feed, target)
        return Verdict(code == 0, output, skipped, names)
