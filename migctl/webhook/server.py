"""The HTTPS server: `POST <path>` (AdmissionReview), `GET /healthz`, `GET /readyz`. Standard library only.

Each accepted connection is wrapped with the *current* `ssl.SSLContext`, so a rotated certificate is served
to new connections at once without a restart. Work is bounded: at most `max_connections` connections are served
at once, by a fixed pool of worker threads (the TLS handshake runs there, so a slow client never holds up the
accept loop); beyond that, new connections wait in the listen backlog until a worker is free. Every read or write
times out after `io_timeout_s` (an idle kept-alive connection is closed then), and a request that has not been
answered `request_timeout_s` after the connection began waiting for it is cut off, so a client trickling bytes
cannot hold a worker for long.

Each server has its own metrics (`WebhookServerMetrics`: admissions by HTTP status, their latency, connections open
and cut off, readiness), served on the plain-HTTP metrics port by `serve_metrics`, away from the admission traffic
and its connection limit.
"""

from __future__ import annotations

import contextlib
import json
import logging
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from migctl.adapters.telemetry import Counter, Gauge, Histogram, MetricsServer, registry, render

log = logging.getLogger(__name__)
MAX_BODY = 3 * 1024 * 1024  # the API server sends at most a few MiB (objects are capped at 1.5 MiB in etcd)
MAX_CONNECTIONS = 64  # the API server keeps a few connections per replica alive; far more is a misbehaving client
IO_TIMEOUT_S = 10.0  # one read or write; also how long an idle kept-alive connection stays open
REQUEST_TIMEOUT_S = 30.0  # the API server gives up after timeoutSeconds (at most 30 s) anyway

Handler = Callable[[Any], dict[str, Any]]  # parsed JSON body -> response body; ValueError -> 400


class WebhookServerMetrics:
    """What the API server's calls look like from the webhook: answers by HTTP status (200 includes every
    decision, 5xx are failures the API server applies failurePolicy to), latency, connections."""

    def __init__(self, server: _TlsServer) -> None:
        r = self.registry = registry("webhook")
        self.requests = Counter(
            "migctl_webhook_admission_requests",
            "Admission requests answered, by HTTP status: 200 (a decision), 400/413 (bad request), 500 (failed)",
            ["code"],
            registry=r,
        )
        for code in ("200", "400", "500"):
            self.requests.labels(code)
        self.seconds = Histogram(
            "migctl_webhook_admission_seconds", "Time to answer one admission request (read, decide, write)",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=r,
        )  # fmt: skip
        self.cut_off = Counter(
            "migctl_webhook_connections_cut_off", "Connections closed for running past request_timeout_s", registry=r
        )
        open_now = Gauge("migctl_webhook_connections", "Connections open now", registry=r)
        open_now.set_function(lambda: float(len(server.connections)))
        ready = Gauge("migctl_webhook_ready", "1 once the webhook has a view of the cluster's GPUs", registry=r)
        ready.set_function(lambda: float(server.ready()))

    def render(self) -> bytes:
        return render(self.registry)


class _TlsServer(HTTPServer):
    """Binds and listens like HTTPServer; `serve(stop)` is its own bounded accept loop (not serve_forever)."""

    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        context: Callable[[], ssl.SSLContext],
        admit: Handler,
        path: str,
        ready: Callable[[], bool],
        max_connections: int = MAX_CONNECTIONS,
        io_timeout_s: float = IO_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, got {max_connections}")
        self.context_provider = context
        self.admit = admit
        self.admit_path = path
        self.ready = ready
        self.max_connections = max_connections
        self.io_timeout_s = io_timeout_s
        self.request_timeout_s = request_timeout_s
        self.lock = threading.Lock()
        self.connections: dict[socket.socket, float] = {}  # open connection -> when its current request is cut off
        self.slots = threading.BoundedSemaphore(max_connections)
        self.pool = ThreadPoolExecutor(max_workers=max_connections, thread_name_prefix="migctl-webhook-conn")
        self.peak = 0  # most connections served at once (for tests and debugging)
        self.cut_off = 0  # connections closed for running past request_timeout_s
        self.admissions = 0  # POSTs to the admission path (tests check what the API server sends)
        self.metrics = WebhookServerMetrics(self)
        super().__init__(address, _Handler)

    def serve(self, stop: threading.Event, tick: float = 0.2) -> None:
        """Accept until `stop`: one connection per free slot; overdue connections are cut off every `tick`."""
        full_logged = False
        with selectors.DefaultSelector() as sel:
            sel.register(self.socket, selectors.EVENT_READ)
            while not stop.is_set():
                self.reap()
                if not self.slots.acquire(timeout=tick):
                    if not full_logged:
                        log.warning("serving %d connections, the most allowed; new ones wait", self.max_connections)
                        full_logged = True
                    continue
                full_logged = False
                if not sel.select(timeout=tick):
                    self.slots.release()
                    continue
                try:
                    sock, addr = self.socket.accept()
                except OSError:
                    self.slots.release()
                    continue
                self.pool.submit(self._connection, sock, addr)

    def _connection(self, sock: socket.socket, addr: Any) -> None:
        conn: socket.socket = sock
        try:
            sock.settimeout(self.io_timeout_s)
            conn = self.context_provider().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            self.touch(conn)
            _Handler(conn, addr, self)
        except Exception:  # a failed handshake or a reset: the client's problem, not ours
            log.debug("connection from %s failed", addr, exc_info=True)
        finally:
            with self.lock:
                self.connections.pop(conn, None)
            with contextlib.suppress(OSError):
                self.shutdown_request(conn)
            self.slots.release()

    def touch(self, conn: socket.socket) -> None:
        """A new request may start on `conn` now: it must be answered within io_timeout_s + request_timeout_s."""
        with self.lock:
            self.connections[conn] = time.monotonic() + self.io_timeout_s + self.request_timeout_s
            self.peak = max(self.peak, len(self.connections))

    def reap(self) -> None:
        """Cut off connections past their deadline (the worker's blocked read then fails and it cleans up)."""
        now = time.monotonic()
        with self.lock:
            overdue = [c for c, deadline in self.connections.items() if deadline < now]
            for c in overdue:
                self.connections[c] = float("inf")  # once
        for c in overdue:
            self.cut_off += 1
            self.metrics.cut_off.inc()
            log.info("closing a connection that ran past %.0f s", self.request_timeout_s)
            with contextlib.suppress(OSError):
                socket.socket.shutdown(c, socket.SHUT_RDWR)  # the plain socket's: leaves the TLS state to its worker

    def close_connections(self) -> None:
        """End kept-alive connections too: a stopped webhook must look stopped to the API server."""
        with self.lock:
            conns = list(self.connections)
        for c in conns:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(c, socket.SHUT_RDWR)


