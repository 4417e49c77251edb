"""The HTTPS server: `POST <path>` (AdmissionReview), `GET /healthz`, `GET /readyz`. Standard library only.

Each accepted connection is wrapped with the *current* `ssl.SSLContext`, so a rotated certificate is served
to new connections at once without a restart; the TLS handshake runs in the connection's own thread, so a slow
client never holds up the accept loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

log = logging.getLogger(__name__)
MAX_BODY = 3 * 1024 * 1024  # the API server sends at most a few MiB (objects are capped at 1.5 MiB in etcd)

Handler = Callable[[Any], dict[str, Any]]  # parsed JSON body -> response body; ValueError -> 400


class _TlsServer(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self,
        address: tuple[str, int],
        context: Callable[[], ssl.SSLContext],
        admit: Handler,
        path: str,
        ready: Callable[[], bool],
    ) -> None:
        self.context_provider = context
        self.admit = admit
        self.admit_path = path
        self.ready = ready
        self.lock = threading.Lock()
        self.connections: set[socket.socket] = set()
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("connection from %s failed", client_address, exc_info=True)  # e.g. a failed TLS handshake

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, addr = self.socket.accept()
        sock.settimeout(15)
        wrapped = self.context_provider().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self.lock:
            self.connections.add(wrapped)
        return wrapped, addr

    def shutdown_request(self, request: Any) -> None:
        with self.lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """End kept-alive connections too: a stopped webhook must look stopped to the API server."""
        with self.lock:
            conns, self.connections = list(self.connections), set()
        for c in conns:
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)
            c.close()


class _Handler(BaseHTTPRequestHandler):
    server: _TlsServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        conn = self.request
        if isinstance(conn, ssl.SSLSocket):
            conn.do_handshake()
        super().setup()

    def handle(self) -> None:
        try:
            super().handle()
        except (ssl.SSLError, OSError) as e:  # handshake failures, resets: the client's problem, not ours
            log.debug("connection from %s: %s", self.client_address, e)

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.client_address[0], *args)

    def _send(self, code: int, body: dict[str, Any] | str) -> None:
        data = (json.dumps(body) if isinstance(body, dict) else body).encode()
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
    ) -> None:
        self._server = _TlsServer((address, port), context, admit, path, ready)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="migctl-webhook-https", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._server.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)
