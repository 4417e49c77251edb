"""What NVIDIA's static-MIG DRA kubelet plugin would publish for the agent's fake NVML, and an in-memory
`DraAgentApi` (one Node, its slices, the cluster's claims, pods in several namespaces and nodes).

`static_slices` is tests/nvidia_slices.py's static shape with the identities the real plugin reads from NVML: each
MIG device's `uuid` is the fake NVML's MIG UUID of the instance at that (GPU, profile id, placement start), and
`parentUUID` the GPU's UUID. A GPU instance without a compute instance is not listed (NVML lists MIG devices).
"""

from __future__ import annotations

import copy
import json
import uuid
from typing import Any

from migctl.adapters.kube.errors import ConflictError, KubeError
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import GpuModel
from migctl.wire.names import DEVICE_PLUGIN_CONFIG, NVIDIA_DRA_DRIVER
from tests.nvidia_slices import node_slices
from tests.unit.fake_nvml_mig import FakeMigNvml

Obj = dict[str, Any]
PLUGIN_NS = "dra-driver-nvidia-gpu"
PLUGIN_LABELS = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}


def nvml_layouts(nvml: FakeMigNvml, model: GpuModel) -> list[list[Placement] | None]:
    names = {p.profile_id: p.name for p in model.profiles if p.profile_id is not None}
    return [
        [Placement(names[pid], s, z) for pid, s, z, u in nvml.layout(i) if u] if g.mig else None
        for i, g in enumerate(nvml.gpus)
    ]


def static_slices(node: str, nvml: FakeMigNvml, model: GpuModel) -> list[Obj]:
    """The one static-MIG slice the plugin publishes when it starts on this hardware."""
    slices = node_slices(node, model, len(nvml.gpus), mode="static", static_layouts=nvml_layouts(nvml, model))
    for s in slices:
        for d in s["spec"].get("devices") or []:
            attrs = d["attributes"]
            minor = int(d["name"].split("-")[1])
            attrs["uuid"] = {"string": nvml.gpus[minor].uuid}
            if attrs.get("type", {}).get("string") != "mig":
                continue
            attrs["parentUUID"] = {"string": nvml.gpus[minor].uuid}
            pid, start = (int(x) for x in d["name"].rsplit("-", 2)[1:])
            (mig,) = [u for p, st, _, u in nvml.layout(minor) if (p, st) == (pid, start) and u]
            attrs["uuid"] = {"string": mig}
    return slices


def pod(name: str, node: str, namespace: str = PLUGIN_NS, labels: dict[str, str] | None = None) -> Obj:
    labels = dict(PLUGIN_LABELS) if labels is None else labels
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()), "labels": labels},
        "spec": {"nodeName": node},
    }


def claim(namespace: str, name: str, node: str, device: str, pod_name: str = "trainer") -> Obj:
    """An allocated claim: one result on `node`'s pool, reserved for `pod_name`."""
    result = {"request": "gpu", "driver": NVIDIA_DRA_DRIVER, "pool": node, "device": device}
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": "u1"}],
        },
    }


class DraApi:
    """DraAgentApi in memory. The list calls honour their selectors unless `lying` (a server that answers
    everything: the agent must still check each pod and slice). Deleting a plugin pod runs `on_delete` (the
    DaemonSet and the new plugin: a test republishes the slices there). `calls` records every call in order:
    "read <method>", "patch", "delete <ns>/<name> uid=<uid>"."""

    def __init__(self, node: str) -> None:
        self.name = node
        self.node: Obj = {"metadata": {"name": node, "labels": {DEVICE_PLUGIN_CONFIG: "migctl-a"}, "annotations": {}}}
        self.slices: list[Obj] = []
        self.claims: list[Obj] = []
        self.pods: list[Obj] = []
        self.patches: list[Obj] = []
        self.calls: list[str] = []
        self.lying = False
        self.fail: dict[str, KubeError] = {}  # method name -> the error it raises
        self.on_delete: Any = None

    def _enter(self, method: str) -> None:
        self.calls.append(f"read {method}")
        if method in self.fail:
            raise self.fail[method]

    @property
    def deletes(self) -> list[str]:
        return [c for c in self.calls if c.startswith("delete ")]

    @property
    def dra_reads(self) -> list[str]:
        return [c for c in self.calls if c.startswith("read ")]

    def read_node(self, name: str) -> Obj:
        assert name == self.name, "the agent reads only its own node"
        copied: Obj = json.loads(json.dumps(self.node))
        return copied

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        assert name == self.name, "the agent writes only its own node"
        self.patches.append(patch)
        self.calls.append("patch")
        for key in ("labels", "annotations"):
            self.node["metadata"][key].update(patch.get("metadata", {}).get(key, {}))
        return self.read_node(name)

    def list_node_resource_slices(self, node: str, driver: str) -> list[Obj]:
        self._enter("list_node_resource_slices")
        return [
            copy.deepcopy(s)
            for s in self.slices
            if self.lying or (s["spec"]["nodeName"] == node and s["spec"]["driver"] == driver)
        ]

    def list_resource_claims(self) -> list[Obj]:
        self._enter("list_resource_claims")
        return copy.deepcopy(self.claims)

    def list_pods_selected(self, namespace: str, label_selector: str, field_selector: str) -> list[Obj]:
        self._enter("list_pods_selected")
        want = dict(kv.split("=", 1) for kv in label_selector.split(","))
        node = field_selector.removeprefix("spec.nodeName=")
        return [
            copy.deepcopy(p)
            for p in self.pods
            if self.lying
            or (
                p["metadata"]["namespace"] == namespace
                and p["spec"]["nodeName"] == node
                and all(p["metadata"]["labels"].get(k) == v for k, v in want.items())
            )
        ]

    def delete_pod(self, namespace: str, name: str, uid: str) -> bool:
        """As the API server: False when gone, 409 when the uid precondition names another pod."""
        if "delete_pod" in self.fail:
            raise self.fail["delete_pod"]
        found = [p for p in self.pods if (p["metadata"]["namespace"], p["metadata"]["name"]) == (namespace, name)]
        if not found:
            return False
        if found[0]["metadata"]["uid"] != uid:
            raise ConflictError(f"delete pod {namespace}/{name}", 409, "Conflict", "Precondition failed: UID")
        self.pods.remove(found[0])
        self.calls.append(f"delete {namespace}/{name} uid={uid}")
        if self.on_delete is not None:
            self.on_delete(found[0])
        return True
