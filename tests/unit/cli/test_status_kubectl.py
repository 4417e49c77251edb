"""The `kubectl-migctl` entry point as pip installs it: the wheel declares it, and the script pip writes runs the
same click group, named `kubectl migctl` (kubectl runs any `kubectl-<name>` executable on PATH as `kubectl <name>`;
kubectl itself is not among the test binaries, so its lookup on PATH is not exercised here)."""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from pathlib import Path

from ..test_packaging import ROOT, wheel  # noqa: F401 (wheel: the module's fixture, built once)


def test_the_wheel_declares_both_entry_points(wheel: Path) -> None:  # noqa: F811
    with zipfile.ZipFile(wheel) as z:
        (name,) = [n for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")]
        entry_points = configparser.ConfigParser()
        entry_points.read_string(z.read(name).decode())
    scripts = dict(entry_points["console_scripts"])
    assert scripts == {"migctl": "migctl.cli:main", "kubectl-migctl": "migctl.cli:kubectl_main"}


def test_the_installed_kubectl_migctl_script_runs_status_and_plan(wheel: Path, tmp_path: Path) -> None:  # noqa: F811
    # --target, never --prefix: pip install --prefix uninstalls the migctl of the running environment first
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", "--target",
                    str(target), str(wheel)], check=True)  # fmt: skip
    script = target / "bin" / "kubectl-migctl"
    assert script.exists()
    deps = [p for p in sys.path if "site-packages" in p]
    env = {"PYTHONPATH": ":".join([str(target), *deps])}
    example = ROOT / "migctl" / "examples" / "cluster-snapshot.yaml"
    res = subprocess.run([sys.executable, str(script), "status", "--snapshot", str(example)], env=env,
                         cwd=tmp_path, capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0].split()[:2] == ["NODE", "MODELS"] and "h100-node-1" in res.stdout
    res = subprocess.run([sys.executable, str(script), "plan", "--bogus"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert res.returncode == 2 and "Usage: kubectl migctl plan" in res.stderr
