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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from migctl.core.catalog import Catalog
from migctl.core.settings import PlannerSettings
from migctl.core.vram_fit import VramPlacement, fit
from migctl.fallback.advertiser import Advertiser
from migctl.fallback.capacity import fallback_view
from migctl.fallback.settings import FallbackSettings
from migctl.wire.values import gpu_placement

log = logging.getLogger(__name__)
COMPONENT = "migctl-fallback-scheduler"


@dataclass
class RunResult:
    bound: list[VramPlacement] = field(default_factory=list)
    unplaced: dict[str, str] = field(default_factory=dict)  # pod -> reason
    capacity_changes: dict[str, int | None] = field(default_factory=dict)
    resource_version: str = ""


# The client's serializer and watch helper are unannotated; reached through Any so strict mypy holds here
# without relaxing `disallow_untyped_calls` for this package.
_watch: Any = watch


def _serialize(api: client.ApiClient, items: list[Any], kind: str) -> list[dict[str, Any]]:
    sanitize: Any = api.sanitize_for_serialization
    out = []
    for item in items:
        obj: dict[str, Any] = sanitize(item)
        obj["kind"] = kind
        out.append(obj)
    return out


class FallbackScheduler:
    """Lists the cluster, keeps VRAM capacity in sync, places and binds pending migctl pods (`run_once`)."""

    def __init__(
        self,
        api: client.ApiClient,
        catalog: Catalog,
        settings: FallbackSettings | None = None,
        planner: PlannerSettings | None = None,
        advertise: bool = True,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.catalog = catalog
        self.settings = settings or FallbackSettings()
        self.planner = planner or PlannerSettings()
        self.advertiser = Advertiser(self.core, catalog, self.settings) if advertise else None
        self._reported: dict[str, str] = {}  # pod uid -> last reason reported, so events are not repeated

    def run_once(self) -> RunResult:
        nodes = self.core.list_node()
        pods = self.core.list_pod_for_all_namespaces()
        node_objs = _serialize(self.api, nodes.items, "Node")
        pod_objs = _serialize(self.api, pods.items, "Pod")
        result = RunResult(resource_version=str(pods.metadata.resource_version or "") if pods.metadata else "")
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
        annotations = gpu_placement(p.gpu, p.uuid)
        try:
            # One write: the API server sets spec.nodeName and merges these annotations into the pod together.
            binding = client.V1Binding(
                metadata=client.V1ObjectMeta(name=name, namespace=namespace, uid=uid or None, annotations=annotations),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=p.node),
            )
            # The API answers a Binding with a Status object, which the client cannot deserialize as a V1Binding
            # (kubernetes-client/python#825: "Invalid value for `target`"): take the raw response instead.
            self.core.create_namespaced_pod_binding(name, namespace, binding, _preload_content=False)
        except ApiException as e:
            if e.status in (404, 409):
                log.info(
                    "pod %s: not bound (%s %s): it changed meanwhile; next pass decides again",
                    p.pod,
                    e.status,
                    e.reason,
                )
                return False
            raise
        self._reported.pop(uid, None)
        log.info("pod %s -> node %s GPU %d (%s)", p.pod, p.node, p.gpu, p.uuid or "uuid unknown")
        return True

    def _report_unschedulable(self, namespace: str, name: str, uid: str, reason: str) -> None:
        if self._reported.get(uid) == reason:
            return
        now = datetime.now(UTC)
        event = client.CoreV1Event(
            metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", name=name, namespace=namespace, uid=uid or None
            ),
            reason="FailedScheduling",
            message=reason,
            type="Warning",
            source=client.V1EventSource(component=COMPONENT),
            reporting_component=COMPONENT,
            reporting_instance=COMPONENT,
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": reason}
        try:
            self.core.create_namespaced_event(namespace, event)
            self.core.patch_namespaced_pod_status(name, namespace, {"status": {"conditions": [condition]}})
        except ApiException as e:
            if e.status != 404:
                raise
        self._reported[uid] = reason
        log.info("pod %s/%s unschedulable: %s", namespace, name, reason)

    def serve(self, stop: threading.Event) -> None:
        """Pass after pass until `stop`: each pass waits for a pending-pod event or the resync interval."""
        selector = f"spec.schedulerName={self.settings.scheduler_name},spec.nodeName="
        while not stop.is_set():
            try:
                rv = self.run_once().resource_version
            except ApiException as e:
                log.error("fallback pass failed: %s %s; retrying", e.status, e.reason)
                stop.wait(self.settings.interval_seconds)
                continue
            w = _watch.Watch()
            try:
                for _ in w.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector=selector,
                    resource_version=rv,
                    timeout_seconds=max(1, int(self.settings.interval_seconds)),
                ):
                    break  # something changed among pending migctl pods: run a pass now
            except ApiException as e:
                if e.status != 410:  # 410 Gone: our resourceVersion is too old; the next pass lists again
                    log.warning("watch failed: %s %s", e.status, e.reason)
                    stop.wait(1)
            finally:
                w.stop()
