"""The fallback's metrics and probes: passes by result, pods bound and left pending, capacity writes.

/healthz fails when the pass loop has not come round for `STALL_INTERVALS` resync intervals (at least
`MIN_STALL_S`): a loop stuck in an API call that never returns gets the pod restarted. /readyz is the last pass's
result, so a fallback that cannot list or bind shows as not ready instead of silently placing nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from migctl.adapters.telemetry import Counter, Gauge, Histogram, MetricsServer, registry, render

STALL_INTERVALS = 10
MIN_STALL_S = 300.0


class FallbackMetrics:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        r = self.registry = registry("fallback")
        self.passes = Counter(
            "migctl_fallback_passes", "Passes (list, capacity sync, placement, binding) by result", ["result"],
            registry=r,
        )  # fmt: skip
        for result in ("success", "failure"):
            self.passes.labels(result)
        self.pass_seconds = Histogram(
            "migctl_fallback_pass_seconds", "Time of one pass",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=r,
        )  # fmt: skip
        self.bound = Counter("migctl_fallback_pods_bound", "Pods bound to a node and GPU", registry=r)
        self.unplaced = Gauge(
            "migctl_fallback_unplaced_pods",
            "Pending pods of migctl's scheduler no GPU could hold (last pass)",
            registry=r,
        )
        self.capacity_changes = Counter(
            "migctl_fallback_capacity_changes", "Node capacity writes of the VRAM resource", registry=r
        )
        self.last_success = Gauge(
            "migctl_fallback_last_success_timestamp_seconds", "Unix time of the last pass that succeeded", registry=r
        )
        self.clock = clock
        self.beat = clock()
        self.ready = False
        self.last_error = "no pass yet"

    def passed(self, seconds: float, bound: int, unplaced: int, capacity_changes: int) -> None:
        self.passes.labels("success").inc()
        self.pass_seconds.observe(seconds)
        self.bound.inc(bound)
        self.unplaced.set(unplaced)
        self.capacity_changes.inc(capacity_changes)
        self.last_success.set(time.time())
        self.ready, self.last_error, self.beat = True, "", self.clock()

    def failed(self, seconds: float, error: str) -> None:
        self.passes.labels("failure").inc()
        self.pass_seconds.observe(seconds)
        self.ready, self.last_error, self.beat = False, error, self.clock()

    def alive(self, interval_s: float) -> bool:
        return self.clock() - self.beat < max(MIN_STALL_S, STALL_INTERVALS * interval_s)

    def render(self) -> bytes:
        return render(self.registry)


def serve_metrics(metrics: FallbackMetrics, port: int, interval_s: float, address: str = "") -> MetricsServer:
    """/metrics, /healthz (the loop comes round), /readyz (the last pass succeeded; 503 with the error)."""
    return MetricsServer(
        metrics, address, port, lambda: metrics.alive(interval_s), lambda: metrics.ready, lambda: metrics.last_error,
        "migctl-fallback-http",
    ).start()  # fmt: skip
