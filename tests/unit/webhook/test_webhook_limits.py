"""The webhook's bounded work, without a cluster: connections served at once, timeouts, API calls per Event."""

from __future__ import annotations

import datetime as dt
import http.client
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

import pytest

from migctl.adapters.kube.errors import NotFoundError
from migctl.config.webhook import TlsSettings, WebhookSettings
from migctl.core.vram.decide import CHOICE_ANNOTATION
from migctl.webhook.configuration import match_conditions, webhook_configuration
from migctl.webhook.events import EventSender
from migctl.webhook.server import WebhookServer
from migctl.webhook.tls import CertBundle, ServingContext, renew
from migctl.wire.vram_choice import VramChoice, encode

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    b, _ = renew(None, TlsSettings(), ["localhost"], ["127.0.0.1"], NOW - dt.timedelta(days=1))
    return b


@pytest.fixture
def serve(bundle: CertBundle) -> Iterator[Any]:
    servers: list[tuple[WebhookServer, ServingContext]] = []

    def start(**kw: Any) -> WebhookServer:
        ctx = ServingContext()
        ctx.load(bundle.cert_pem, bundle.key_pem)
        server = WebhookServer("127.0.0.1", 0, lambda: ctx.context, lambda body: {"ok": True}, "/mutate", **kw)
        server.start()
        servers.append((server, ctx))
        return server

    yield start
    for server, ctx in servers:
        server.stop()
        ctx.close()


def _client(bundle: CertBundle, port: int, timeout: float = 5.0) -> http.client.HTTPSConnection:
    ctx = ssl.create_default_context(cadata=bundle.ca_pem.decode())
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=ctx)


