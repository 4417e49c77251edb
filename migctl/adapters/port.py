"""The Kubernetes calls migctl's components make, as Protocols: the seam between them and the adapter.

`ClusterApi` is what the actuator, the ConfigMap writer, the Event sink and the reconcile loop call;
`ObjectCache` is the watched view the reconcile loop plans from. The real adapter (controller/kubeapi.KubeApi,
controller/cache.ClusterCache) and the test fakes (tests/unit/fake_cluster.py) both implement them, and mypy
checks both against these definitions (the fake is in `make lint`'s mypy run), so a fake cannot drift from the
calls the code really makes. Errors are the adapter's own: a conditional write that lost raises ConflictError,
a missing object NotFoundError (controller/errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

Obj = dict[str, Any]


class ClusterApi(Protocol):
    """Reads and writes of nodes, pods, ConfigMaps and Events; every result is a plain dict (`kubectl -o json`)."""

    def read_node(self, name: str) -> Obj: ...

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        """A JSON merge patch; with metadata.resourceVersion it is conditional (ConflictError)."""
        ...

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        """Read, `mutate` to a merge patch (None: nothing to do), write only if unchanged since the read."""
        ...

    def list_nodes(self) -> list[Obj]: ...

    def list_pods_on_node(self, node: str) -> list[Obj]: ...

    def evict(self, namespace: str, name: str) -> str:
        """Through the Eviction API: `evicted`, `gone` (404) or `blocked` (429, a PodDisruptionBudget)."""
        ...

    def read_configmap(self, namespace: str, name: str) -> Obj | None: ...

    def create_configmap(self, namespace: str, body: Any) -> Obj: ...

    def replace_configmap(self, namespace: str, body: Any) -> Obj:
        """Conditional on body.metadata.resourceVersion (ConflictError if someone else wrote first)."""
        ...

    def create_event(self, namespace: str, body: Any) -> None: ...


class ObjectList(Protocol):
    def items(self) -> list[Obj]: ...


class ObjectCache(Protocol):
    """The watched objects a reconcile plans from (nodes, pods, namespaces, the mig-parted ConfigMaps)."""

    @property
    def nodes(self) -> ObjectList: ...

    def start(self) -> None: ...

    def synced(self) -> bool: ...

    def wait_synced(self, timeout: float) -> bool: ...

    def configmap(self, namespace: str, name: str) -> Obj | None: ...

    def objects(self) -> list[Obj]:
        """Nodes, pods and the watched ConfigMaps, as `kubectl get -o json` items."""
        ...

    def namespace_labels(self) -> dict[str, dict[str, str]]: ...
