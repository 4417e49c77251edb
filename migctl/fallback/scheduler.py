"""migctl's scheduler for pods that opt in with `schedulerName: migctl`: one GPU per pod, best fit, then bind.

The chosen GPU (index, UUID, and a ready-to-use `visible-devices` value) travels in the Binding's own
annotations: the API server copies a Binding's annotations onto the pod in the same write that sets
`spec.nodeName`, so a bound pod always carries its GPU (the kubelet resolves the downward-API env vars when it
starts the container, after binding) and the fallback needs no right to patch pods, only `pods/binding` create. A pod no
single GPU can hold stays pending with a Warning Event (and PodScheduled=False) saying why, like the
kube-scheduler's FailedScheduling.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from migctl.adapters.events import event_body
from migctl.adapters.kube import ApiClient, KubeApi
from migctl.adapters.kube.errors import ConflictError, KubeError, NotFoundError
from migctl.adapters.kube.interface import FallbackApi
from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.fit import VramPlacement, fit
from migctl.fallback.advertiser import Advertiser
from migctl.fallback.capacity import fallback_view
from migctl.fallback.metrics import FallbackMetrics
from migctl.wire.values import gpu_placement

log = logging.getLogger(__name__)
COMPONENT = "migctl-fallback-scheduler"


@dataclass
class RunResult:
    bound: list[VramPlacement] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> reason
    capacity_changes: dict[str, int | None] = field(default_factory=dict)
    resource_version: str = ""


class FallbackScheduler:
    """Lists the cluster, keeps VRAM capacity in sync, places and binds pending migctl pods (`run_once`)."""

    def __init__(
        self,
        api: ApiClient,
        catalog: Catalog,
        settings: FallbackSettings | None = None,
        planner: PlannerSettings | None = None,
        advertise: bool = True,
    ) -> None:
        # One try per call: a failed pass is retried whole, on the resync cadence.
        self.kube: FallbackApi = KubeApi(api, attempts=1)
        self.catalog = catalog
        self.settings = settings or FallbackSettings()
        self.planner = planner or PlannerSettings()
        self.advertiser = Advertiser(self.kube, catalog, self.settings) if advertise else None
        self._reported: dict[str, str] = {}  # pod uid -> last reason reported, so events are not repeated
        self.metrics = FallbackMetrics()

    def run_once(self) -> RunResult:
        node_objs = self.kube.list_nodes()
        pod_objs, version = self.kube.list_pods_at()
        result = RunResult(resource_version=version)
        if self.advertiser is not None:
            result.capacity_changes = self.advertiser.sync(node_objs)
        view = fallback_view([*node_objs, *pod_objs], self.catalog, self.settings, self.planner)
        for w in view.warnings:
            log.debug("snapshot: %s", w)
        placed = fit(view.nodes, view.pods, self.settings.unit_bytes)
        by_key = {vp.pod.key: vp for vp in view.pods}
        for p in placed.placements:
            if self._bind(p, by_key[p.pod].uid):
                result.bound.append(p)
        for u in placed.unplaced:
            vp = by_key[u.pod]
            result.unplaced[u.pod] = u.reason
            self._report_unschedulable(vp.pod.namespace, vp.pod.name, vp.uid, u.reason)
        return result

    def _bind(self, p: VramPlacement, uid: str) -> bool:
        namespace, name = p.pod.split("/", 1)
        try:
            # One write: the API server sets spec.nodeName and merges these annotations into the pod together.
            self.kube.bind_pod(namespace, name, uid, p.node, gpu_placement(p.gpu, p.uuid))
        except (NotFoundError, ConflictError) as e:
            log.info(
                "pod %s: not bound (%s %s): it changed meanwhile; next pass decides again", p.pod, e.status, e.reason
            )
            return False
        self._reported.pop(uid, None)
        log.info("pod %s -> node %s GPU %d (%s)", p.pod, p.node, p.gpu, p.uuid or "uuid unknown")
        return True

    def _report_unschedulable(self, namespace: str, name: str, uid: str, reason: str) -> None:
        if self._reported.get(uid) == reason:
            return
        involved = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": name,
            "namespace": namespace,
            **({"uid": uid} if uid else {}),
        }
        event = event_body(involved, "FailedScheduling", reason, COMPONENT, COMPONENT, warning=True)
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        try:
            self.kube.create_event(namespace, event)
            self.kube.patch_pod_status(namespace, name, {"status": {"conditions": [condition]}})
        except NotFoundError:
            pass
        self._reported[uid] = reason
        log.info("pod %s/%s unschedulable: %s", namespace, name, reason)

    def serve(self, stop: threading.Event) -> None:
        """Pass after pass until `stop`: each pass waits for a pending-pod event or the resync interval."""
        selector = f"spec.schedulerName={self.settings.scheduler_name},spec.nodeName="
        while not stop.is_set():
            started = time.monotonic()
            try:
                result = self.run_once()
            except KubeError as e:
                log.error("fallback pass failed: %s; retrying", e)
                self.metrics.failed(time.monotonic() - started, str(e))
                stop.wait(self.settings.interval_seconds)
                continue
            self.metrics.passed(
                time.monotonic() - started, len(result.bound), len(result.unplaced), len(result.capacity_changes)
            )
            rv = result.resource_version
            try:  # something changed among pending migctl pods: run a pass now
                self.kube.wait_for_pods(selector, rv, self.settings.interval_seconds)
            except KubeError as e:
                if e.status != 410:  # 410 Gone: our resourceVersion is too old; the next pass lists again
                    log.warning("watch failed: %s", e)
                    stop.wait(1)
