"""A fake of NVIDIA's `gpu.nvidia.com` DRA kubelet plugin, simulated at its Kubernetes interface only.

What the real plugin (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin) shows the API server, and
so what this fake writes:
- **Its pod**, one per node, from the chart's DaemonSet `dra-driver-nvidia-gpu-kubelet-plugin` in namespace
  `dra-driver-nvidia-gpu` (the install guide's), with the chart's pod labels. kwok marks it Running.
- **ResourceSlices** for pool = node name, shaped by `tests/nvidia_slices.py` (static MIG: the MIG devices that
  exist; DynamicMIG: a counter slice, then every (profile, placement) per GPU), published with the rules of the
  slice controller the plugin vendors (k8s.io/dynamic-resource-allocation resourceslice, v0.36-0.37): generateName
  `<5-hex index>-gpu.nvidia.com-<node>-`, the Node as controlling owner, existing slices matched by index and
  updated in place, and the pool generation bumped only when more than one slice changes or a slice is added.
  So a static pool (one slice) keeps generation 1 across republishes, and a pool re-created from nothing starts
  at 1 again: "wait for a higher generation" is not a signal the real driver gives.
- **Restart**: the plugin does not rescan NVML, so new MIG devices appear only when its pod is deleted and the
  DaemonSet recreates it. The fake watches its pod: on deletion it recreates one (the DaemonSet's job) and, after
  `startup_s`, re-reads the hardware and republishes. The kubelet wipes a driver's slices only if it stays
  unregistered for 30 s (pkg/kubelet/cm/dra/manager.go defaultWipingDelay); `wipe_after_s` is that delay, so a
  slow start (`startup_s >= wipe_after_s`) blanks the node's devices first, as the real kubelet would.

Not simulated: NodePrepareResources/CDI (no kubelet runs), health, the plugin's own republish after prepare,
DynamicMIG's destruction of partitions it did not make. The hardware is whatever `layouts()` returns (the test
owns it; `layouts_from_nvml` reads the in-place agent's fake NVML).
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from kubernetes import client

from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import GpuModel
from tests.nvidia_slices import DRIVER, node_slices

from .controlplane import ControlPlane

Json = dict[str, Any]
Layouts = Sequence[Sequence[Placement] | None]  # per GPU minor: its MIG instances, None = MIG mode off

PLUGIN_NAMESPACE = "dra-driver-nvidia-gpu"
DAEMONSET = "dra-driver-nvidia-gpu-kubelet-plugin"
PLUGIN_LABELS = {  # _helpers.tpl templateLabels + selectorLabels(componentName=kubelet-plugin), release = chart name
    "app.kubernetes.io/name": "dra-driver-nvidia-gpu",
    "app.kubernetes.io/instance": "dra-driver-nvidia-gpu",
    "dra-driver-nvidia-gpu-component": "kubelet-plugin",
}
KUBELET_WIPE_DELAY_S = 30.0
_INDEX_MIN_LEN = 5  # resourceslice controller resourceSliceIndexMinLength


def raw(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Json:
    """Call a generated client method and return the JSON as the server sent it (no model round trip, which
    would drop fields the Python client does not know)."""
    resp = call(*args, _preload_content=False, **kwargs)
    data: Json = json.loads(resp.data)
    return data


def _prune(value: Any) -> Any:
    """Drop None / empty values, so what we send compares equal to what the server stored."""
    if isinstance(value, Mapping):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v not in (None, {}, [])}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value


def _index(name: str, length: int) -> int:
    """The slice index a name starts with (decodeIndex), -1 when the prefix is not `length` hex digits."""
    head, sep, _ = name.partition("-")
    if not sep or len(head) != length:
        return -1
    try:
        return int(head, 16)
    except ValueError:
        return -1


class SlicePublisher:
    """One pool's slices, kept as the real slice controller keeps them (see the module docstring)."""

    def __init__(self, resource: client.ResourceV1Api, node: str, node_uid: str) -> None:
        self.resource, self.node, self.node_uid = resource, node, node_uid
        self.writes = 0  # create/update/delete calls, for tests of the fake itself

    def current(self) -> list[Json]:
        """This pool's slices on the server, by name (= index order)."""
        items = raw(
            self.resource.list_resource_slice, field_selector=f"spec.driver={DRIVER},spec.nodeName={self.node}"
        )["items"]
        return sorted((s for s in items if s["spec"]["pool"]["name"] == self.node), key=lambda s: s["metadata"]["name"])

    def generation(self) -> int:
        return max((int(s["spec"]["pool"]["generation"]) for s in self.current()), default=0)

    def wipe(self) -> None:
        """What the kubelet does 30 s after a driver unregistered: delete all of the node's slices of it."""
        for s in self.current():
            self._delete(s)

    def publish(self, desired: Sequence[Json]) -> int:
        """Make the server hold `desired` (slice dicts from nvidia_slices); returns the pool generation used."""
        existing = self.current()
        generation = max((int(s["spec"]["pool"]["generation"]) for s in existing), default=0)
        length = max(_INDEX_MIN_LEN, len(f"{max(len(desired) - 1, 0):x}"))
        matched: dict[int, Json] = {}
        obsolete: list[Json] = []
        for s in existing:
            i = _index(s["metadata"]["name"], length)
            if int(s["spec"]["pool"]["generation"]) < generation or not 0 <= i < len(desired) or i in matched:
                obsolete.append(s)
            else:
                matched[i] = s
        pool = {"name": self.node, "generation": generation, "resourceSliceCount": len(desired)}
        content = [_prune({k: v for k, v in d["spec"].items() if k in ("devices", "sharedCounters")}) for d in desired]

        def stored(s: Json) -> Json:
            return _prune({k: v for k, v in s["spec"].items() if k in ("devices", "sharedCounters")})

        changed = {i for i, s in matched.items() if s["spec"]["pool"] != pool or stored(s) != content[i]}
        new = len(desired) - len(matched)
        bumped = not (new == 0 and len(changed) <= 1)
        if bumped:
            pool["generation"] = generation = generation + 1
        for s in obsolete:  # first delete: better to drop devices the driver lost even if the rest fails
            self._delete(s)
        for i, s in sorted(matched.items()):
            if i in changed or bumped:
                body = dict(s)
                body["spec"] = {**{k: v for k, v in s["spec"].items() if k not in ("devices", "sharedCounters")}}
                body["spec"].update(pool=pool, **content[i])
                self.resource.replace_resource_slice(s["metadata"]["name"], body)
                self.writes += 1
        for i, d in enumerate(desired):
            if i in matched:
                continue
            meta = {
                "generateName": d["metadata"]["generateName"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": self.node_uid, "controller": True}
                ],
            }
            spec = {"driver": DRIVER, "nodeName": self.node, "pool": pool, **content[i]}
            self.resource.create_resource_slice(
                {"apiVersion": d["apiVersion"], "kind": d["kind"], "metadata": meta, "spec": spec}
            )
            self.writes += 1
        return generation

    def _delete(self, s: Json) -> None:
        meta = s["metadata"]
        pre = client.V1Preconditions(uid=meta["uid"], resource_version=meta["resourceVersion"])
        try:
            self.resource.delete_resource_slice(meta["name"], body=client.V1DeleteOptions(preconditions=pre))
            self.writes += 1
        except client.ApiException as e:
            if e.status not in (404, 409):  # gone already, or changed under us (the next sync sees it)
                raise


