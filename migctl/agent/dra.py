"""The in-place agent on a node whose GPUs NVIDIA's DRA driver serves (`agent.dra.enabled`; docs/install.md "On a DRA
cluster").

Three things differ from a device-plugin node, and this module holds them:
* **Which node is a DRA node.** One with a ResourceSlice of `gpu.nvidia.com`, or a kubelet-plugin pod (the
  configured namespace and labels) bound to it: the pod counts too, because after the plugin has been down for the
  kubelet's wiping delay (30 s) the node has no slices at all. A node whose slices show counters (a `sharedCounters`
  set, or a device consuming one: the slice reader's mode) runs DynamicMIG: the driver destroys MIG partitions it
  did not create when its plugin starts, so the agent refuses there and changes nothing. So it does where a slice
  cannot be read: it might be the one showing counters.
* **What is in use.** The kubelet's PodResources `devices` list only device-plugin devices; an allocated claim holds
  its device from the moment the scheduler writes the allocation, before any kubelet sees it. So every allocated
  ResourceClaim result on this node's pool is an instance in use, found through the slice's `uuid` attribute of
  that device (a static MIG device's MIG UUID). A result this agent cannot map to an instance, or claims it cannot
  read, stop the change before it starts (`ClaimsUnreadableError`, a `PodResourcesError`: the engine fails closed).
* **Re-advertising.** The plugin does not rescan NVML; its DaemonSet's next pod does. The agent deletes its own
  node's plugin pod, and only that: the list is narrowed by namespace, labels and `spec.nodeName`, each pod is
  checked again against all three, and the delete carries the pod's uid. The chart's ValidatingAdmissionPolicy
  refuses the agent any other pod delete on the API server's side.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migctl.adapters.dra.claims import read_claims
from migctl.adapters.dra.slices import SliceReading, read_slices
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import DraAgentApi
from migctl.adapters.podresources import Holder, PodResourcesError
from migctl.agent.apply import Kubelet
from migctl.config.agent import AgentDraSettings
from migctl.core.dra.devices import Mode
from migctl.core.hardware.gpu_model import Catalog
from migctl.errors import MigctlError
from migctl.wire.names import NVIDIA_DRA_DRIVER

log = logging.getLogger(__name__)
Obj = dict[str, Any]


class DraError(MigctlError):
    """The agent cannot re-advertise on this DRA node (no plugin pod of its own node)."""


class ClaimsUnreadableError(PodResourcesError):
    """What the node's claims hold could not be told: nothing may be assumed free (caught where the kubelet's own
    failures are, so nothing changes)."""


@dataclass(frozen=True, slots=True)
class ClaimHolder(Holder):
    """An allocated ResourceClaim result: `pod` is the pod it is reserved for (or `-`), `container` the claim's
    name, `resource` the device."""

    def __str__(self) -> str:
        return f"ResourceClaim {self.namespace}/{self.container} ({self.resource}) of pod {self.pod}"


@dataclass(frozen=True)
class DraView:
    """The node's slices of NVIDIA's driver (as read, and as `read_slices` reads them) and its own kubelet-plugin
    pods, as read now."""

    slices: tuple[Obj, ...] = ()
    pods: tuple[Obj, ...] = ()
    reading: SliceReading = field(default_factory=lambda: SliceReading(()))

    @property
    def served(self) -> bool:
        """The node's GPUs are NVIDIA's DRA driver's."""
        return bool(self.slices or self.pods)

    @property
    def dynamic(self) -> bool:
        """The slices show counters: DynamicMIG (the slice reader's mode, so the agent and the planner agree)."""
        return any(p.mode is Mode.DYNAMIC for p in self.reading.pools)

    @property
    def unreadable(self) -> str:
        """Why the slices cannot be trusted ('' when they can): a slice the reader dropped or could not square
        with the catalog may hide counters (DynamicMIG) or the device a claim holds, so the agent acts on none."""
        return "; ".join(str(p) for p in self.reading.problems)


DYNAMIC_REFUSAL = (
    "NVIDIA's DRA driver runs DynamicMIG on this node (its ResourceSlices show counter sets): it destroys MIG "
    "partitions it did not create, so migctl does not change instances here (it only fences placements); nothing "
    "was changed. Remove migctl.io/actuation=in-place from the node"
)


