"""The agent's loop: read NVML on an apscheduler interval, publish changes, report readiness.

A failing NVML (no driver, no GPU, a lost GPU) must be visible, not hidden behind restarts: the agent logs one
clear line per change of error, turns not-ready (`/readyz` answers 503 with the reason), and retries with
exponential backoff, never exiting. Readiness means the last NVML read and the last publish both succeeded.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Protocol

from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from migctl.config.agent import AgentSettings
from migctl.core.model.inventory import Inventory
from migctl.errors import MigctlError

log = logging.getLogger(__name__)
JOB_ID = "migctl-agent-read"


class Reader(Protocol):
    def read(self) -> Inventory: ...


class Sink(Protocol):
    def publish(self, inventory: Inventory) -> bool: ...


class AgentRunner:
    """One read-and-publish per `tick()`; `run()` schedules ticks until stopped."""

    def __init__(
        self,
        reader: Reader,
        sink: Sink | None,
        settings: AgentSettings | None = None,
        on_inventory: Callable[[Inventory], None] | None = None,
        before_read: Callable[[], object] | None = None,
    ) -> None:
        self.reader = reader
        self.sink = sink
        self.settings = settings or AgentSettings()
        self.on_inventory = on_inventory
        self.before_read = before_read  # the in-place loop's tick: its failures are its own, the inventory still goes
        self.ready = False
        self.last_error = "no NVML read yet"
        self.failures = 0  # consecutive
        self.delay = self.settings.interval_seconds
        self.scheduler: BaseScheduler | None = None

    def tick(self) -> bool:
        """Read and publish once; never raises (the loop must survive). True on success."""
        if self.before_read is not None:
            try:
                self.before_read()
            except MigctlError as e:
                log.error("in-place change: %s", e)
            except Exception:
                log.exception("unexpected error in the in-place change")
        try:
            inventory = self.reader.read()
            if self.on_inventory is not None:
                self.on_inventory(inventory)
            if self.sink is not None:
                self.sink.publish(inventory)
        except MigctlError as e:
            self._failed(str(e))
            return False
        except Exception as e:  # a bug or an NVML surprise: stay alive and say so, with the traceback
            log.exception("unexpected error while reading or publishing the GPU inventory")
            self._failed(f"unexpected {type(e).__name__}: {e}")
            return False
        if not self.ready and self.failures:
            log.info("recovered after %d failed attempts; ready", self.failures)
        self.ready, self.last_error, self.failures = True, "", 0
        self._reschedule(self.settings.interval_seconds)
        return True

    def _failed(self, message: str) -> None:
        if message != self.last_error:
            log.error("not ready: %s", message)  # once per distinct cause, not once per retry
        self.ready, self.last_error = False, message
        self.failures += 1
        s = self.settings
        delay = min(s.backoff_max_seconds, s.backoff_initial_seconds * 2 ** (self.failures - 1))
        log.warning("retrying in %.0fs (attempt %d)", delay, self.failures + 1)
        self._reschedule(delay)

    def _reschedule(self, seconds: float) -> None:
        if seconds == self.delay:
            return
        self.delay = seconds
        if self.scheduler is not None and self.scheduler.get_job(JOB_ID) is not None:
            self.scheduler.reschedule_job(JOB_ID, trigger="interval", seconds=seconds)

    def run(self, scheduler: BaseScheduler | None = None) -> None:
        """Tick now, then on the interval (or the backoff delay) until the scheduler is shut down."""
        self.scheduler = scheduler or BlockingScheduler()
        self.tick()
        self.scheduler.add_job(
            self.tick, "interval", seconds=self.delay, id=JOB_ID, max_instances=1, coalesce=True, replace_existing=True
        )
        self.scheduler.start()


def serve_health(runner: AgentRunner, port: int) -> ThreadingHTTPServer:
    """`/healthz` (the process answers) and `/readyz` (last read and publish succeeded), in a daemon thread."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/healthz":
                code, body = 200, "ok"
            elif self.path == "/readyz":
                code, body = (200, "ok") if runner.ready else (503, runner.last_error)
            else:
                code, body = 404, "not found"
            data = (body + "\n").encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # probes every few seconds would drown the agent's own log

    server = ThreadingHTTPServer(("", port), Handler)
    threading.Thread(target=server.serve_forever, name="migctl-agent-health", daemon=True).start()
    return server
