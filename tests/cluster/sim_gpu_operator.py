"""SIMULATED GPU Operator: a test-only stand-in for NVIDIA mig-manager + device plugin + GFD.

Why simulated: no GPU and no NVML exist here, so the only part of the stack that is not real in the cluster tier is
this one. (NVIDIA's nvidia-mig-parted v0.10.0 is built by hack/testbin.sh, and conftest's MigPartedAudit runs its
`assert --valid-config` on every ConfigMap migctl writes; its `apply` needs GPUs, which is what this simulates.)
Everything it talks to (kube-apiserver, kube-scheduler, kwok) is real, and it speaks the GPU Operator's real
Kubernetes interface (facts: shared/reference/mig-data.md §3-4):

* it watches Nodes for changes of the label `nvidia.com/mig.config` (and applies the current value when it
  first sees a node, as mig-manager's informer AddFunc does; an empty value is ignored);
* it reads the named config from the mig-parted ConfigMap (key `config.yaml`), validated with migctl's own
  parser (`migctl.core.migparted.config.parse/resolve`) and catalog geometry instead of `nvidia-mig-parted assert
  --valid-config` (which checks format only, so this is stricter: impossible layouts fail here at once, where
  the real mig-parted fails later in `apply` with "all orderings failed" — both end in `failed`);
* state label `nvidia.com/mig.config.state`, in mig-manager's order: invalid config -> `failed` (no
  `pending`); config already applied -> `success` at once; otherwise `pending`, and after `delay` seconds
  (mig-manager pausing the operator's pods, then mig-parted apply) either `failed` (a GPU that would change
  still has pods using it: "In use by another client"; or an injected failure) or the new layout: node
  capacity/allocatable `nvidia.com/mig-<p>` (vanished ones set to "0" like the device plugin leaves them),
  `nvidia.com/gpu` for MIG-disabled GPUs, GFD `mig-<p>.count/.memory` labels, then `success`. With
  `capacity_lag` > 0 the capacity/labels appear that long *after* `success`, as the restarted device plugin
  and GFD do in reality (mig-data.md §4.3), so a controller must wait for allocatable too.

Fault modes (attributes, changeable while it runs; each models a real mig-manager failure):
* `fail_with`: every apply that would change a GPU ends in `failed` (a GPU reset failing);
* `fail_configs`: {config: message}: this config ends in `failed` even when already applied (mig-parted's
  assert/apply failing for it in this GPU's state: how a rollback to the previous config fails too);
* `hang_configs`: these configs stay `pending` forever (the wedged-`pending` bug: a mig-manager timeout);
* `no_capacity_configs`: applied and `success`, but the device plugin never re-registers the new resources and
  GFD never relabels (a verify timeout);
* `ignore_first_sight`: do not apply the label of a node seen for the first time (a mig-manager that handled it
  before its GPUs were changed by hand: the label names a config the GPUs do not have).

Not simulated: pausing `nvidia.com/gpu.deploy.*` labels, reboots (`rebooting`), the wedged-`pending` bug.
Pods only name a MIG resource, not a GPU, so a GPU counts as busy when a pod bound to the node (not finished)
requests a resource of a profile on that GPU's *current* layout (`nvidia.com/gpu` for a MIG-disabled GPU).
The per-GPU layout, which NVML would report, lives in the node annotation `sim.migctl.io/gpu-layouts`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, watch

from migctl.core.hardware.catalog import Catalog, GpuModel
from migctl.core.hardware.geometry import geometry
from migctl.core.hardware.naming import RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, resource_name
from migctl.core.migparted.apply import resolve
from migctl.core.migparted.config import parse
from migctl.core.model.gpu_config import GpuConfig
from migctl.errors import InputError

from .gpunodes import (
    GFD_PREFIX,
    LAYOUTS_ANNOTATION,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    advertised,
    catalog,
    decode_layouts,
    encode_layouts,
    gfd_labels,
)

log = logging.getLogger(__name__)

PENDING, SUCCESS, FAILED = "pending", "success", "failed"
_FINISHED_PHASES = {"Succeeded", "Failed"}


class ReconfigureRefusedError(Exception):
    """The reconfiguration cannot happen; the message is what mig-manager would log."""


@dataclass(frozen=True)
class Outcome:
    """One reconfiguration attempt, recorded for tests and failure reports."""

    node: str
    config: str
    state: str
    message: str


class SimGpuOperator:
    """Watch GPU nodes and act out mig-manager + device plugin + GFD for them. Use as a context manager."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        config_map: str,
        namespace: str,
        key: str = "config.yaml",
        delay: float = 0.2,
        capacity_lag: float = 0.0,
        nodes: Collection[str] | None = None,
        cat: Catalog | None = None,
    ) -> None:
        self.core = client.CoreV1Api(api)
        self.config_map, self.namespace, self.key = config_map, namespace, key
        self.delay, self.capacity_lag = delay, capacity_lag
        self.nodes = set(nodes) if nodes is not None else None
        self.catalog = cat or catalog()
        self.fail_with: str | None = None  # injected failure: while set, every apply ends in `failed` with it
        self.fail_configs: dict[str, str] = {}
        self.hang_configs: set[str] = set()
        self.no_capacity_configs: set[str] = set()
        self.ignore_first_sight = False
        self.history: list[Outcome] = []
        self._seen: dict[str, str] = {}
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- lifecycle ----------------------------------------------------------------------------------------

    def __enter__(self) -> SimGpuOperator:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._watch_loop, name="sim-gpu-operator-watch", daemon=True),
            threading.Thread(target=self._work_loop, name="sim-gpu-operator-worker", daemon=True),
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        self._queue.put(None)
        for t in self._threads:
            t.join(timeout=10)

    def outcomes(self, node: str) -> list[Outcome]:
        return [o for o in self.history if o.node == node]

    # -- watching -----------------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        selector = f"{GFD_PREFIX}gpu.product"  # GPU nodes only, as the operator deploys mig-manager
        rv: str | None = None
        while not self._stop.is_set():
            try:
                if rv is None:
                    nodes = self.core.list_node(label_selector=selector)
                    rv = nodes.metadata.resource_version
                    for n in nodes.items:
                        self._observe(n)
                w = watch.Watch()
                # Short server-side timeouts so stop() returns quickly; the watch resumes from `rv`.
                for event in w.stream(
                    self.core.list_node, label_selector=selector, resource_version=rv, timeout_seconds=2
                ):
                    obj = event["object"]
                    rv = obj.metadata.resource_version
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._observe(obj)
                    elif event["type"] == "DELETED":
                        self._seen.pop(obj.metadata.name, None)
                    if self._stop.is_set():
                        w.stop()
                        break
            except client.ApiException as e:
                if e.status != 410:  # 410 Gone: the resourceVersion is too old; relist
                    log.warning("sim-gpu-operator watch error: %s", e)
                    self._stop.wait(0.5)
                rv = None
            except (urllib3.exceptions.HTTPError, OSError) as e:
                if not self._stop.is_set():
                    log.warning("sim-gpu-operator watch connection error: %s", e)
                    self._stop.wait(0.5)
                rv = None

    def _observe(self, node: client.V1Node) -> None:
        name = node.metadata.name
        if self.nodes is not None and name not in self.nodes:
            return
        value = (node.metadata.labels or {}).get(MIG_CONFIG_LABEL, "")
        previous = self._seen.get(name)
        self._seen[name] = value
        if previous is None and self.ignore_first_sight:
            return
        if value and value != previous:  # first sight (AddFunc) or a changed label; "" is ignored
            self._queue.put(name)

    # -- reconfiguring ------------------------------------------------------------------------------------

    def _work_loop(self) -> None:
        while not self._stop.is_set():
            name = self._queue.get()
            if name is None:
                return
            try:
                self._reconcile(name)
            except Exception:  # keep the simulator alive; tests see the missing state change
                log.exception("sim-gpu-operator: reconciling %s crashed", name)

    def _reconcile(self, name: str) -> None:
        node = self.core.read_node(name)
        config = (node.metadata.labels or {}).get(MIG_CONFIG_LABEL, "")
        if not config:
            return
        try:
            model, current, desired = self._validate(node, config)
        except ReconfigureRefusedError as e:
            self._finish(name, config, FAILED, str(e))
            return
        if config in self.fail_configs:
            self._set_state(name, PENDING)
            self._finish(name, config, FAILED, self.fail_configs[config])
            return
        if config in self.hang_configs:
            self._set_state(name, PENDING)
            self.history.append(Outcome(name, config, PENDING, "hangs in pending (injected)"))
            return
        new = {**current, **desired}
        if new == current:
            self._finish(name, config, SUCCESS, "Selected MIG configuration currently applied")
            return
        self._set_state(name, PENDING)
        if self._stop.wait(self.delay):  # pausing operator pods, then mig-parted apply: busy GPUs fail there
            return
        try:
            self._check_not_busy(self.core.read_node(name), model, current, desired)
            if self.fail_with:
                raise ReconfigureRefusedError(self.fail_with)
        except ReconfigureRefusedError as e:
            self._finish(name, config, FAILED, str(e))
            return
        if config in self.no_capacity_configs:
            self._patch_annotation(name, new)
            self._finish(name, config, SUCCESS, "applied; device plugin never re-registers (injected)")
            return
        if self.capacity_lag > 0:
            self._patch_annotation(name, new)
            self._finish(name, config, SUCCESS, "applied; device plugin and GFD restarting")
            if self._stop.wait(self.capacity_lag):
                return
            self._publish(name, model, new)
        else:
            self._publish(name, model, new)
            self._finish(name, config, SUCCESS, "applied")

    def _validate(
        self, node: client.V1Node, config: str
    ) -> tuple[GpuModel, dict[int, GpuConfig], dict[int, GpuConfig]]:
        """mig-manager's `assert --valid-config`, plus the geometry check mig-parted's apply would hit."""
        labels = node.metadata.labels or {}
        product = labels.get(f"{GFD_PREFIX}gpu.product", "")
        model = self.catalog.match_product(product)
        if model is None:
            raise ReconfigureRefusedError(f"unknown GPU product {product!r}")
        count = int(labels.get(f"{GFD_PREFIX}gpu.count", "0"))
        current = decode_layouts((node.metadata.annotations or {}).get(LAYOUTS_ANNOTATION), count)
        source = f"configmap {self.namespace}/{self.config_map}[{self.key}]"
        try:
            cm = self.core.read_namespaced_config_map(self.config_map, self.namespace)
        except client.ApiException as e:
            raise ReconfigureRefusedError(f"{source}: cannot read ({e.status} {e.reason})") from e
        text = (cm.data or {}).get(self.key)
        if text is None:
            raise ReconfigureRefusedError(f"{source}: no key {self.key!r}")
        try:
            parsed = parse(text, source)
            desired = resolve(parsed, config, [(i, model.pci_device_ids[0]) for i in range(count)], source)
        except InputError as e:
            raise ReconfigureRefusedError(str(e)) from e
        geo = geometry(model)
        for index, gpu in sorted(desired.items()):
            problem = geo.problem(dict(gpu.layout)) if gpu.mig_enabled else None
            if problem:
                raise ReconfigureRefusedError(f"GPU {index}: {problem}")
        return model, current, desired

    def _check_not_busy(
        self, node: client.V1Node, model: GpuModel, current: dict[int, GpuConfig], desired: dict[int, GpuConfig]
    ) -> None:
        """Refuse like mig-parted when a GPU that must be cleared still has a client."""
        changed = {i for i, g in desired.items() if current[i] != g}
        if any(current[i].mig_enabled != desired[i].mig_enabled for i in changed):
            changed = set(desired)  # a MIG mode change clears every matched GPU (mig-parted ApplyMigMode)
        in_use = self._requested_resources(node.metadata.name)
        for index in sorted(changed):
            gpu = current[index]
            held = {resource_name(p) for p, _ in gpu.layout} if gpu.mig_enabled else {WHOLE_GPU_RESOURCE}
            busy = sorted(held & in_use)
            if busy:
                raise ReconfigureRefusedError(
                    f"GPU {index}: error destroying Compute instance ({', '.join(busy)}): In use by another client"
                )

    def _requested_resources(self, node: str) -> set[str]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}")
        out: set[str] = set()
        for pod in pods.items:
            if pod.status and pod.status.phase in _FINISHED_PHASES:
                continue
            for c in [*(pod.spec.containers or []), *(pod.spec.init_containers or [])]:
                res = c.resources
                for part in (res.limits or {}, res.requests or {}) if res else ():
                    out.update(k for k, v in part.items() if str(v) != "0")
        return out

    # -- publishing ---------------------------------------------------------------------------------------

    def _publish(self, name: str, model: GpuModel, new: dict[int, GpuConfig]) -> None:
        """Device plugin re-registration (capacity/allocatable) and GFD relabel for the new layout."""
        node = self.core.read_node(name)
        old_caps = node.status.capacity or {}
        resources: dict[str, str] = {
            k: "0" for k in old_caps if k.startswith(RESOURCE_PREFIX) or k == WHOLE_GPU_RESOURCE
        }
        resources.update({k: str(v) for k, v in advertised(model, new).items()})
        self.core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
        labels: dict[str, Any] = {
            k: None
            for k in (node.metadata.labels or {})
            if k.startswith(RESOURCE_PREFIX) and k.endswith((".count", ".memory"))
        }
        labels.update(gfd_labels(model, new))
        self.core.patch_node(
            name, {"metadata": {"labels": labels, "annotations": {LAYOUTS_ANNOTATION: encode_layouts_map(new)}}}
        )

    def _patch_annotation(self, name: str, new: dict[int, GpuConfig]) -> None:
        self.core.patch_node(name, {"metadata": {"annotations": {LAYOUTS_ANNOTATION: encode_layouts_map(new)}}})

    def _set_state(self, name: str, state: str) -> None:
        self.core.patch_node(name, {"metadata": {"labels": {MIG_STATE_LABEL: state}}})

    def _finish(self, name: str, config: str, state: str, message: str) -> None:
        self.history.append(Outcome(name, config, state, message))
        log.info("sim-gpu-operator: %s %s -> %s: %s", name, config, state, message)
        self._set_state(name, state)


def encode_layouts_map(gpus: dict[int, GpuConfig]) -> str:
    return encode_layouts([gpus[i] for i in sorted(gpus)])


def wait_for_state(core: client.CoreV1Api, node: str, states: Collection[str], timeout: float = 30.0) -> str:
    """Poll the node until `nvidia.com/mig.config.state` is one of `states`; returns it (TimeoutError if not)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = (core.read_node(node).metadata.labels or {}).get(MIG_STATE_LABEL)
        if last in states:
            return last
        time.sleep(0.1)
    raise TimeoutError(f"node {node}: mig.config.state is {last!r}, wanted one of {sorted(states)}")
