"""Every migctl component as a real `migctl` process against the real API server, each with its metrics port, for
the observability tests: the controller (`migctl run`), the agent and the in-place agent (`migctl agent`), the
webhook (`migctl webhook`) and the fallback (`migctl fallback`). All read one config file with
`controller.log_format: json`; each writes its output to its own file.

No GPU here: both agents' NVML reads fail (no libnvidia-ml), so they run not ready, which is what their metrics and
/readyz must then say. The in-place agent's journal and PodResources socket are a temporary directory and a path
with no kubelet behind it (its in-place step fails each tick and is counted). The webhook mints its self-signed
certificate into a Secret of the test's namespace and touches no MutatingWebhookConfiguration.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .controlplane import ControlPlane

COMPONENTS = ("controller", "agent", "agent-in-place", "webhook", "fallback")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_get(url: str) -> tuple[int, str] | None:
    """(status, body), or None while nothing listens."""
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return None


@dataclass
class Component:
    name: str
    port: int
    proc: subprocess.Popen[bytes]
    log: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def output(self, tail: int = 4000) -> str:
        return self.log.read_text(errors="replace")[-tail:]


def config(base: dict[str, Any], namespace: str, ports: dict[str, int]) -> dict[str, Any]:
    """`base` (a config file's content: the controller test settings) with every component's port, JSON logs."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    out["controller"] = {
        **out.get("controller", {}), "metrics_port": ports["controller"], "metrics_address": "127.0.0.1",
        "log_format": "json",
    }  # fmt: skip
    out["agent"] = {"health_port": ports["agent"], "interval_seconds": 5, "backoff_max_seconds": 5}
    out["webhook"] = {
        "address": "127.0.0.1",
        "port": free_port(),
        "metrics_port": ports["webhook"],
        "namespace": namespace,
        "configuration_name": "",
        "tls": {"secret_name": f"migctl-webhook-tls-{namespace}"},
    }
    out["fallback"] = {"metrics_port": ports["fallback"], "interval_seconds": 2}
    return out


def start_all(control_plane: ControlPlane, namespace: str, work: Path, base: dict[str, Any]) -> list[Component]:
    """Start every component with `base` (a config file's content) and its own port; the caller stops them."""
    work.mkdir(parents=True, exist_ok=True)
    ports = {"controller": free_port(), "agent": free_port(), "webhook": free_port(), "fallback": free_port()}
    ports["agent-in-place"] = free_port()
    cfg_file = work / "migctl.yaml"
    cfg_file.write_text(yaml.safe_dump(config(base, namespace, ports)))
    exe = shutil.which("migctl", path=str(Path(sys.executable).parent)) or "migctl"
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("MIGCTL_")}
    base_env["POD_NAMESPACE"] = namespace
    kube = ["--config", str(cfg_file), "--kubeconfig", str(control_plane.kubeconfig)]
    state = work / "in-place-state"
    state.mkdir()
    commands: dict[str, tuple[list[str], dict[str, str]]] = {
        "controller": (["run", *kube], {}),
        "agent": (["agent", "--node", f"{namespace}-gpu-a", *kube], {}),
        "agent-in-place": (
            ["agent", "--node", f"{namespace}-gpu-b", *kube],
            {
                "MIGCTL_AGENT__IN_PLACE": "true",
                "MIGCTL_AGENT__HEALTH_PORT": str(ports["agent-in-place"]),
                "MIGCTL_AGENT__STATE_DIR": str(state),
                "MIGCTL_AGENT__POD_RESOURCES_SOCKET": str(work / "no-kubelet.sock"),
            },
        ),
        "webhook": (["webhook", *kube], {}),
        "fallback": (["fallback", *kube], {}),
    }
    started: list[Component] = []
    for name in COMPONENTS:
        args, extra_env = commands[name]
        log = work / f"{name}.log"
        with log.open("wb") as out:  # a file, not a pipe: nobody reads a pipe until the end
            proc = subprocess.Popen([exe, *args], stdout=out, stderr=subprocess.STDOUT, env={**base_env, **extra_env})
        started.append(Component(name, ports[name], proc, log))
    return started


def stop_all(components: list[Component]) -> None:
    for c in components:
        if c.proc.poll() is None:
            c.proc.terminate()
    for c in components:
        try:
            c.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            c.proc.kill()
            c.proc.wait(timeout=10)
