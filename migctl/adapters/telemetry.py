"""Metrics and probes for every migctl component: one registry shape, one small HTTP server.

Each component (controller, agent, webhook, fallback) builds its metrics in `registry(component)`, which always
carries `migctl_build_info` and the client library's standard `process_*` and `python_*` collectors, so a component
can never ship without them. `_created` series are off process-wide: every counter and histogram would otherwise be
exported twice (its value and its creation time), which only OpenMetrics scrapers read and which doubles the series
Prometheus stores. The import contract in pyproject.toml lets no other module import prometheus_client.

`MetricsServer` serves `/metrics`, `/healthz` and `/readyz` on a background thread (plain HTTP: probes and scrapes
stay in the pod network; the webhook's admission traffic keeps its own TLS server).
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

import prometheus_client
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from migctl import __version__

__all__ = ["CollectorRegistry", "Counter", "Gauge", "Histogram", "MetricsServer", "registry", "render"]

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]  # (not annotated upstream)

MIB = 1024 * 1024  # the planner counts MiB; Prometheus wants base units (bytes)


def registry(component: str) -> CollectorRegistry:
    """A fresh registry for one component: `migctl_build_info{component, version, python}` = 1, and the process,
    platform and garbage-collector collectors (`process_*`, `python_*`). Fresh per call, so several controllers in
    one process (the tests) never collide."""
    r = CollectorRegistry()
    for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        r.register(standard)
    build = Gauge(
        "migctl_build_info",
        "Always 1: the running migctl's version, which component this is, and the Python it runs on",
        ["component", "version", "python"],
        registry=r,
    )
    build.labels(component, __version__, platform.python_version()).set(1)
    return r


def render(*registries: CollectorRegistry | None) -> bytes:
    """The text exposition of these registries, one after another (a None is skipped: not built yet)."""
    return b"".join(generate_latest(r) for r in registries if r is not None)


class Renders(Protocol):
    def render(self) -> bytes: ...


class MetricsServer:
    """`/metrics` (the component's `render()`), `/healthz` and `/readyz` (200 or 503 with the reason), on a
    background thread. Port 0 picks a free port (`port` says which)."""

    def __init__(
        self,
        metrics: Renders | Callable[[], bytes],
        address: str,
        port: int,
        healthy: Callable[[], bool],
        ready: Callable[[], bool],
        not_ready_reason: Callable[[], str] | None = None,
        name: str = "migctl-metrics",
    ) -> None:
        body = metrics if callable(metrics) else metrics.render

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, body(), CONTENT_TYPE_LATEST)
                elif path == "/healthz":
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
                elif path == "/readyz":
                    if ready():
                        self._send(200, b"ok\n")
                    else:
                        why = not_ready_reason() if not_ready_reason else ""
                        self._send(503, f"not ready{': ' + why if why else ''}\n".encode())
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, data: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass  # probes every few seconds would drown the component's own log

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name=name, daemon=True)

    def start(self) -> MetricsServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
