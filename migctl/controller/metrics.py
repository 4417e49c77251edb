"""Prometheus metrics and the /metrics, /healthz, /readyz endpoints (one small threaded HTTP server).

Each controller has its own registry, so several controllers in one process (the tests) never collide.
/healthz: the process and its loop are alive. /readyz: the caches have synced (a follower is ready too: it is
a hot standby) and the last `controller.unready_after_failed_reconciles` reconciles did not all fail.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest


class Metrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.pending_demand = Gauge(
            "migctl_pending_vram_demand_mib",
            "VRAM (MiB, instance size) pending GPU pods ask for, by the GPU model the plan serves them with "
            "(`unplaced` when no plan serves them)",
            ["model"],
            registry=r,
        )
        self.pending_pods = Gauge("migctl_pending_gpu_pods", "Pending pods with GPU demand", registry=r)
        self.stranded = Gauge(
            "migctl_stranded_mib", "Stranded GPU memory now (internal waste of running pods + unusable)", registry=r
        )
        self.stranded_node = Gauge(
            "migctl_node_unusable_mib", "Memory no MIG instance can use, per node (current layouts)", ["node"],
            registry=r,
        )  # fmt: skip
        self.plans = Counter("migctl_plans", "Plans computed", registry=r)
        self.plan_seconds = Histogram(
            "migctl_plan_seconds", "Time to build the snapshot and plan",
            buckets=(0.005, 0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10), registry=r,
        )  # fmt: skip
        self.started = Counter("migctl_reconfigurations_started", "Node reconfigurations started", registry=r)
        self.succeeded = Counter(
            "migctl_reconfigurations_succeeded", "Node reconfigurations that succeeded", registry=r
        )
        self.failed = Counter(
            "migctl_reconfigurations_failed", "Node reconfigurations rolled back, by cause", ["cause"], registry=r
        )
        self.duration = Histogram(
            "migctl_reconfiguration_seconds", "Duration of node reconfigurations (start to untaint)",
            buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1200, 3600), registry=r,
        )  # fmt: skip
        self.in_place_window = Histogram(
            "migctl_in_place_window_seconds",
            "In-place changes: how long the node carried migctl's NoSchedule taint (taint on to taint off)",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r,
        )  # fmt: skip
        self.in_place_changes = Counter(
            "migctl_in_place_changes",
            "In-place changes that ended, by result: applied, blocked (an instance in use), failed, timeout",
            ["result"],
            registry=r,
        )
        self.gate_lifts = Counter(
            "migctl_queue_gate_lifts",
            "Queue gates (migctl.io/queue) the controller lifted, by reason: claimed (before the plan), free (after "
            "it), started, overdue, "
            "released (paused or dry run), unplanned (a pod migctl does not plan)",
            ["reason"],
            registry=r,
        )
        self.evictions = Counter("migctl_evictions", "Pods evicted through the Eviction API", registry=r)
        self.leader = Gauge("migctl_leader", "1 while this replica holds the Lease and acts", registry=r)
        self.in_flight = Gauge("migctl_nodes_reconfiguring", "Nodes being reconfigured now", registry=r)
        self.paused = Gauge("migctl_paused", "1 while the pause switch is on", registry=r)
        self.rejected = Gauge(
            "migctl_rejected_objects",
            "Objects the last snapshot could not use, by kind: pods rejected or unreadable, nodes skipped or frozen "
            "for bad labels, status or layout, ConfigMaps unreadable (each also gets a warning Event)",
            ["kind"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "migctl_reconcile_errors", "Reconciles that failed with an error (the next one retries)", registry=r
        )
        self.failed_in_a_row = Gauge(
            "migctl_reconciles_failed_in_a_row", "Reconciles that failed since the last one that succeeded", registry=r
        )
        self.last_plan = Gauge(
            "migctl_last_successful_plan_timestamp_seconds", "Unix time of the last plan computed", registry=r
        )
        self.budget_exhausted = Counter(
            "migctl_plan_budget_exhausted",
            "Plans that hit planner.work_budget and returned the best plan found so far",
            registry=r,
        )
        self.held = Gauge(
            "migctl_guard_refusals", "Planned node changes refused by a guard rail (last plan)", registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)


class MetricsServer:
    """Serves /metrics, /healthz and /readyz on a background thread."""

    def __init__(
        self, metrics: Metrics, address: str, port: int, healthy: Callable[[], bool], ready: Callable[[], bool]
    ) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.startswith("/metrics"):
                    self._send(200, metrics.render(), CONTENT_TYPE_LATEST)
                elif self.path.startswith("/healthz"):
                    ok = healthy()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"unhealthy\n")
                elif self.path.startswith("/readyz"):
                    ok = ready()
                    self._send(200 if ok else 503, b"ok\n" if ok else b"not ready\n")
                else:
                    self._send(404, b"not found\n")

            def _send(self, code: int, body: bytes, ctype: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, port), Handler)
        self.server.daemon_threads = True
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, name="metrics-http", daemon=True)
        _ = outer

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