class _Handler(BaseHTTPRequestHandler):
    server: _TlsServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        conn = self.request
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()
        super().setup()

    def handle_one_request(self) -> None:
        self.server.touch(self.request)  # the deadline covers waiting for this request and answering it
        super().handle_one_request()

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, OSError) as e:  # handshake failures, resets: the client's problem, not ours
            log.debug("connection from %s: %s", self.client_address, e)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def _send(self, code: int, body: dict[str, Any] | str) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
        self.code = code
        self.send_response(code)
        self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(200, "ok")
        elif self.path == "/readyz":
            ready = self.server.ready()
            self._send(200 if ready else 503, "ok" if ready else "not ready: no view of the cluster yet")
        else:
            self._send(404, "not found")

    def do_POST(self) -> None:
        if self.path.split("?")[0] != self.server.admit_path:
            self._send(404, "not found")
            return
        with self.server.lock:
            self.server.admissions += 1
        started, self.code = time.monotonic(), 0
        try:
            self._admission()
        finally:
            m = self.server.metrics
            m.requests.labels(str(self.code or 500)).inc()
            m.seconds.observe(time.monotonic() - started)

    def _admission(self) -> None:
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY:
            self._send(400 if length <= 0 else 413, "expected a JSON AdmissionReview body")
            return
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError as e:
            self._send(400, f"not JSON: {e}")
            return
        try:
            response = self.server.admit(body)
        except ValueError as e:
            self._send(400, str(e))
            return
        except Exception:  # the API server applies failurePolicy to a 500, which is what an operator chose
            log.exception("admission failed")
            self._send(500, "internal error; see the webhook's log")
            return
        self._send(200, response)


class WebhookServer:
    """Serve in a background thread: `start()`, `port`, `stop()`."""

    def __init__(
        self,
        address: str,
        port: int,
        context: Callable[[], ssl.SSLContext],
        admit: Handler,
        path: str = "/mutate",
        ready: Callable[[], bool] = lambda: True,
        max_connections: int = MAX_CONNECTIONS,
        io_timeout_s: float = IO_TIMEOUT_S,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self._server = _TlsServer(
            (address, port), context, admit, path, ready, max_connections, io_timeout_s, request_timeout_s
        )
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def metrics(self) -> WebhookServerMetrics:
        return self._server.metrics

    @property
    def stats(self) -> dict[str, int]:
        """Connections open now, the most at once, how many were cut off for running too long, admission POSTs."""
        s = self._server
        with s.lock:
            return {"open": len(s.connections), "peak": s.peak, "cut_off": s.cut_off, "admissions": s.admissions}

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve, args=(self._stop,), name="migctl-webhook-https", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server.server_close()
        self._server.close_connections()
        self._server.pool.shutdown(wait=True, cancel_futures=True)


def serve_metrics(
    address: str, port: int, server: Callable[[], WebhookServer | None], ready: Callable[[], bool]
) -> MetricsServer:
    """/metrics, /healthz, /readyz over plain HTTP for the webhook `server()` returns (None before it starts:
    /metrics is then empty and /readyz 503)."""

    def body() -> bytes:
        s = server()
        return s.metrics.render() if s is not None else b""

    return MetricsServer(body, address, port, lambda: True, ready, name="migctl-webhook-metrics").start()
