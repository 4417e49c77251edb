"""Credentials: in-cluster when running in a pod, else the kubeconfig; and `migctl plan`'s one read of a cluster."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.client import ApiClient

from migctl.adapters.kube.api import KubeApi
from migctl.adapters.kube.errors import CredentialsError, KubeError
from migctl.core.model.settings import GpuOperatorSettings

__all__ = ["ApiClient", "api_client", "read_objects"]  # ApiClient: what components hand on, never call


def api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
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
        raise CredentialsError(str(e)) from e


def read_objects(api: ApiClient, operator: GpuOperatorSettings) -> list[dict[str, Any]]:
    """Nodes, pods and the mig-parted ConfigMap as plain dicts (the same shape `kubectl get -o json` gives);
    one attempt each, a failure raised as a KubeError saying that reading the cluster failed."""
    try:
        return KubeApi(api, attempts=1).cluster_objects(operator)
    except KubeError as e:
        raise KubeError(f"reading the cluster failed: {e.what}", e.status, e.reason, e.message) from e