class DraNode:
    """NVIDIA's DRA driver as the in-place agent of one node sees it."""

    def __init__(self, kube: DraAgentApi, node: str, settings: AgentDraSettings, catalog: Catalog) -> None:
        self.kube, self.node, self.settings, self.catalog = kube, node, settings, catalog
        self.selector = ",".join(f"{k}={v}" for k, v in sorted(settings.plugin_labels.items()))

    def view(self) -> DraView:
        mine = self._slices()
        return DraView(mine, tuple(self.plugin_pods()), read_slices(mine, self.catalog))

    def _slices(self) -> tuple[Obj, ...]:
        """This node's slices of NVIDIA's driver: listed by node and driver, and each checked again."""
        slices = self.kube.list_node_resource_slices(self.node, NVIDIA_DRA_DRIVER)
        return tuple(
            s
            for s in slices
            if (s.get("spec") or {}).get("nodeName") == self.node
            and (s.get("spec") or {}).get("driver") == NVIDIA_DRA_DRIVER
        )

    def plugin_pods(self) -> list[Obj]:
        """This node's kubelet-plugin pods: listed by namespace, labels and node, and each checked again."""
        ns = self.settings.plugin_namespace
        pods = self.kube.list_pods_selected(ns, self.selector, f"spec.nodeName={self.node}")
        return [p for p in pods if self._mine(p)]

    def _mine(self, pod: Mapping[str, Any]) -> bool:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        return (
            meta.get("namespace") == self.settings.plugin_namespace
            and (pod.get("spec") or {}).get("nodeName") == self.node
            and all(labels.get(k) == v for k, v in self.settings.plugin_labels.items())
        )

    def restart_plugin(self) -> list[str]:
        """Delete this node's plugin pod(s); the DaemonSet's new pod lists the instances that exist now. Returns
        the pods deleted (a pod already terminating is left to finish: its successor starts after it is gone)."""
        pods = self.plugin_pods()
        if not pods:
            raise DraError(
                f"no pod labelled {self.selector} in namespace {self.settings.plugin_namespace} runs on node "
                f"{self.node}, so NVIDIA's DRA kubelet plugin cannot be restarted to list the new instances "
                "(agent.dra.plugin_namespace, agent.dra.plugin_labels)"
            )
        deleted = []
        for pod in pods:
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                continue
            if self.kube.delete_pod(meta["namespace"], meta["name"], meta["uid"]):
                deleted.append(f"{meta['namespace']}/{meta['name']}")
        log.info("node %s: deleted DRA kubelet-plugin pod(s) %s (the plugin re-enumerates)", self.node, deleted)
        return deleted

    def holders(self) -> dict[str, Holder]:
        """MIG UUID -> the claim allocated to it, for every allocated result on this node's pool."""
        try:
            raw = self.kube.list_resource_claims()
            reading = read_claims(raw)
            mine = [
                a for a in reading.allocations if (a.device.driver, a.device.pool) == (NVIDIA_DRA_DRIVER, self.node)
            ]
            bad = {p.name for p in reading.problems}
            unreadable = [c for c in raw if _key(c) in bad and _mentions_pool(c, self.node)]
            if unreadable:
                raise ClaimsUnreadableError(
                    f"ResourceClaim {_key(unreadable[0])} may hold a device of node {self.node} but cannot be read "
                    f"({'; '.join(str(p) for p in reading.problems if p.name == _key(unreadable[0]))})"
                )
            if not mine:
                return {}
            pool = read_slices(self._slices(), self.catalog).pool(self.node)
        except KubeError as e:
            raise ClaimsUnreadableError(f"the claims on node {self.node} could not be read: {e}") from e
        reserved = {_key(c): _reserved_for(c) for c in raw}
        out: dict[str, Holder] = {}
        for a in mine:
            device = pool.by_name.get(a.device.device) if pool is not None else None
            if device is not None and device.kind == "gpu":
                continue  # a whole GPU: MIG is off there, and the engine never changes MIG mode
            if device is None or not device.mig_uuid:
                raise ClaimsUnreadableError(
                    f"ResourceClaim {a.claim} holds {a.device}, which this node's ResourceSlices do not map to a MIG "
                    "UUID (no such device now, e.g. while the plugin republishes, or no uuid attribute): which "
                    "instance it holds is unknown"
                )
            ns, _, name = a.claim.partition("/")
            out.setdefault(device.mig_uuid, ClaimHolder(ns, reserved.get(a.claim) or "-", name, a.device.device))
        return out


class DraAwareKubelet:
    """The engine's view of what is in use: the kubelet's PodResources, and on a DRA node (`active`) the claims."""

    def __init__(self, kubelet: Kubelet, dra: DraNode) -> None:
        self.kubelet, self.dra = kubelet, dra
        self.active = False  # set per answer by the loop: the node's GPUs are the DRA driver's

    def holders(self) -> Mapping[str, Holder]:
        found = dict(self.kubelet.holders())
        if self.active:
            for uuid, holder in self.dra.holders().items():
                found.setdefault(uuid, holder)
        return found


def _key(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _reserved_for(claim: Mapping[str, Any]) -> str:
    consumers: Sequence[Any] = (claim.get("status") or {}).get("reservedFor") or []
    pods = [c.get("name", "") for c in consumers if isinstance(c, Mapping) and c.get("resource") == "pods"]
    return ", ".join(p for p in pods if p)


def _mentions_pool(claim: Mapping[str, Any], node: str) -> bool:
    """A claim migctl's reader refused: does its allocation (read leniently) name this node's pool?"""
    try:
        results = claim["status"]["allocation"]["devices"]["results"]
        return any(isinstance(r, Mapping) and r.get("pool") == node for r in results)
    except (KeyError, TypeError):
        return bool((claim.get("status") or {}).get("allocation"))  # allocated, shape unknown: assume it might
