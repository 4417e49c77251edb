"""The controller's Prometheus metrics; served with /healthz and /readyz by the shared server (adapters/telemetry.py).

Each controller has its own registry, so several controllers in one process (the tests) never collide.
/healthz: the process and its loop are alive. /readyz: the caches have synced (a follower is ready too: it is
a hot standby) and the last `controller.unready_after_failed_reconciles` reconciles did not all fail.

Memory is exported in bytes (Prometheus' base unit), although the planner counts MiB: the three memory gauges take
MiB (`.set(mib)`, as the planner reports) and export bytes. Their MiB names (`migctl_stranded_mib`, ...) were dropped
in the same release, not kept as duplicates: docs/metrics.md, "Renamed metrics", says why and how to migrate.
"""

from __future__ import annotations

from typing import Any

from migctl.adapters.telemetry import MIB, Counter, Gauge, Histogram, MetricsServer, registry, render

__all__ = ["Metrics", "MetricsServer"]


class BytesGauge:
    """A gauge set in MiB and exported in bytes: `.set(mib)`, `.labels(...).set(mib)`, `.clear()`."""

    def __init__(self, gauge: Gauge) -> None:
        self.gauge = gauge

    def set(self, mib: float) -> None:
        self.gauge.set(mib * MIB)

    def labels(self, *values: Any) -> BytesGauge:
        return BytesGauge(self.gauge.labels(*values))

    def clear(self) -> None:
        self.gauge.clear()


class Metrics:
    def __init__(self) -> None:
        r = self.registry = registry("controller")
        self.pending_demand = BytesGauge(Gauge(
            "migctl_pending_vram_demand_bytes",
            "GPU memory (bytes, instance size) pending GPU pods ask for, by the GPU model the plan serves them with "
            "(`unplaced` when no plan serves them)",
            ["model"],
            registry=r,
        ))  # fmt: skip
        self.pending_pods = Gauge("migctl_pending_gpu_pods", "Pending pods with GPU demand", registry=r)
        self.stranded = BytesGauge(Gauge(
            "migctl_stranded_bytes", "Stranded GPU memory now, bytes (internal waste of running pods + unusable)",
            registry=r,
        ))  # fmt: skip
        self.stranded_node = BytesGauge(Gauge(
            "migctl_node_unusable_bytes", "GPU memory no MIG instance can use, bytes, per node (current layouts)",
            ["node"], registry=r,
        ))  # fmt: skip
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
        self.dra_window = Histogram(
            "migctl_dra_window_seconds",
            "Static-MIG DRA changes: how long the changed GPUs' devices were fenced (first fence on to last off); "
            "the node's other GPUs keep serving throughout",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300), registry=r,
        )  # fmt: skip
        self.dra_changes = Counter(
            "migctl_dra_changes",
            "Static-MIG DRA changes that ended, by result: applied, drain-timeout, blocked, failed, timeout, released",
            ["result"],
            registry=r,
        )
        self.dra_fences = Gauge(
            "migctl_dra_fences",
            "DeviceTaintRules migctl holds per node, by purpose: placement (DynamicMIG steering) or reshape (a "
            "static-MIG change)",
            ["node", "purpose"],
            registry=r,
        )
        self.dra_bypasses = Gauge(
            "migctl_dra_fence_bypasses",
            "DynamicMIG: pending claims the last reconcile predicts take a fenced device anyway (they tolerate "
            "migctl.io/placement), per node",
            ["node"],
            registry=r,
        )
        self.dra_capped = Gauge(
            "migctl_dra_fence_cap_reached",
            "DynamicMIG: 1 where controller.dra_max_fences_per_node stopped the fences first fit needs, per node",
            ["node"],
            registry=r,
        )
        self.dra_fence_writes = Counter(
            "migctl_dra_fence_writes",
            "DeviceTaintRule writes, by op (create, delete) and result (ok, error: retried next reconcile)",
            ["op", "result"],
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
        return render(self.registry)
