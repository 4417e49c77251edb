"""The agent loop: readiness, backoff without crash loops, publishing only on change, and the CLI probe."""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

import pynvml
import pytest
from apscheduler.schedulers.background import BackgroundScheduler
from click.testing import CliRunner
from kubernetes import client
from kubernetes.client.exceptions import ApiException

import migctl.adapters.nvml as nvml_module
from migctl.adapters.kube import KubeApi
from migctl.adapters.nvml import NvmlReader
from migctl.agent.publisher import Publisher, PublishError
from migctl.agent.runner import AgentRunner, serve_health
from migctl.cli import cli
from migctl.config.agent import AgentSettings
from migctl.core.model.inventory import Inventory
from tests.unit.fake_nvml import FakeNvml, a100_mig, t4

FAST = AgentSettings(interval_seconds=30, backoff_initial_seconds=5, backoff_max_seconds=40, health_port=None)


class FlakyReader:
    """Fails while `failing` is set; counts reads."""

    def __init__(self, failing: bool) -> None:
        self.failing = failing
        self.reads = 0
        self.good = NvmlReader(FakeNvml([t4()]))
        self.bad = NvmlReader(FakeNvml([t4()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))

    def read(self) -> Inventory:
        self.reads += 1
        return (self.bad if self.failing else self.good).read()


class FakeCore:
    """Stands in for CoreV1Api.patch_node under a real KubeApi (translation, retries): records patches, can fail
    first."""

    def __init__(self, errors: list[ApiException] | None = None) -> None:
        self.errors = list(errors or [])
        self.patches: list[tuple[str, dict[str, Any]]] = []

    def patch_node(self, name: str, body: dict[str, Any], **kwargs: Any) -> Any:
        if self.errors:
            raise self.errors.pop(0)
        self.patches.append((name, body))
        return {"metadata": {"annotations": body["metadata"]["annotations"]}}


def _kube(core: FakeCore) -> KubeApi:
    """What `migctl agent` builds (5 attempts), with the client's CoreV1Api swapped for the fake."""
    kube = KubeApi(client.ApiClient(), attempts=5, max_wait_s=0.001)
    kube.core = core
    return kube


def test_failures_back_off_exponentially_then_recover(caplog: pytest.LogCaptureFixture) -> None:
    reader = FlakyReader(failing=True)
    runner = AgentRunner(reader, None, FAST)
    delays = []
    with caplog.at_level(logging.INFO):
        for _ in range(5):
            assert runner.tick() is False
            delays.append(runner.delay)
    assert delays == [5, 10, 20, 40, 40]  # doubling, capped at backoff_max_seconds
    assert not runner.ready and "kernel driver is not loaded" in runner.last_error
    assert sum("not ready" in r.message for r in caplog.records) == 1  # one line per cause, not per retry
    reader.failing = False
    assert runner.tick() is True
    assert runner.ready and runner.last_error == "" and runner.delay == 30


def test_unexpected_exceptions_do_not_kill_the_loop() -> None:
    class Broken:
        def read(self) -> Inventory:
            raise KeyError("surprise")

    runner = AgentRunner(Broken(), None, FAST)
    assert runner.tick() is False
    assert "KeyError" in runner.last_error and not runner.ready


def test_scheduled_loop_keeps_retrying_a_failing_nvml() -> None:
    reader = FlakyReader(failing=True)
    settings = AgentSettings(
        interval_seconds=0.05, backoff_initial_seconds=0.05, backoff_max_seconds=0.05, health_port=None
    )
    runner = AgentRunner(reader, None, settings)
    scheduler = BackgroundScheduler()
    try:
        runner.run(scheduler)
        deadline = time.monotonic() + 5
        while reader.reads < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reader.reads >= 4 and scheduler.running and not runner.ready
        reader.failing = False
        while not runner.ready and time.monotonic() < deadline:
            time.sleep(0.02)
        assert runner.ready
    finally:
        scheduler.shutdown(wait=False)


def test_readyz_reports_the_reason() -> None:
    runner = AgentRunner(FlakyReader(failing=True), None, FAST)
    runner.tick()
    server = serve_health(runner, 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"{url}/readyz", timeout=5)
        assert err.value.code == 503 and "kernel driver" in err.value.read().decode()
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
            assert r.status == 200
        runner.reader = FlakyReader(failing=False)
        runner.tick()
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as r:
            assert r.status == 200
    finally:
        server.shutdown()


def test_publisher_patches_only_on_change(monkeypatch: pytest.MonkeyPatch) -> None:
    core = FakeCore()
    pub = Publisher(_kube(core), "node-a")
    inv = NvmlReader(FakeNvml([a100_mig()])).read()
    assert pub.publish(inv) is True
    assert pub.publish(NvmlReader(FakeNvml([a100_mig()])).read()) is False
    changed = a100_mig()
    changed.instances[1].processes = 1  # the idle 2g.10gb gets a process
    assert pub.publish(NvmlReader(FakeNvml([changed])).read()) is True
    assert len(core.patches) == 2
    name, body = core.patches[-1]
    assert name == "node-a"
    published = json.loads(body["metadata"]["annotations"]["migctl.io/gpus"])
    assert published["gpus"][0]["instances"][1]["busy"] is True


def test_publisher_retries_transient_errors_only(monkeypatch: pytest.MonkeyPatch) -> None:
    inv = NvmlReader(FakeNvml([t4()])).read()
    core = FakeCore([ApiException(status=503), ApiException(status=429)])
    assert Publisher(_kube(core), "n").publish(inv) is True
    assert len(core.patches) == 1
    forbidden = FakeCore([ApiException(status=403), ApiException(status=403)])
    with pytest.raises(PublishError, match="needs `patch` on nodes"):
        Publisher(_kube(forbidden), "n").publish(inv)
    assert len(forbidden.errors) == 1  # not retried
    body = json.dumps({"message": "ValidatingAdmissionPolicy 'x' denied request: may only change its own node"})
    refused = FakeCore([ApiException(status=422, reason="Unprocessable Entity", body=body) for _ in range(2)])
    with pytest.raises(PublishError, match=r"node-restriction policy refused the write .*may only change its own node"):
        Publisher(_kube(refused), "n").publish(inv)
    assert len(refused.errors) == 1


def test_cli_probe_prints_inventory_and_touches_no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: NvmlReader(FakeNvml([a100_mig(), t4()])))

    def no_cluster(*a: object, **k: object) -> None:
        raise AssertionError("the probe must not talk to a cluster")

    monkeypatch.setattr("migctl.adapters.kube.api_client", no_cluster)
    result = CliRunner().invoke(cli, ["agent", "--once", "--print"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["version"] == "v1" and [g["name"] for g in data["gpus"]] == ["NVIDIA A100-SXM4-40GB", "Tesla T4"]


def test_cli_probe_without_driver_exits_1_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: NvmlReader(fake))
    result = CliRunner().invoke(cli, ["agent", "--once", "--print"])
    assert result.exit_code == 1
    assert "libnvidia-ml.so.1 was not found" in result.output


def test_cli_needs_a_node_name_to_publish(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: NvmlReader(FakeNvml([t4()])))
    result = CliRunner().invoke(cli, ["agent", "--once"])
    assert result.exit_code == 2 and "NODE_NAME" in result.output
