"""Every component's metrics and probes, in-process over real HTTP (no cluster): the standard series each registry
carries, base units, no `_created` doubles, and the agent's, fallback's and webhook's own endpoints.

The live scrape of each component as a real process against a real API server is
tests/cluster/test_observability.py; this tier checks the same rules without one.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import re
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from migctl import __version__
from migctl.agent.runner import AgentRunner, serve_health
from migctl.config.agent import AgentSettings
from migctl.config.webhook import TlsSettings
from migctl.controller.metrics import Metrics
from migctl.core.model.inventory import Inventory
from migctl.errors import MigctlError
from migctl.fallback.metrics import FallbackMetrics, serve_metrics
from migctl.webhook.server import WebhookServer
from migctl.webhook.server import serve_metrics as serve_webhook_metrics
from migctl.webhook.tls import ServingContext, renew
from migctl.wire.inplace import Status

MIB = 1024 * 1024


def families(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample_names(text: str) -> set[str]:
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Reader:
    def __init__(self, error: str = "") -> None:
        self.error = error

    def read(self) -> Inventory:
        if self.error:
            raise MigctlError(self.error)
        return Inventory(driver="580.0")


def exposition(component: str) -> str:
    """One component's /metrics text as its server renders it (no cluster needed for any of them)."""
    if component == "controller":
        m = Metrics()
        m.stranded.set(3)
        m.stranded_node.labels("gpu-1").set(2)
        m.pending_demand.labels("a100-40gb").set(5120)
        m.plans.inc()
        return m.render().decode()
    if component == "agent":
        return AgentRunner(Reader(), None, AgentSettings(health_port=None), node="n1").metrics.render().decode()
    if component == "fallback":
        return FallbackMetrics().render().decode()
    assert component == "webhook"
    server = WebhookServer("127.0.0.1", 0, ssl.create_default_context, lambda body: {})
    try:
        return server.metrics.render().decode()
    finally:
        server._server.server_close()
        server._server.pool.shutdown()


COMPONENTS = ["controller", "agent", "fallback", "webhook"]


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_component_exports_build_info_and_the_process_and_python_collectors(component: str) -> None:
    text = exposition(component)
    fams = families(text)
    (info,) = fams["migctl_build_info"].samples
    assert info.value == 1 and info.labels["component"] == component and info.labels["version"] == __version__
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "process_start_time_seconds"} <= set(
        sample_names(text)
    )
    assert "python_info" in fams and "python_gc_collections" in fams


@pytest.mark.parametrize("component", COMPONENTS)
def test_no_created_series_and_no_non_base_units(component: str) -> None:
    """A counter or histogram is one series family, not two (`_created` is off), and memory is in bytes."""
    names = sample_names(exposition(component))
    assert not [n for n in names if n.endswith("_created")]
    assert not [n for n in names if re.search(r"_(mib|mb|megabytes|kib|gib)(_|$)", n)], names


def test_the_controllers_memory_gauges_are_bytes() -> None:
    fams = families(exposition("controller"))
    assert fams["migctl_stranded_bytes"].samples[0].value == 3 * MIB
    assert fams["migctl_node_unusable_bytes"].samples[0].labels == {"node": "gpu-1"}
    assert fams["migctl_node_unusable_bytes"].samples[0].value == 2 * MIB
    assert fams["migctl_pending_vram_demand_bytes"].samples[0].value == 5120 * MIB
    assert not {"migctl_stranded_mib", "migctl_node_unusable_mib", "migctl_pending_vram_demand_mib"} & fams.keys()


# -- the agent ---------------------------------------------------------------------------------------------------