def ensure_daemonset(core: client.CoreV1Api, apps: client.AppsV1Api) -> Json:
    """The chart's namespace and DaemonSet (inert: no DaemonSet controller runs; the fakes play it)."""
    try:
        core.create_namespace({"metadata": {"name": PLUGIN_NAMESPACE}})
    except client.ApiException as e:
        if e.status != 409:
            raise
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET, "namespace": PLUGIN_NAMESPACE, "labels": dict(PLUGIN_LABELS)},
        "spec": {
            "selector": {"matchLabels": {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}},
            "template": {"metadata": {"labels": dict(PLUGIN_LABELS)}, "spec": _pod_spec()},
        },
    }
    try:
        return raw(apps.create_namespaced_daemon_set, PLUGIN_NAMESPACE, body)
    except client.ApiException as e:
        if e.status != 409:
            raise
    return raw(apps.read_namespaced_daemon_set, DAEMONSET, PLUGIN_NAMESPACE)


def _pod_spec(node: str | None = None) -> Json:
    spec: Json = {
        "containers": [{"name": "gpus", "image": "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.5.0"}],
        "tolerations": [{"operator": "Exists"}],
    }
    if node:
        spec["nodeName"] = node
    return spec


class FakeNvidiaPlugin:
    """The plugin on one kwok node: its pod, its slices, and its restart when the pod is deleted.

    `layouts()` is the hardware the plugin finds at start (static mode; DynamicMIG ignores it: every placement is
    always advertised). Call `start()` once; `stop()` removes pod and slices (an uninstall).
    """

    def __init__(
        self,
        cp: ControlPlane,
        node: str,
        model: GpuModel,
        gpus: int,
        *,
        mode: Literal["static", "dynamic"] = "dynamic",
        layouts: Callable[[], Layouts] = lambda: (),
        mig_mode_on: bool = False,
        startup_s: float = 0.5,
        wipe_after_s: float = KUBELET_WIPE_DELAY_S,
    ) -> None:
        self.node, self.model, self.gpus, self.mode = node, model, gpus, mode
        self.layouts, self.mig_mode_on = layouts, mig_mode_on
        self.startup_s, self.wipe_after_s = startup_s, wipe_after_s
        self._api = cp.api_client()
        self.core, self.resource = client.CoreV1Api(self._api), client.ResourceV1Api(self._api)
        self.apps = client.AppsV1Api(self._api)
        self.publisher = SlicePublisher(self.resource, node, self.core.read_node(node).metadata.uid)
        self.pod_name = ""
        self.starts = 0  # plugin (re)starts that published
        self.wipes = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._started = threading.Condition()
        self._thread = threading.Thread(target=self._watch, name=f"fake-nvidia-plugin-{node}", daemon=True)

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        self._daemonset = ensure_daemonset(self.core, self.apps)
        self._create_pod()
        self._publish()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        try:
            self.core.delete_namespaced_pod(self.pod_name, PLUGIN_NAMESPACE, grace_period_seconds=0)
        except client.ApiException as e:
            if e.status != 404:
                raise
        self.publisher.wipe()
        self._api.close()

    def desired(self) -> list[Json]:
        """The slices the plugin would publish now, from the current hardware."""
        return node_slices(
            self.node,
            self.model,
            self.gpus,
            mode=self.mode,
            static_layouts=list(self.layouts()) if self.mode == "static" else None,
            mig_mode_on=self.mig_mode_on,
        )

    def restart(self) -> None:
        """Delete the plugin's pod, as migctl (or an admin) would to make it rescan; the fake does the rest."""
        self.core.delete_namespaced_pod(self.pod_name, PLUGIN_NAMESPACE)

    def wait_started(self, count: int, timeout: float = 30.0) -> None:
        """Until the plugin has published `count` times in all (1 = the first start)."""
        deadline = time.monotonic() + timeout
        with self._started:
            while self.starts < count:
                left = deadline - time.monotonic()
                if left <= 0 or self.errors:
                    raise TimeoutError(f"plugin on {self.node}: {self.starts} starts, wanted {count}; {self.errors}")
                self._started.wait(left)

    # -- internals ---------------------------------------------------------------------------------------

    def _create_pod(self) -> None:
        ds = self._daemonset["metadata"]
        owner = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds["name"], "uid": ds["uid"], "controller": True}
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{DAEMONSET}-{uuid.uuid4().hex[:5]}",
                "namespace": PLUGIN_NAMESPACE,
                "labels": dict(PLUGIN_LABELS),
                "ownerReferences": [owner],
            },
            "spec": _pod_spec(self.node),
        }
        self.pod_name = raw(self.core.create_namespaced_pod, PLUGIN_NAMESPACE, body)["metadata"]["name"]

    def _publish(self) -> None:
        self.publisher.publish(self.desired())
        with self._started:
            self.starts += 1
            self._started.notify_all()

    def _pod_gone_or_going(self) -> bool:
        try:
            pod = raw(self.core.read_namespaced_pod, self.pod_name, PLUGIN_NAMESPACE)
        except client.ApiException as e:
            if e.status == 404:
                return True
            raise
        return bool(pod["metadata"].get("deletionTimestamp"))

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            try:
                if self._pod_gone_or_going():
                    self._restart_cycle()
            except Exception as e:  # surfaced by wait_started; the test fails there, not silently
                self.errors.append(f"{type(e).__name__}: {e}")
                return

    def _restart_cycle(self) -> None:
        """The plugin stopped (unregistered): DaemonSet makes a new pod; the kubelet wipes after its delay."""
        down = time.monotonic()
        while not self._stop.is_set():  # the DaemonSet controller replaces the pod once the old one is gone
            try:
                self.core.read_namespaced_pod(self.pod_name, PLUGIN_NAMESPACE)
            except client.ApiException as e:
                if e.status == 404:
                    break
                raise
            time.sleep(0.05)
        self._create_pod()
        if self.startup_s >= self.wipe_after_s:
            self._stop.wait(max(0.0, down + self.wipe_after_s - time.monotonic()))
            self.publisher.wipe()
            self.wipes += 1
        self._stop.wait(max(0.0, down + self.startup_s - time.monotonic()))
        if not self._stop.is_set():
            self._publish()


def layouts_from_nvml(nvml: Any, model: GpuModel) -> list[list[Placement] | None]:
    """The MIG devices the plugin would enumerate from the in-place agent's fake NVML (`FakeMigNvml`): a GPU
    instance counts only with a compute instance (NVML lists MIG devices, not bare GPU instances)."""
    by_id = {p.profile_id: p.name for p in model.profiles if p.profile_id is not None}
    out: list[list[Placement] | None] = []
    for i, gpu in enumerate(nvml.gpus):
        if not gpu.mig:
            out.append(None)
            continue
        out.append([Placement(by_id[pid], start, size) for pid, start, size, ci in nvml.layout(i) if ci])
    return out
