"""The few API calls the webhook makes, as plain dicts; the untyped client is reached through `Any`.

Errors become `NotFound`, `Conflict` or `KubeCallError`, so callers need not know the client's exception type.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from migctl.core.settings import GpuOperatorSettings

T = TypeVar("T")
Obj = dict[str, Any]


class KubeCallError(Exception):
    """An API call failed (message: what, status, reason)."""


class NotFound(KubeCallError):  # noqa: N818 - reads as a condition at the call sites
    pass


class Conflict(KubeCallError):  # noqa: N818
    pass


class Forbidden(KubeCallError):  # noqa: N818 - RBAC (403) or an admission policy refused the call
    pass


def _call(what: str, fn: Callable[[], T]) -> T:
    try:
        return fn()
    except ApiException as e:
        status = getattr(e, "status", None)
        text = f"{what}: {status} {getattr(e, 'reason', '')}".strip()
        if status == 404:
            raise NotFound(text) from e
        if status == 409:
            raise Conflict(text) from e
        if status == 403:
            raise Forbidden(text) from e
        raise KubeCallError(text) from e
    except OSError as e:  # connection refused, timeouts (urllib3 errors are OSErrors)
        raise KubeCallError(f"{what}: {e}") from e


class WebhookKube:
    """Reads the cluster for the webhook's view; writes its Secret, its configuration's caBundle and Events."""

    def __init__(self, api: client.ApiClient, operator: GpuOperatorSettings | None = None, timeout_s: float = 30.0):
        self.api: Any = api
        self.core: Any = client.CoreV1Api(api)
        self.admission: Any = client.AdmissionregistrationV1Api(api)
        self.operator = operator or GpuOperatorSettings()
        self.timeout_s = timeout_s

    def _dict(self, obj: Any) -> Obj:
        out: Obj = self.api.sanitize_for_serialization(obj)
        return out

    # -- the view -----------------------------------------------------------------------------------------

    def cluster_objects(self) -> list[Obj]:
        """Nodes, pods (not finished) and the GPU Operator's mig-parted ConfigMap, as `migctl plan` reads them.

        The ConfigMap only helps to read layouts from `nvidia.com/mig.config` labels; without it (absent, or no
        permission) the layouts come from the node agent's annotation, as in the planner.
        """
        t = self.timeout_s
        nodes = _call("list nodes", lambda: self.core.list_node(_request_timeout=t))
        pods = _call(
            "list pods",
            lambda: self.core.list_pod_for_all_namespaces(
                field_selector="status.phase!=Succeeded,status.phase!=Failed", _request_timeout=t
            ),
        )
        objects: list[Obj] = []
        for kind, lst in (("Node", nodes), ("Pod", pods)):
            for item in lst.items:
                obj = self._dict(item)
                obj["kind"] = kind
                objects.append(obj)
        op = self.operator
        try:
            cm = _call(
                "read the mig-parted configmap",
                lambda: self.core.read_namespaced_config_map(
                    op.configmap_name, op.configmap_namespace, _request_timeout=t
                ),
            )
            obj = self._dict(cm)
            obj["kind"] = "ConfigMap"
            objects.append(obj)
        except KubeCallError:
            pass
        return objects

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        lst = _call("list namespaces", lambda: self.core.list_namespace(_request_timeout=self.timeout_s))
        return {ns.metadata.name: dict(ns.metadata.labels or {}) for ns in lst.items}

    # -- pods and events ----------------------------------------------------------------------------------

    def read_pod(self, namespace: str, name: str) -> Obj:
        return self._dict(
            _call(
                f"read pod {namespace}/{name}",
                lambda: self.core.read_namespaced_pod(name, namespace, _request_timeout=self.timeout_s),
            )
        )

    def list_pods(self, namespace: str) -> list[Obj]:
        """Served from the API server's watch cache (resourceVersion 0): no quorum read of etcd per call."""
        lst = _call(
            f"list pods in {namespace}",
            lambda: self.core.list_namespaced_pod(namespace, resource_version="0", _request_timeout=self.timeout_s),
        )
        return [self._dict(p) for p in lst.items]

    def create_event(self, namespace: str, body: Obj) -> None:
        _call(
            f"create event in {namespace}",
            lambda: self.core.create_namespaced_event(namespace, body, _request_timeout=self.timeout_s),
        )

    # -- the certificate Secret ---------------------------------------------------------------------------

    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, bytes], str] | None:
        """(data decoded, resourceVersion), or None when absent."""
        try:
            s = _call(
                f"read secret {namespace}/{name}",
                lambda: self.core.read_namespaced_secret(name, namespace, _request_timeout=self.timeout_s),
            )
        except NotFound:
            return None
        data = {k: base64.b64decode(v) for k, v in (s.data or {}).items()}
        return data, str(s.metadata.resource_version)

    def write_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str | None) -> None:
        """Create (resource_version None) or replace at that version; Conflict when someone else wrote first."""
        body: Obj = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app.kubernetes.io/managed-by": "migctl", "app.kubernetes.io/component": "webhook"},
            },
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        if resource_version is None:
            _call(
                f"create secret {namespace}/{name}",
                lambda: self.core.create_namespaced_secret(namespace, body, _request_timeout=self.timeout_s),
            )
        else:
            body["metadata"]["resourceVersion"] = resource_version
            _call(
                f"replace secret {namespace}/{name}",
                lambda: self.core.replace_namespaced_secret(name, namespace, body, _request_timeout=self.timeout_s),
            )

    # -- the MutatingWebhookConfiguration -----------------------------------------------------------------

    def read_webhook_configuration(self, name: str) -> Obj | None:
        try:
            obj = _call(
                f"read mutatingwebhookconfiguration {name}",
                lambda: self.admission.read_mutating_webhook_configuration(name, _request_timeout=self.timeout_s),
            )
        except NotFound:
            return None
        return self._dict(obj)

    def replace_webhook_configuration(self, name: str, body: Obj) -> None:
        _call(
            f"replace mutatingwebhookconfiguration {name}",
            lambda: self.admission.replace_mutating_webhook_configuration(name, body, _request_timeout=self.timeout_s),
        )
