"""`migctl run` as a real process against the real API server: it starts, reports ready, takes the Lease, and
stops cleanly on SIGTERM (what the kubelet sends). The in-process tests (test_controller_e2e.py) cover behaviour;
this covers the command-line wiring, config loading and signal handling they bypass."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from .controlplane import ControlPlane
from .waiting import wait_for

pytestmark = pytest.mark.cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return int(r.status)
    except OSError:
        return None


def _holder(api: client.CoordinationV1Api, name: str, namespace: str) -> str | None:
    """The Lease's holder, or None while the Lease does not exist yet: readiness may come before the first
    election on a loaded machine, so a 404 means "not yet", not a failure."""
    try:
        holder: str | None = api.read_namespaced_lease(name, namespace).spec.holder_identity
    except client.ApiException as e:
        if e.status == 404:
            return None
        raise
    return holder


def test_run_process_starts_leads_and_stops_on_sigterm(
    control_plane: ControlPlane, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    port = _free_port()
    lease = f"migctl-{namespace}"
    config = tmp_path / "migctl.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "gpu_operator": {"configmap_namespace": namespace},
                "controller": {
                    "configmap_namespace": namespace,
                    "metrics_port": port,
                    "metrics_address": "127.0.0.1",
                    "log_format": "json",
                    "leader_election": {"lease_name": lease, "lease_namespace": namespace},
                },
            }
        )
    )
    exe = shutil.which("migctl", path=str(Path(sys.executable).parent)) or "migctl"
    # Output to a file, not a pipe: nobody reads a pipe until the end, and once the cluster holds the objects of
    # earlier tests (warnings for each bad one) 64 KiB of logs fill it and block the process mid-start.
    log_path = tmp_path / "migctl-run.log"
    log_file = log_path.open("w")
    proc = subprocess.Popen(
        [exe, "run", "--config", str(config), "--kubeconfig", str(control_plane.kubeconfig)],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_for("/healthz 200", lambda: _get(f"http://127.0.0.1:{port}/healthz") == 200, timeout=30)
        wait_for("/readyz 200", lambda: _get(f"http://127.0.0.1:{port}/readyz") == 200, timeout=30)
        leases = client.CoordinationV1Api(core.api_client)
        holder = wait_for("the Lease to name a holder", lambda: _holder(leases, lease, namespace), timeout=30)
        assert holder
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)  # the kubelet's default grace period
        except subprocess.TimeoutExpired:
            log_file.flush()
            pytest.fail(
                f"migctl run did not stop within 30 s of SIGTERM; its log ends:\n{log_path.read_text()[-3000:]}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        log_file.close()
    out = log_path.read_text()
    assert proc.returncode == 0, out[-2000:]
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines, "expected JSON log lines (controller.log_format: json)"
