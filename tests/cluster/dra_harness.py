"""A DRA cluster for tests: kwok nodes with the fake NVIDIA plugin, NVIDIA's DeviceClasses, claims, pods, fences.

Everything runs against the session's real control plane (kube-apiserver, kube-scheduler, the resourceclaim
controller of kube-controller-manager, kwok); only the plugin is simulated (`fake_dra_driver.py`, at its API
objects). `DraCluster` owns what it creates and removes it in `close()`: the `dra_cluster` fixture
(tests/cluster/conftest.py) does that after each test. Pods are pinned to this test's nodes by a group label, as
in the rest of the cluster tier.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client

from migctl.adapters.dra.claims import read_claims
from migctl.adapters.dra.deviceclasses import read_device_classes
from migctl.adapters.dra.slices import read_slices
from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec
from migctl.core.dra.devices import NodePool
from migctl.core.hardware.gpu_model import GpuModel
from migctl.core.model.gpu_config import GpuConfig
from tests.nvidia_slices import DRIVER, FENCE_KEY, device_classes, taint_rule

from .controlplane import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE, ControlPlane
from .fake_dra_driver import FakeNvidiaPlugin, Layouts, raw
from .gpunodes import BASE_CAPACITY, catalog, create_gpu_node
from .waiting import wait_for

Json = dict[str, Any]
GROUP_LABEL = "migctl.test/group"
IMAGE = "registry.invalid/cuda:fake"
NO_DEVICES = "cannot allocate all claims"  # the DRA plugin's Filter refusal (dynamicresources.go)
SETTLE_S = 0.5  # informer propagation to the scheduler of an object it cannot report having seen (taint rules)


@dataclass(frozen=True)
class Placed:
    """Where a pod went: its node and the devices of its claim (`pool/device`, in result order)."""

    node: str
    claim: str
    devices: tuple[str, ...]


def mig_selector(profile: str) -> str:
    return f"device.attributes['{DRIVER}'].profile == '{profile}'"


def request(
    profile: str | None = None,
    *,
    device_class: str = "mig.nvidia.com",
    count: int = 1,
    cel: Sequence[str] = (),
    tolerations: Sequence[Json] = (),
    name: str = "gpu",
) -> Json:
    """One `exactly` device request: `profile` adds the profile selector, `cel` more selectors."""
    exprs = ([mig_selector(profile)] if profile else []) + list(cel)
    exactly: Json = {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": count}
    if exprs:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in exprs]
    if tolerations:
        exactly["tolerations"] = list(tolerations)
    return {"name": name, "exactly": exactly}


class DraCluster:
    """Nodes, plugins, DeviceClasses, claims, pods and DeviceTaintRules of one test."""

    def __init__(self, cp: ControlPlane, namespace: str, node_names: list[str]) -> None:
        self.cp, self.namespace, self.node_names = cp, namespace, node_names
        self.api = cp.api_client()
        self.core, self.resource = client.CoreV1Api(self.api), client.ResourceV1Api(self.api)
        self.group = {GROUP_LABEL: namespace}
        self.plugins: dict[str, FakeNvidiaPlugin] = {}
        self._classes: list[str] = []
        self._rules: list[str] = []

    # -- setup -------------------------------------------------------------------------------------------

    def install_classes(self, *models: GpuModel | str) -> None:
        """NVIDIA's chart classes, plus per-profile `extendedResourceName` classes for these models."""
        bodies = {c["metadata"]["name"]: c for c in device_classes()}
        for m in models:
            model = catalog().model(m) if isinstance(m, str) else m
            bodies |= {c["metadata"]["name"]: c for c in device_classes(model)}
        for name, body in bodies.items():
            if name in self._classes:
                continue
            with contextlib.suppress(client.ApiException):  # left by a test that died before close()
                self.resource.delete_device_class(name)
            self._await_gone(lambda n=name: self.resource.read_device_class(n))
            self.resource.create_device_class(body)
            self._classes.append(name)

    def dra_node(
        self,
        suffix: str,
        model_id: str = "h100-80gb",
        gpus: int = 1,
        *,
        mode: Literal["static", "dynamic"] = "dynamic",
        layouts: Layouts | None = None,
        labels: Mapping[str, str] | None = None,
        **plugin_args: Any,
    ) -> FakeNvidiaPlugin:
        """A kwok node with no GPU extended resources and the fake plugin publishing its slices.

        `layouts` (static mode) is held by reference: change the list, then `plugin.restart()` to republish."""
        name = f"{self.namespace}-{suffix}"
        self.core.create_node(
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, "type": "kwok", "nvidia.com/gpu.present": "true"}
                    | self.group
                    | dict(labels or {}),
                    "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
                },
                "status": {"capacity": dict(BASE_CAPACITY), "allocatable": dict(BASE_CAPACITY)},
            }
        )
        self.node_names.append(name)
        state = layouts if layouts is not None else []
        plugin = FakeNvidiaPlugin(
            self.cp, name, catalog().model(model_id), gpus, mode=mode, layouts=lambda: state, **plugin_args
        )
        plugin.start()
        self.plugins[name] = plugin
        return plugin

    def device_plugin_node(self, suffix: str, model_id: str, gpus: Sequence[GpuConfig]) -> str:
        """A kwok node as NVIDIA's device plugin leaves it: `nvidia.com/mig-*` in capacity, no slices."""
        name = f"{self.namespace}-{suffix}"
        create_gpu_node(self.core, name, model_id, gpus, labels=self.group)
        self.node_names.append(name)
        return name

    def fence(self, name: str, node: str, device: str, *, key: str = FENCE_KEY, settle: bool = True) -> str:
        """A DeviceTaintRule (NoSchedule) on one device; then waits for the scheduler's informer to have it
        (`settle=False` to write several first)."""
        self.resource.create_device_taint_rule(taint_rule(name, node, device, key=key))
        self._rules.append(name)
        if settle:
            time.sleep(SETTLE_S)
        return name

    # -- workloads ---------------------------------------------------------------------------------------

    def template(self, name: str, *requests: Json, constraints: Sequence[Json] = ()) -> str:
        devices: Json = {"requests": list(requests)}
        if constraints:
            devices["constraints"] = list(constraints)
        self.resource.create_namespaced_resource_claim_template(
            self.namespace, {"metadata": {"name": name}, "spec": {"spec": {"devices": devices}}}
        )
        return name

    def claim_pod(self, name: str, template: str, *, node_selector: Mapping[str, str] | None = None) -> str:
        """A pod whose claim kube-controller-manager makes from `template`."""
        spec = {
            "nodeSelector": dict(node_selector or self.group),
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
        }
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name}, "spec": spec})
        return name

    def resource_pod(
        self, name: str, limits: Mapping[str, int], *, node_selector: Mapping[str, str] | None = None
    ) -> str:
        """A pod asking for extended resources the legacy way (`nvidia.com/mig-1g.10gb: 1`)."""
        spec = {
            "nodeSelector": dict(node_selector or self.group),
            "containers": [
                {"name": "main", "image": IMAGE, "resources": {"limits": {k: str(v) for k, v in limits.items()}}}
            ],
        }
        self.core.create_namespaced_pod(self.namespace, {"metadata": {"name": name}, "spec": spec})
        return name

    def pod(self, name: str) -> Json:
        return raw(self.core.read_namespaced_pod, name, self.namespace)

    def claim(self, name: str) -> Json:
        return raw(self.resource.read_namespaced_resource_claim, name, self.namespace)

    def claim_of(self, pod: Json) -> str | None:
        """The ResourceClaim a pod uses: the one made from its template, or the scheduler's extended-resource one."""
        status = pod.get("status", {})
        for s in status.get("resourceClaimStatuses") or []:
            if s.get("resourceClaimName"):
                return str(s["resourceClaimName"])
        ext = status.get("extendedResourceClaimStatus") or {}
        return str(ext["resourceClaimName"]) if ext.get("resourceClaimName") else None

    def placed(self, pod_name: str) -> Placed | None:
        """The pod's node and allocated devices once it is bound, Running and its claim allocated; else None."""
        pod = self.pod(pod_name)
        node = pod["spec"].get("nodeName")
        if not node or pod.get("status", {}).get("phase") != "Running":
            return None
        claim_name = self.claim_of(pod)
        if claim_name is None:
            return Placed(node, "", ())
        results = ((self.claim(claim_name).get("status") or {}).get("allocation") or {}).get("devices", {})
        devices = tuple(f"{r['pool']}/{r['device']}" for r in results.get("results") or [])
        return Placed(node, claim_name, devices) if devices else None

    def unschedulable(self, pod_name: str) -> str | None:
        """The scheduler's Unschedulable message for a pending pod, None while it has none."""
        for c in self.pod(pod_name).get("status", {}).get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False" and c.get("reason") == "Unschedulable":
                return str(c.get("message", "")) or "Unschedulable"
        return None

    def wait_placed(self, pod_name: str, timeout: float = 60.0) -> Placed:
        return wait_for(f"pod {pod_name} Running with its claim allocated", lambda: self.placed(pod_name), timeout)

    def wait_unschedulable(self, pod_name: str, timeout: float = 30.0) -> str:
        return wait_for(f"pod {pod_name} Unschedulable", lambda: self.unschedulable(pod_name), timeout)

    def templates(self, requests: Sequence[Json], prefix: str = "p") -> list[str]:
        """One template per request, named `<prefix><i>`, in order."""
        return [self.template(f"{prefix}{i}", r) for i, r in enumerate(requests)]

    def place_templates(self, templates: Sequence[str], node: str | None = None) -> list[Placed | None]:
        """One pod per template (pinned to `node` if given), each placed (or refused by the allocator) before the
        next is made, so the scheduler sees them in this order, as migctl's predictor assumes."""
        out: list[Placed | None] = []
        pin = {"kubernetes.io/hostname": node} if node else None
        for tmpl in templates:
            pod = self.claim_pod(f"{tmpl}-{node or 'pod'}"[:63], tmpl, node_selector=pin)

            def settled(pod: str = pod) -> Placed | Literal["pending"] | None:
                # not "waiting for resource claim" (kcm not done yet): only the allocator's own refusal counts
                placed = self.placed(pod)
                return placed or ("pending" if NO_DEVICES in (self.unschedulable(pod) or "") else None)

            got = wait_for(f"pod {pod} placed or refused", settled)
            out.append(got if isinstance(got, Placed) else None)
        return out

    def place_in_order(self, profiles: Sequence[str | None], prefix: str = "p") -> list[Placed | None]:
        """`place_templates` for one single-device MIG request per profile (None: any MIG device)."""
        return self.place_templates(self.templates([request(p) for p in profiles], prefix))

    # -- migctl's view of the same objects ----------------------------------------------------------------

    def pool(self, node: str) -> NodePool:
        """The node's pool as migctl's adapter reads the slices on the server."""
        slices = raw(self.resource.list_resource_slice, field_selector=f"spec.nodeName={node}")["items"]
        reading = read_slices(slices, catalog())
        assert not reading.problems, reading.problems
        pool = reading.pool(node)
        assert pool is not None, f"no pool for {node}"
        return pool

    def classes(self) -> Mapping[str, DeviceClassSpec]:
        reading = read_device_classes(raw(self.resource.list_device_class)["items"])
        assert not reading.problems, reading.problems
        return reading.classes

    def template_specs(self, names: Sequence[str]) -> list[ClaimSpec]:
        """The templates as migctl reads them back from the server, in `names` order."""
        items = raw(self.resource.list_namespaced_resource_claim_template, self.namespace)["items"]
        reading = read_claims((), items)
        assert not reading.problems and reading.templates is not None, reading.problems
        return [reading.templates[f"{self.namespace}/{n}"] for n in names]

    # -- teardown ----------------------------------------------------------------------------------------

    def close(self) -> None:
        """Pods first (kcm then deletes their claims), then plugins and slices, fences and classes."""
        self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=0)
        for plugin in self.plugins.values():
            plugin.stop()
        for name in self._rules:
            with contextlib.suppress(client.ApiException):
                self.resource.delete_device_taint_rule(name)
        for name in self._classes:
            with contextlib.suppress(client.ApiException):
                self.resource.delete_device_class(name)
        self.api.close()

    def _await_gone(self, read: Any, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                read()
            except client.ApiException as e:
                if e.status == 404:
                    return
                raise
            time.sleep(0.05)
