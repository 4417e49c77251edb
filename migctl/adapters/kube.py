"""Live, read-only access to a cluster through the official Kubernetes client (for `migctl plan`)."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from migctl.core.settings import GpuOperatorSettings
from migctl.errors import MigctlError


class ClusterReadError(MigctlError):
    """The cluster could not be read (no kubeconfig, no permission, API down)."""


def api_client(kubeconfig: str | None = None, context: str | None = None) -> client.ApiClient:
    """In-cluster credentials when running in a pod, else the kubeconfig (KUBECONFIG or ~/.kube/config)."""
    try:
        if kubeconfig is None and context is None:
            try:
                config.load_incluster_config()
                return client.ApiClient()
            except config.ConfigException:
                pass
        return config.new_client_from_config(config_file=kubeconfig, context=context)
    except (config.ConfigException, OSError) as e:
        raise ClusterReadError(f"no usable Kubernetes credentials: {e}") from e


def read_objects(api: client.ApiClient, operator: GpuOperatorSettings) -> list[dict[str, Any]]:
    """Nodes, pods and the mig-parted ConfigMap as plain dicts (the same shape `kubectl get -o json` gives)."""
    core = client.CoreV1Api(api)
    try:
        nodes = core.list_node()
        pods = core.list_pod_for_all_namespaces()
        objects: list[dict[str, Any]] = []
        for kind, lst in (("Node", nodes), ("Pod", pods)):
            for item in lst.items:
                obj = api.sanitize_for_serialization(item)
                obj["kind"] = kind
                objects.append(obj)
        try:
            cm = core.read_namespaced_config_map(operator.configmap_name, operator.configmap_namespace)
            obj = api.sanitize_for_serialization(cm)
            obj["kind"] = "ConfigMap"
            objects.append(obj)
        except ApiException as e:
            if e.status != 404:
                raise
        return objects
    except ApiException as e:
        raise ClusterReadError(f"reading the cluster failed: {e.status} {e.reason}") from e
