"""helm for the tests that render, lint or package the chart without an API server: the binary hack/testbin.sh
builds. Missing, the test is skipped with one loud reason (HELM NOT BUILT), or fails where the cluster tier is
required (MIGCTL_REQUIRE_CLUSTER=1, as on CI), the cluster tier's own rule."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "migctl"
KUBE_VERSION = "1.36"


def helm_binary() -> Path:
    env = os.environ.get("MIGCTL_TESTBIN")
    if env:
        bin_dir: str | None = env
    else:
        res = subprocess.run([str(ROOT / "hack" / "testbin.sh"), "--path"], capture_output=True, text=True, check=False)
        bin_dir = res.stdout.strip() if res.returncode == 0 else None
    helm = Path(bin_dir) / "helm" if bin_dir else None
    if helm is None or not helm.exists():
        why = "HELM NOT BUILT: run hack/testbin.sh (it builds helm with the control plane)"
        if os.environ.get("MIGCTL_REQUIRE_CLUSTER", "") not in ("", "0", "false"):
            pytest.fail(f"{why} (MIGCTL_REQUIRE_CLUSTER=1)", pytrace=False)
        pytest.skip(why)
    return helm


def run_helm(helm: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False, cwd=cwd)


def render(helm: Path, *values: str, namespace: str = "migctl") -> list[dict[str, Any]]:
    res = run_helm(helm, "template", "migctl", str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                   *values)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]
