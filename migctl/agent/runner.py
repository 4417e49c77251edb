"""The agent's loop: read NVML on an apscheduler interval, publish changes, report readiness.

A failing NVML (no driver, no GPU, a lost GPU) must be visible, not hidden behind restarts: the agent logs one
clear line per change of error, turns not-ready (`/readyz` answers 503 with the reason), and retries with
exponential backoff, never exiting. Readiness means the last NVML read and the last publish both succeeded.

The same port serves /metrics (`AgentMetrics`): readiness, reads by result, the GPUs seen, patches sent, and on
in-place nodes each answer the in-place loop gave, so a failing agent shows on a dashboard, not only in its log.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from socketserver import TCPServer
from typing import Protocol

from apscheduler.schedulers.base import BaseScheduler
from apscheduler.schedulers.blocking import BlockingScheduler

from migctl.adapters.telemetry import Counter, Gauge, Histogram, MetricsServer, registry, render
from migctl.config.agent import AgentSettings
from migctl.core.model.inventory import Inventory
from migctl.errors import MigctlError
from migctl.wire.inplace import Status

log = logging.getLogger(__name__)
JOB_ID = "migctl-agent-read"


class Reader(Protocol):
    def read(self) -> Inventory: ...


class Sink(Protocol):
    def publish(self, inventory: Inventory) -> bool: ...


class AgentMetrics:
    """The agent's own metrics (each agent pod is one node: the `node` label says which)."""

    def __init__(self, node: str) -> None:
        r = self.registry = registry("agent")
        self.ready = Gauge(
            "migctl_agent_ready", "1 while the last NVML read and publish succeeded", ["node"], registry=r
        )
        self.reads = Counter(
            "migctl_agent_reads", "NVML reads (and publishes) by result: success, failure", ["node", "result"],
            registry=r,
        )  # fmt: skip
        self.read_seconds = Histogram(
            "migctl_agent_read_seconds", "Time of one NVML read and publish", ["node"],
            buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30), registry=r,
        )  # fmt: skip
        self.failing = Gauge(
            "migctl_agent_failures_in_a_row", "Failed reads since the last one that succeeded", ["node"], registry=r
        )
        self.last_success = Gauge(
            "migctl_agent_last_success_timestamp_seconds", "Unix time of the last successful read", ["node"],
            registry=r,
        )  # fmt: skip
        self.gpus = Gauge("migctl_agent_gpus", "GPUs in the last inventory read", ["node"], registry=r)
        self.patches = Counter("migctl_agent_publishes", "Inventory patches sent (changes only)", ["node"], registry=r)
        self.in_place = Counter(
            "migctl_agent_in_place_answers",
            "In-place agent: answers to the controller's targets, by state (applied, blocked, failed); error: the "
            "in-place step raised",
            ["node", "state"],
            registry=r,
        )
        self.node = node
        self.ready.labels(node).set(0)
        self.failing.labels(node).set(0)
        for result in ("success", "failure"):
            self.reads.labels(node, result)

    def render(self) -> bytes:
        return render(self.registry)


class AgentRunner:
    """One read-and-publish per `tick()`; `run()` schedules ticks until stopped."""

    def __init__(
        self,
        reader: Reader,
        sink: Sink | None,
        settings: AgentSettings | None = None,
        on_inventory: Callable[[Inventory], None] | None = None,
        before_read: Callable[[], object] | None = None,
        node: str | None = None,
    ) -> None:
        """`node`: the `node` label of the metrics (default: the env var `settings.node_name_env` names)."""
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
        self.node = node if node is not None else os.environ.get(self.settings.node_name_env, "")
        self.metrics = AgentMetrics(self.node)

    def tick(self) -> bool:
        """Read and publish once; never raises (the loop must survive). True on success."""
        if self.before_read is not None:
            self._in_place_step(self.before_read)
        started = time.monotonic()
        try:
            inventory = self.reader.read()
            if self.on_inventory is not None:
                self.on_inventory(inventory)
            if self.sink is not None and self.sink.publish(inventory):
                self.metrics.patches.labels(self.node).inc()
        except MigctlError as e:
            self._failed(str(e))
            return False
        except Exception as e:  # a bug or an NVML surprise: stay alive and say so, with the traceback
            log.exception("unexpected error while reading or publishing the GPU inventory")
            self._failed(f"unexpected {type(e).__name__}: {e}")
            return False
        finally:
            self.metrics.read_seconds.labels(self.node).observe(time.monotonic() - started)
        if not self.ready and self.failures:
            log.info("recovered after %d failed attempts; ready", self.failures)
        self.ready, self.last_error, self.failures = True, "", 0
        m, node = self.metrics, self.node
        m.reads.labels(node, "success").inc()
        m.ready.labels(node).set(1)
        m.failing.labels(node).set(0)
        m.last_success.labels(node).set(time.time())
        m.gpus.labels(node).set(len(inventory.gpus))
        self._reschedule(self.settings.interval_seconds)
        return True

    def _in_place_step(self, step: Callable[[], object]) -> None:
        """The in-place loop's tick: its failures are its own (logged, counted), the inventory still goes."""
        try:
            answer = step()
        except MigctlError as e:
            log.error("in-place change: %s", e)
            answer = "error"
        except Exception:
            log.exception("unexpected error in the in-place change")
            answer = "error"
        if isinstance(answer, Status):
            self.metrics.in_place.labels(self.node, answer.state).inc()
        elif answer == "error":
            self.metrics.in_place.labels(self.node, "error").inc()

    def _failed(self, message: str) -> None:
        if message != self.last_error:
            log.error("not ready: %s", message)  # once per distinct cause, not once per retry
        self.ready, self.last_error = False, message
        self.failures += 1
        m = self.metrics
        m.reads.labels(self.node, "failure").inc()
        m.ready.labels(self.node).set(0)
        m.failing.labels(self.node).set(self.failures)
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


def serve_health(runner: AgentRunner, port: int) -> TCPServer:
    """`/metrics`, `/healthz` (the process answers) and `/readyz` (last read and publish succeeded; 503 with the
    reason), in a daemon thread. Returns the HTTP server (`shutdown()` stops it)."""
    server = MetricsServer(
        runner.metrics, "", port, lambda: True, lambda: runner.ready, lambda: runner.last_error, "migctl-agent-http"
    )
    return server.start().server
