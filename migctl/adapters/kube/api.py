"""The one wrapper over the Kubernetes client: every call migctl makes, as plain dicts (what `kubectl get -o
json` shows), raising the one error family of `errors`. Components see it through the protocols of `interface`.

Retries (`calls.ApiCalls.call`) skip what repeating cannot help: 409 Conflict (the caller re-reads and decides
again: `update_node`, the ConfigMap writer) and, for evictions, 429 (a PodDisruptionBudget said no; the actuator
retries that against its own eviction timeout).
"""

from __future__ import annotations

import base64
import functools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import watch

from migctl.adapters.kube.calls import Obj
from migctl.adapters.kube.errors import (
    API_ERRORS,
    ConflictError,
    KubeError,
    NotFoundError,
    TooManyRequestsError,
    translate,
)
from migctl.adapters.kube.resources import DraCalls
from migctl.adapters.pods import queue_gate_at
from migctl.core.model.settings import GpuOperatorSettings
from migctl.wire.names import COMPONENT, HOSTNAME, MANAGED_BY, MIGCTL, QUEUE_GATE

log = logging.getLogger(__name__)
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
_watch: Any = watch  # the client's watch helper is unannotated


class KubeApi(DraCalls):
    """Every API call migctl makes (the controller, the webhook, the fallback, the agent, `migctl plan`)."""

    # -- nodes --------------------------------------------------------------------------------------------

    def read_node(self, name: str) -> Obj:
        node = self.call(f"read node {name}", lambda: self.core.read_node(name, _request_timeout=self.timeout_s))
        return self.to_dict(node, "Node")

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        """A JSON merge patch (null deletes a key). With metadata.resourceVersion it is conditional (409)."""
        self._guard()
        node = self.call(
            f"{what} node {name}",
            lambda: self.core.patch_node(name, patch, _content_type=MERGE_PATCH, _request_timeout=self.timeout_s),
        )
        return self.to_dict(node, "Node")

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        """Read-modify-write with optimistic concurrency: `mutate(node)` returns a merge patch (None: nothing to
        do); it is applied only if the node is unchanged since the read, else re-read and decided again."""
        for _ in range(20):
            node = self.read_node(name)
            patch = mutate(node)
            if patch is None:
                return node
            meta = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = node["metadata"]["resourceVersion"]
            try:
                return self.patch_node(name, {**patch, "metadata": meta}, what)
            except ConflictError:
                log.info("node %s changed during %s; re-reading", name, what)
        raise ConflictError(f"{what} node {name}", 409, "still conflicting after 20 re-reads")

    def list_nodes(self) -> list[Obj]:
        nodes = self.call("list nodes", lambda: self.core.list_node(_request_timeout=self.timeout_s))
        return [self.to_dict(n, "Node") for n in nodes.items]

    def list_pods_on_node(self, node: str) -> list[Obj]:
        pods = self.call(
            f"list pods on {node}",
            lambda: self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _request_timeout=self.timeout_s
            ),
        )
        return [self.to_dict(p, "Pod") for p in pods.items]

    def list_pods(self, namespace: str | None = None, field_selector: str = "", cached: bool = False) -> list[Obj]:
        """Pods in a namespace (None: all); `cached` serves them from the API server's watch cache
        (resourceVersion 0): no quorum read of etcd per call."""
        return self.list_pods_at(namespace, field_selector, cached)[0]

    def list_pods_at(
        self, namespace: str | None = None, field_selector: str = "", cached: bool = False
    ) -> tuple[list[Obj], str]:
        """`list_pods`, and the list's resourceVersion (where a watch for what changes next starts)."""
        kwargs: dict[str, Any] = {"_request_timeout": self.timeout_s}
        if field_selector:
            kwargs["field_selector"] = field_selector
        if cached:
            kwargs["resource_version"] = "0"
        where = f"in {namespace}" if namespace else "in all namespaces"
        if namespace:
            pods = self.call(f"list pods {where}", lambda: self.core.list_namespaced_pod(namespace, **kwargs))
        else:
            pods = self.call(f"list pods {where}", lambda: self.core.list_pod_for_all_namespaces(**kwargs))
        version = str(pods.metadata.resource_version or "") if pods.metadata else ""
        return [self.to_dict(p, "Pod") for p in pods.items], version

    def read_pod(self, namespace: str, name: str) -> Obj:
        pod = self.call(
            f"read pod {namespace}/{name}",
            lambda: self.core.read_namespaced_pod(name, namespace, _request_timeout=self.timeout_s),
        )
        return self.to_dict(pod, "Pod")

    def wait_for_pods(self, field_selector: str, resource_version: str, timeout_s: float) -> None:
        """Return at the first change to the selected pods after `resource_version`, or after `timeout_s`; a
        KubeError with status 410 when that version is too old to watch from (list again)."""
        w = _watch.Watch()
        try:
            for _ in w.stream(
                self.core.list_pod_for_all_namespaces,
                field_selector=field_selector,
                resource_version=resource_version,
                timeout_seconds=max(1, int(timeout_s)),
            ):
                break
        except API_ERRORS as e:
            raise translate(e, f"watch pods ({field_selector})") from e
        finally:
            w.stop()

    def bind_pod(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None:
        """Bind a pending pod to `node`; the API server merges the Binding's annotations into the pod in the
        same write that sets spec.nodeName."""
        self._guard()
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "annotations": dict(annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        if uid:
            body["metadata"]["uid"] = uid
        # The API answers a Binding with a Status object, which the client cannot deserialize as a V1Binding
        # (kubernetes-client/python#825: "Invalid value for `target`"): take the raw response instead.
        self.call(
            f"bind pod {namespace}/{name} to {node}",
            lambda: self.core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self.timeout_s
            ),
        )

    def lift_gate(self, namespace: str, name: str, hostname: str | None = None) -> str:
        """Remove migctl's scheduling gate from a pod, and with `hostname` pin it in the same write
        (`spec.nodeSelector[kubernetes.io/hostname]`, which a gated pod may gain). One RFC 6902 patch whose `test`
        op checks the gate's index and name, so a concurrent change of the gates fails the patch (422) instead of
        removing another gate: then the pod is read again and the patch rebuilt. `lifted`, or `gone` (404) or
        `ungated` (no migctl gate any more): neither is an error."""
        self._guard()
        for _ in range(3):
            try:
                pod = self.read_pod(namespace, name)
            except NotFoundError:
                return "gone"
            ops = gate_lift_ops(pod, hostname)
            if ops is None:
                return "ungated"
            try:
                patch = functools.partial(
                    self.core.patch_namespaced_pod,
                    name, namespace, ops, _content_type=JSON_PATCH, _request_timeout=self.timeout_s,
                )  # fmt: skip
                self.call(f"lift gate of pod {namespace}/{name}", patch)
            except NotFoundError:
                return "gone"
            except KubeError as e:
                if e.status != 422:
                    raise
                log.info("pod %s/%s: gates changed during the lift (%s); re-reading", namespace, name, e.message)
                continue
            return "lifted"
        raise ConflictError(f"lift gate of pod {namespace}/{name}", 409, "its gates kept changing")

    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None:
        self._guard()
        self.call(
            f"patch status of pod {namespace}/{name}",
            lambda: self.core.patch_namespaced_pod_status(name, namespace, patch, _request_timeout=self.timeout_s),
        )

    def patch_node_status(self, name: str, ops: list[Obj]) -> None:
        """A JSON patch (RFC 6902) on the node's status subresource."""
        self._guard()
        self.call(
            f"patch status of node {name}",
            lambda: self.core.patch_node_status(name, ops, _content_type=JSON_PATCH, _request_timeout=self.timeout_s),
        )

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        lst = self.call("list namespaces", lambda: self.core.list_namespace(_request_timeout=self.timeout_s))
        return {ns.metadata.name: dict(ns.metadata.labels or {}) for ns in lst.items}

    def cluster_objects(
        self, operator: GpuOperatorSettings, *, active_pods_only: bool = False, configmap_optional: bool = False
    ) -> list[Obj]:
        """Nodes, pods (`active_pods_only`: not Succeeded or Failed), the GPU Operator's mig-parted ConfigMap and
        the DRA objects (`dra_objects`: none where the cluster serves none), as `kubectl get -o json` items: what
        the snapshot adapter reads. An absent ConfigMap is left out (the layouts then come from the node agent's
        annotation), and so is an unreadable one if `configmap_optional` (no permission: the webhook's view does
        without it)."""
        nodes = self.list_nodes()
        pods = self.list_pods(field_selector="status.phase!=Succeeded,status.phase!=Failed" if active_pods_only else "")
        try:
            cm = self.read_configmap(operator.configmap_namespace, operator.configmap_name)
        except KubeError:
            if not configmap_optional:
                raise
            cm = None
        return [*nodes, *pods, *([cm] if cm is not None else []), *self.dra_objects()]

    # -- evictions ----------------------------------------------------------------------------------------

    def evict(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API (PDBs apply). Returns `evicted`, `gone` (404) or `blocked` (429)."""
        self._guard()
        body: Any = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self.call(
                f"evict pod {namespace}/{name}",
                lambda: self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _request_timeout=self.timeout_s
                ),
                retry_throttle=False,
            )
        except NotFoundError:
            return "gone"
        except TooManyRequestsError:
            return "blocked"
        return "evicted"

    # -- ConfigMaps ---------------------------------------------------------------------------------------

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            cm = self.call(
                f"read configmap {namespace}/{name}",
                lambda: self.core.read_namespaced_config_map(name, namespace, _request_timeout=self.timeout_s),
            )
        except NotFoundError:
            return None
        return self.to_dict(cm, "ConfigMap")

    def list_configmaps(self, label_selector: str) -> list[Obj]:
        """ConfigMaps of every namespace with these labels (the CLI finding the controller's config)."""
        found = self.call(
            f"list configmaps -l {label_selector} in all namespaces",
            lambda: self.core.list_config_map_for_all_namespaces(
                label_selector=label_selector, _request_timeout=self.timeout_s
            ),
        )
        return [self.to_dict(cm, "ConfigMap") for cm in found.items]

    def create_configmap(self, namespace: str, body: Any) -> Obj:
        self._guard()
        name = body["metadata"]["name"]
        cm = self.call(
            f"create configmap {namespace}/{name}",
            lambda: self.core.create_namespaced_config_map(namespace, body, _request_timeout=self.timeout_s),
        )
        return self.to_dict(cm, "ConfigMap")

    def replace_configmap(self, namespace: str, body: Any) -> Obj:
        """Conditional on body.metadata.resourceVersion: 409 if someone else wrote first."""
        self._guard()
        name = body["metadata"]["name"]
        cm = self.call(
            f"replace configmap {namespace}/{name}",
            lambda: self.core.replace_namespaced_config_map(name, namespace, body, _request_timeout=self.timeout_s),
        )
        return self.to_dict(cm, "ConfigMap")

    # -- Events -------------------------------------------------------------------------------------------

    def create_event(self, namespace: str, body: Any) -> None:
        self.call(
            "create event",
            lambda: self.core.create_namespaced_event(namespace, body, _request_timeout=self.timeout_s),
        )

    # -- the webhook's certificate Secret and MutatingWebhookConfiguration ---------------------------------

    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, bytes], str] | None:
        """(data decoded, resourceVersion), or None when absent."""
        try:
            s = self.call(
                f"read secret {namespace}/{name}",
                lambda: self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout_s),
            )
        except NotFoundError:
            return None
        data = {k: base64.b64decode(v) for k, v in (s.data or {}).items()}
        return data, str(s.metadata.resource_version)

    def write_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str | None) -> None:
        """Create (resource_version None) or replace at that version; ConflictError when someone else wrote first."""
        self._guard()
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY: MIGCTL, COMPONENT: "webhook"}},
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        if resource_version is None:
            self.call(
                f"create secret {namespace}/{name}",
                lambda: self.core.create_namespaced_secret(namespace, body, _request_timeout=self.timeout_s),
            )
        else:
            body["metadata"]["resourceVersion"] = resource_version
            self.call(
                f"replace secret {namespace}/{name}",
                lambda: self.core.replace_namespaced_secret(name, namespace, body, _request_timeout=self.timeout_s),
            )

    def read_webhook_configuration(self, name: str) -> Obj | None:
        try:
            obj = self.call(
                f"read mutatingwebhookconfiguration {name}",
                lambda: self.admission.read_mutating_webhook_configuration(name, _request_timeout=self.timeout_s),
            )
        except NotFoundError:
            return None
        return self.to_dict(obj)

    def replace_webhook_configuration(self, name: str, body: Obj) -> None:
        self._guard()
        self.call(
            f"replace mutatingwebhookconfiguration {name}",
            lambda: self.admission.replace_mutating_webhook_configuration(name, body, _request_timeout=self.timeout_s),
        )

    # -- Leases (no retries: the elector has its own cadence) ---------------------------------------------

    def read_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            lease = self.coordination.read_namespaced_lease(name, namespace, _request_timeout=self.timeout_s)
        except API_ERRORS as e:
            err = translate(e, f"read lease {namespace}/{name}")
            if isinstance(err, NotFoundError):
                return None
            raise err from e
        return self.to_dict(lease, "Lease")

    def write_lease(self, namespace: str, body: Any, create: bool) -> Obj:
        name = body["metadata"]["name"]
        try:
            if create:
                lease = self.coordination.create_namespaced_lease(namespace, body, _request_timeout=self.timeout_s)
            else:
                lease = self.coordination.replace_namespaced_lease(
                    name, namespace, body, _request_timeout=self.timeout_s
                )
        except API_ERRORS as e:
            raise translate(e, f"write lease {namespace}/{name}") from e
        return self.to_dict(lease, "Lease")

    # -- the in-place agent on a DRA node (agent.dra; RBAC and policies: the chart's dra.enabled) ------------

    def list_node_resource_slices(self, node: str, driver: str) -> list[Obj]:
        selector = f"spec.nodeName={node},spec.driver={driver}"
        return self.raw_items(
            f"list resourceslices of {driver} on {node}",
            lambda: self.resource.list_resource_slice(
                field_selector=selector, _preload_content=False, _request_timeout=self.timeout_s
            ),
            "ResourceSlice",
        )

    def list_resource_claims(self) -> list[Obj]:
        return self.raw_items(
            "list resourceclaims in all namespaces",
            lambda: self.resource.list_resource_claim_for_all_namespaces(
                _preload_content=False, _request_timeout=self.timeout_s
            ),
            "ResourceClaim",
        )

    def list_pods_selected(self, namespace: str, label_selector: str, field_selector: str) -> list[Obj]:
        pods = self.call(
            f"list pods in {namespace} -l {label_selector} ({field_selector})",
            lambda: self.core.list_namespaced_pod(
                namespace, label_selector=label_selector, field_selector=field_selector, _request_timeout=self.timeout_s
            ),
        )
        return [self.to_dict(p, "Pod") for p in pods.items]

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly that pod (a uid precondition: a namesake made since is left alone); False when gone."""
        self._guard()
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self.call(
                f"delete pod {namespace}/{name}",
                lambda: self.core.delete_namespaced_pod(name, namespace, body=body, _request_timeout=self.timeout_s),
            )
        except NotFoundError:
            return False
        return True


def gate_lift_ops(pod: Obj, hostname: str | None) -> list[Obj] | None:
    """The JSON patch `lift_gate` sends for `pod` as read (None: it carries no migctl gate)."""
    spec = pod.get("spec") or {}
    index = queue_gate_at(spec)
    if index is None:
        return None
    at = f"/spec/schedulingGates/{index}"
    ops: list[Obj] = [{"op": "test", "path": f"{at}/name", "value": QUEUE_GATE}, {"op": "remove", "path": at}]
    selector = spec.get("nodeSelector") or {}
    if hostname and selector.get(HOSTNAME) != hostname:
        if selector:
            ops.append({"op": "add", "path": "/spec/nodeSelector/" + HOSTNAME.replace("/", "~1"), "value": hostname})
        else:
            ops.append({"op": "add", "path": "/spec/nodeSelector", "value": {HOSTNAME: hostname}})
    return ops