def _post(conn: http.client.HTTPSConnection) -> int:
    conn.request("POST", "/mutate", body=b"{}", headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def test_at_most_max_connections_are_served_and_the_next_waits_for_a_free_one(serve: Any, bundle: CertBundle) -> None:
    server = serve(max_connections=2)
    kept = [_client(bundle, server.port) for _ in range(2)]
    assert [_post(c) for c in kept] == [200, 200]  # both kept alive: two workers busy with them
    third = _client(bundle, server.port, timeout=1.0)
    with pytest.raises((TimeoutError, socket.timeout, ssl.SSLError)):
        _post(third)  # connected (listen backlog) but no worker picks it up: the TLS handshake never comes
    third.close()
    kept[0].close()  # frees a worker
    fourth = _client(bundle, server.port)
    assert _post(fourth) == 200
    fourth.close()
    kept[1].close()
    assert server.stats["peak"] == 2


def test_an_idle_connection_is_closed_after_the_io_timeout(serve: Any, bundle: CertBundle) -> None:
    server = serve(io_timeout_s=0.5, request_timeout_s=30)
    conn = _client(bundle, server.port)
    assert _post(conn) == 200
    began = time.monotonic()
    assert conn.sock is not None
    conn.sock.settimeout(5)
    assert conn.sock.recv(1) == b""  # the server hung up on the idle keep-alive connection
    assert time.monotonic() - began < 3
    conn.close()


def test_a_client_trickling_its_request_is_cut_off(serve: Any, bundle: CertBundle) -> None:
    """Each byte arrives within the read timeout, but the request as a whole must finish in time."""
    server = serve(io_timeout_s=0.6, request_timeout_s=0.6)
    ctx = ssl.create_default_context(cadata=bundle.ca_pem.decode())
    raw = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    tls = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    began = time.monotonic()
    tls.sendall(b"POST /mutate HTTP/1.1\r\n")
    closed = False
    while time.monotonic() - began < 8:
        try:
            tls.sendall(b"X")  # one header byte every 0.2 s, forever
        except OSError:
            closed = True
            break
        time.sleep(0.2)
    tls.close()
    assert closed, "the trickling connection was never cut off"
    assert 1.0 < time.monotonic() - began < 6
    assert server.stats["cut_off"] == 1


def test_max_connections_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        WebhookServer("127.0.0.1", 0, ssl.create_default_context, lambda b: {}, max_connections=0)


# -- Events: API calls do not grow with the number of Events ----------------------------------------------


class CountingEvents:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []
        self.lists = 0
        self.events: list[dict[str, Any]] = []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        raise NotFoundError("read pod", 404, "Not Found")

    def list_pods(
        self, namespace: str | None = None, field_selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        self.lists += 1
        return [p for p in self.pods if p["metadata"]["namespace"] == namespace]

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)


def _lists_over_the_wait(events: int, namespaces: int = 1) -> tuple[int, int]:
    kube = CountingEvents()
    now = [0.0]
    sender = EventSender(kube, wait_s=10, poll_s=0.5, clock=lambda: now[0])
    for i in range(events):
        sender.submit(f"ns-{i % namespaces}", {"metadata": {"generateName": "w-"}}, f"u-{i}", "m")
    waiting = [sender.queue.get_nowait() for _ in range(events)]
    # half the pods appear after 2 s; the rest never do
    while waiting and now[0] <= 12:
        if now[0] == 2.0:
            kube.pods += [
                {
                    "metadata": {
                        "name": f"w-{i}",
                        "namespace": f"ns-{i % namespaces}",
                        "uid": f"pod-{i}",
                        "annotations": {CHOICE_ANNOTATION: encode(VramChoice("m", (), (), f"u-{i}"))},
                    }
                }
                for i in range(0, events, 2)
            ]
        waiting = sender.send_due(waiting)
        now[0] += 0.5
    assert not waiting, "every Event is sent or given up by its deadline"
    assert len(kube.events) == (events + 1) // 2
    return kube.lists, sender.lists


def test_generate_name_events_share_one_list_per_namespace_and_back_off() -> None:
    one, _ = _lists_over_the_wait(2)  # one pod appears, one never does
    many, counted = _lists_over_the_wait(200)
    assert many == one == counted, "LISTs must not grow with the number of Events in a namespace"
    assert one <= 6, f"{one} LISTs in 10 s: the delay between looks should double"
    assert _lists_over_the_wait(200, namespaces=3)[0] <= 3 * one


# -- The configuration -----------------------------------------------------------------------------------------


def test_match_conditions_name_the_configured_resource_and_guard_every_field() -> None:
    cfg = webhook_configuration("w", {"url": "u"}, WebhookSettings(path="/x"))
    (cond,) = cfg["webhooks"][0]["matchConditions"]
    assert cond["name"] == "asks-for-vram"
    expr = cond["expression"]
    for part in ("containers", "initContainers"):
        assert f"has(object.spec.{part}) && object.spec.{part}.exists(c, " in expr
    assert expr.count('"migctl.io/vram" in c.resources.limits') == 2
    assert expr.count('"migctl.io/vram" in c.resources.requests') == 2
    assert match_conditions("example.com/gpu-mem")[0]["expression"].count('"example.com/gpu-mem"') == 4


# -- the caBundle without the right to write it -------------------------------------------------------------------


def test_a_forbidden_ca_bundle_write_says_which_right_is_missing() -> None:
    from migctl.adapters.kube.errors import ForbiddenError, KubeError
    from migctl.webhook.certs import CertManager

    class NoRights:
        def read_secret(self, namespace: str, name: str) -> tuple[dict[str, bytes], str] | None:
            raise AssertionError("no Secret in this test (tls.secret_name is empty)")

        def write_secret(self, *a: Any) -> None:
            raise AssertionError("no Secret in this test (tls.secret_name is empty)")

        def read_webhook_configuration(self, name: str) -> dict[str, Any] | None:
            raise ForbiddenError(f"read mutatingwebhookconfiguration {name}", 403, "Forbidden")

        def replace_webhook_configuration(self, name: str, body: dict[str, Any]) -> None:
            raise AssertionError("never read, never written")

    ctx = ServingContext()
    try:
        settings = WebhookSettings(tls=TlsSettings(secret_name=""))
        mgr = CertManager(NoRights(), settings, ctx, "ns", clock=lambda: NOW)
        with pytest.raises(KubeError, match=r"needs get and update on it .*set webhook.configuration_name empty"):
            mgr.sync()
    finally:
        ctx.close()