def test_the_agent_serves_metrics_next_to_its_probes_and_counts_reads() -> None:
    runner = AgentRunner(Reader("NVML: driver not loaded"), None, AgentSettings(health_port=None), node="gpu-7")
    runner.tick()
    server = serve_health(runner, 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        code, body = get(f"{url}/readyz")
        assert code == 503 and "driver not loaded" in body
        code, text = get(f"{url}/metrics")
        assert code == 200
        fams = families(text)
        labels = {"node": "gpu-7"}
        assert [s.value for s in fams["migctl_agent_ready"].samples if s.labels == labels] == [0]
        reads = {s.labels["result"]: s.value for s in fams["migctl_agent_reads"].samples if s.name.endswith("_total")}
        assert reads == {"success": 0, "failure": 1}
        runner.reader = Reader()
        runner.tick()
        fams = families(get(f"{url}/metrics")[1])
        assert [s.value for s in fams["migctl_agent_ready"].samples] == [1]
        assert [s.value for s in fams["migctl_agent_failures_in_a_row"].samples] == [0]
        assert get(f"{url}/readyz")[0] == 200 and get(f"{url}/healthz")[0] == 200
    finally:
        server.shutdown()


def test_the_in_place_agent_counts_each_answer_and_each_failed_step() -> None:
    answers: list[object] = [Status("p1", "applied"), Status("p2", "blocked"), None]

    def step() -> object:
        if not answers:
            raise MigctlError("journal unreadable")
        return answers.pop(0)

    runner = AgentRunner(Reader(), None, AgentSettings(health_port=None), before_read=step, node="gpu-7")
    for _ in range(4):
        assert runner.tick()  # the inventory goes out whatever the in-place step did
    counted = {
        s.labels["state"]: s.value
        for s in families(runner.metrics.render().decode())["migctl_agent_in_place_answers"].samples
        if s.name.endswith("_total")
    }
    assert counted == {"applied": 1, "blocked": 1, "error": 1}


# -- the fallback ------------------------------------------------------------------------------------------------


def test_the_fallback_is_ready_after_a_good_pass_and_unhealthy_when_its_loop_stalls() -> None:
    now = [1000.0]
    m = FallbackMetrics(clock=lambda: now[0])
    server = serve_metrics(m, 0, interval_s=10.0, address="127.0.0.1")
    url = f"http://127.0.0.1:{server.port}"
    try:
        assert get(f"{url}/readyz") == (503, "not ready: no pass yet\n")
        m.failed(0.1, "403 Forbidden: nodes is forbidden")
        assert get(f"{url}/readyz") == (503, "not ready: 403 Forbidden: nodes is forbidden\n")
        m.passed(0.2, bound=2, unplaced=1, capacity_changes=3)
        assert get(f"{url}/readyz")[0] == 200 and get(f"{url}/healthz")[0] == 200
        fams = families(get(f"{url}/metrics")[1])
        assert {s.labels["result"]: s.value for s in fams["migctl_fallback_passes"].samples} == {
            "success": 1,
            "failure": 1,
        }
        assert fams["migctl_fallback_pods_bound"].samples[0].value == 2
        assert fams["migctl_fallback_unplaced_pods"].samples[0].value == 1
        now[0] += 299  # under max(300 s, 10 intervals)
        assert get(f"{url}/healthz")[0] == 200
        now[0] += 2
        assert get(f"{url}/healthz")[0] == 503
    finally:
        server.stop()


# -- the webhook -------------------------------------------------------------------------------------------------


@pytest.fixture
def webhook() -> Iterator[WebhookServer]:
    bundle, _ = renew(None, TlsSettings(), ["localhost"], ["127.0.0.1"], dt.datetime.now(dt.UTC) - dt.timedelta(1))
    ctx = ServingContext()
    ctx.load(bundle.cert_pem, bundle.key_pem)

    def admit(body: Any) -> dict[str, Any]:
        if body.get("boom"):
            raise RuntimeError("boom")
        return {"ok": True}

    server = WebhookServer("127.0.0.1", 0, lambda: ctx.context, admit, ready=lambda: True)
    server.start()
    yield server
    server.stop()
    ctx.close()


def test_the_webhook_counts_admissions_by_status_on_its_plain_http_metrics_port(webhook: WebhookServer) -> None:
    conn = http.client.HTTPSConnection("127.0.0.1", webhook.port, context=ssl._create_unverified_context())
    for body in (b"{}", b"not json", json.dumps({"boom": 1}).encode(), b"{}"):
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        conn.getresponse().read()
    conn.close()
    metrics = serve_webhook_metrics("127.0.0.1", 0, lambda: webhook, lambda: True)
    try:
        text = get(f"http://127.0.0.1:{metrics.port}/metrics")[1]
    finally:
        metrics.stop()
    fams = families(text)
    codes = {s.labels["code"]: s.value for s in fams["migctl_webhook_admission_requests"].samples}
    assert codes == {"200": 2, "400": 1, "500": 1}
    count = [s.value for s in fams["migctl_webhook_admission_seconds"].samples if s.name.endswith("_count")]
    assert count == [4]
    assert fams["migctl_webhook_ready"].samples[0].value == 1
