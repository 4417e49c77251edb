"""What each component needs of the Kubernetes adapter, as protocols: the seam between them and the adapter.

`KubeApi` and `ClusterCache` provide them all; the test fakes (tests/unit/fake_cluster.py: `FakeCluster`,
`FakeCache`) provide the controller's, and mypy checks both against these definitions (the fakes are in
`make lint`'s mypy run), so a fake cannot drift from the calls the code really makes. Objects are plain dicts
(`kubectl -o json`); failures raise the `errors` family (a conditional write that lost: ConflictError, a
missing object: NotFoundError). The webhook's needs are the small protocols beside their users: `CertApi`,
`ViewApi`, `EventApi`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

Obj = dict[str, Any]


class EventApi(Protocol):
    def create_event(self, namespace: str, body: Any) -> None: ...


class AgentApi(Protocol):
    """The node agent: merge patches on its own Node, and (on in-place nodes) reading it for the target."""

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj: ...
    def read_node(self, name: str) -> Obj: ...


class ControllerApi(EventApi, AgentApi, Protocol):
    """The controller's writes and fresh reads: the actuator, the ConfigMap writer, the Event sink and the
    reconcile loop (its view of the cluster is the `ObjectCache`). `patch_node` with
    metadata.resourceVersion is conditional (ConflictError)."""

    def read_node(self, name: str) -> Obj: ...

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        """Read, `mutate` to a merge patch (None: nothing to do), write only if unchanged since the read."""
        ...

    def list_nodes(self) -> list[Obj]: ...
    def list_pods_on_node(self, node: str) -> list[Obj]: ...

    def evict(self, namespace: str, name: str) -> str:
        """Through the Eviction API: `evicted`, `gone` (404) or `blocked` (429, a PodDisruptionBudget)."""
        ...

    def lift_gate(self, namespace: str, name: str, hostname: str | None = None) -> str:
        """Remove migctl's queue gate (pinning the pod to `hostname`): `lifted`, `gone` or `ungated`."""
        ...

    def read_configmap(self, namespace: str, name: str) -> Obj | None: ...
    def create_configmap(self, namespace: str, body: Any) -> Obj: ...

    def replace_configmap(self, namespace: str, body: Any) -> Obj:
        """Conditional on body.metadata.resourceVersion (ConflictError if someone else wrote first)."""
        ...

    # DRA (resource.k8s.io/v1): the static executor's fresh reads, and migctl's DeviceTaintRules
    def list_node_resource_slices(self, node: str, driver: str) -> list[Obj]: ...
    def list_resource_claims(self) -> list[Obj]: ...
    def list_device_taint_rules(self, label_selector: str = "") -> list[Obj]: ...

    def create_device_taint_rule(self, body: Obj) -> str:
        """`created`, or `exists` (a rule of that name is there already)."""
        ...

    def delete_device_taint_rule(self, name: str, uid: str = "") -> bool:
        """False when it was gone already; with `uid`, only that object (ConflictError if it was replaced)."""
        ...

    def read_lease(self, namespace: str, name: str) -> Obj | None:
        """A dry-run controller reads the leader's Lease before lifting fences (controller/fences.py)."""
        ...


class LeaderApi(Protocol):
    """Leader election: the Lease."""

    def read_lease(self, namespace: str, name: str) -> Obj | None: ...
    def write_lease(self, namespace: str, body: Any, create: bool) -> Obj: ...


class ObjectList(Protocol):
    def items(self) -> list[Obj]: ...


class ObjectCache(Protocol):
    """The watched objects a reconcile plans from (nodes, pods, namespaces, the mig-parted ConfigMaps, DRA's)."""

    @property
    def nodes(self) -> ObjectList: ...

    def start(self) -> None: ...
    def synced(self) -> bool: ...
    def wait_synced(self, timeout: float) -> bool: ...
    def configmap(self, namespace: str, name: str) -> Obj | None: ...

    def objects(self) -> list[Obj]:
        """Nodes, pods, the watched ConfigMaps and the DRA objects (ResourceSlices, ResourceClaims and their
        templates, DeviceClasses, DeviceTaintRules, GPUCluster, ClusterPolicy), as `kubectl get -o json` items."""
        ...

    def namespace_labels(self) -> dict[str, dict[str, str]]: ...


class FallbackApi(EventApi, Protocol):
    """The fallback scheduler: list, advertise VRAM on node status, bind, report, wait for the next change."""

    def list_nodes(self) -> list[Obj]: ...
    def list_pods_at(
        self, namespace: str | None = None, field_selector: str = "", cached: bool = False
    ) -> tuple[list[Obj], str]: ...
    def patch_node_status(self, name: str, ops: list[Obj]) -> None: ...
    def bind_pod(self, namespace: str, name: str, uid: str, node: str, annotations: Mapping[str, str]) -> None: ...
    def patch_pod_status(self, namespace: str, name: str, patch: Obj) -> None: ...
    def wait_for_pods(self, field_selector: str, resource_version: str, timeout_s: float) -> None: ...


class DraAgentApi(AgentApi, Protocol):
    """The in-place agent on a DRA node (agent.dra): its node's ResourceSlices and the claims (which instances are
    allocated), and its node's kubelet-plugin pods (deleting one re-advertises). A separate protocol, not more
    methods on `AgentApi`: the controller's `ControllerApi` extends that one, and needs none of these."""

    def list_node_resource_slices(self, node: str, driver: str) -> list[Obj]: ...
    def list_resource_claims(self) -> list[Obj]: ...
    def list_pods_selected(self, namespace: str, label_selector: str, field_selector: str) -> list[Obj]: ...

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """Delete exactly that pod (a uid precondition); False when it was gone already."""
        ...
