"""SIMULATED node agent (in-place mode) and NVIDIA device plugin for the cluster tier's in-place nodes.

Why simulated: no GPU, NVML or kubelet exist here. Everything they talk to is real (kube-apiserver, kube-scheduler,
kwok), and each speaks only its real Kubernetes interface, so the real agent loop can replace `SimInPlaceAgent`:

* the agent watches its node's `migctl.io/in-place-target` (wire/inplace.py). For a plan it has not answered, it
  writes `migctl.io/in-place-status` state `applying`, then applies the target per GPU all or nothing: a GPU whose
  target has fewer instances of a profile than pods on the node hold is `blocked` and left as it was (pods name only
  a resource, not a GPU, so "held" is counted node-wide, as sim_gpu_operator.py does; exact with one GPU per node).
  It then re-advertises by flipping its OWN node's label `nvidia.com/device-plugin.config` between the two named
  configs (`migctl-a`/`migctl-b`), and answers `applied` with what each GPU holds. The per-GPU layout NVML would
  report lives in the node annotation `sim.migctl.io/gpu-layouts` (gpunodes.py);
* the device plugin's config-manager reacts only to a CHANGE of that label: `lag` seconds later it publishes the
  layouts annotation as capacity/allocatable `nvidia.com/mig-<p>` (vanished ones at "0") and GFD's count labels.
  Without a flip, allocatable never changes: a controller that untaints before the re-advertise is caught.

Faults (attributes, changeable while running): `answer` (force `blocked` or `failed` with `message`), `silent`
(nodes whose agent never answers), `plugin_dead` (nodes whose device plugin never re-advertises).

With `busy` ({node: {gpu: {profile: n}}}), the agent also publishes its NVML inventory (`migctl.io/gpus`, the real
agent's schema: core/model/inventory.py) with those instances busy, so the planner knows which GPU is in use, and its
blocked check is per GPU. `changed` records every GPU it changed: an in-use GPU must never appear there.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Collection
from typing import Any

from kubernetes import client

from migctl.core.hardware.geometry import geometry
from migctl.core.hardware.naming import RESOURCE_PREFIX, WHOLE_GPU_RESOURCE
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.wire import inplace as wire
from migctl.wire.names import DEVICE_PLUGIN_CONFIG, GPUS, IN_PLACE_STATUS, IN_PLACE_TARGET

from .gpunodes import GFD_PREFIX, LAYOUTS_ANNOTATION, advertised, catalog, decode_layouts, encode_layouts, gfd_labels

log = logging.getLogger(__name__)
CONFIGS = ("migctl-a", "migctl-b")
_FINISHED = {"Succeeded", "Failed"}


class SimInPlaceAgent:
    """The agent and the device plugin of `nodes`, polling the API server every `interval` seconds."""

    def __init__(self, api: client.ApiClient, nodes: Collection[str], *, lag: float = 0.5, interval: float = 0.1):
        self.core = client.CoreV1Api(api)
        self.nodes, self.lag, self.interval = set(nodes), lag, interval
        self.answer: str | None = None
        self.message = "injected"
        self.silent: set[str] = set()
        self.plugin_dead: set[str] = set()
        self.answered: dict[str, str] = {}  # node -> last plan answered
        self.applied: list[tuple[str, str]] = []  # (node, plan)
        self.flips: list[tuple[str, str]] = []  # (node, new config label)
        self.busy: dict[str, dict[int, dict[str, int]]] = {}
        self.changed: list[tuple[str, int]] = []  # (node, GPU index) of every GPU the agent changed
        self._plugin_seen: dict[str, str | None] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-in-place", daemon=True)

    def __enter__(self) -> SimInPlaceAgent:
        for name in sorted(self.busy):
            node = self.core.read_node(name)
            count = int((node.metadata.labels or {}).get(f"{GFD_PREFIX}gpu.count", "1"))
            self._inventory(node, decode_layouts((node.metadata.annotations or {}).get(LAYOUTS_ANNOTATION), count))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            for name in sorted(self.nodes):
                try:
                    node = self.core.read_node(name)
                    self._agent(node)
                    self._device_plugin(node)
                except client.ApiException as e:
                    if e.status != 404:
                        log.warning("sim-in-place %s: %s", name, e)
                except Exception:
                    log.exception("sim-in-place %s crashed", name)

    # -- the agent ------------------------------------------------------------------------------------------

    def _agent(self, node: client.V1Node) -> None:
        name, ann = node.metadata.name, node.metadata.annotations or {}
        raw = ann.get(IN_PLACE_TARGET)
        if not raw or name in self.silent:
            return
        target = wire.decode_target(raw)
        if self.answered.get(name) == target.plan:
            return
        self._status(name, wire.Status(target.plan, "applying"))
        count = int((node.metadata.labels or {}).get(f"{GFD_PREFIX}gpu.count", "1"))
        current = decode_layouts(ann.get(LAYOUTS_ANNOTATION), count)
        node_wide = self._held(name)
        new = dict(current)
        blocked: list[str] = []
        for i, counts in sorted(target.gpus.items()):
            held = self.busy[name].get(i, {}) if name in self.busy else node_wide
            short = [p for p, n in held.items() if counts.get(p, 0) < n and dict(current[i].layout).get(p, 0) >= n]
            if short:
                blocked.append(f"GPU {i}: {', '.join(short)} in use")
            elif GpuConfig.mig(counts) != current[i]:
                new[i] = GpuConfig.mig(counts)
                self.changed.append((name, i))
        state = self.answer or ("blocked" if blocked else "applied")
        if state != "applied":
            why = "; ".join(blocked) or self.message
            self._status(name, wire.Status(target.plan, state, why, _holding(current)))  # type: ignore[arg-type]
            self.answered[name] = target.plan
            return
        label = (node.metadata.labels or {}).get(DEVICE_PLUGIN_CONFIG, CONFIGS[0])
        flip = CONFIGS[1] if label == CONFIGS[0] else CONFIGS[0]
        self.core.patch_node(name, {"metadata": {"annotations": {LAYOUTS_ANNOTATION: _encode(new)},
                                                 "labels": {DEVICE_PLUGIN_CONFIG: flip}}})  # fmt: skip
        self.flips.append((name, flip))
        if name in self.busy:
            self._inventory(node, new)
        self._status(name, wire.Status(target.plan, "applied", "", _holding(new)))
        self.answered[name] = target.plan
        self.applied.append((name, target.plan))

    def _held(self, node: str) -> Counter[str]:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        out: Counter[str] = Counter()
        for p in pods:
            if p.status and p.status.phase in _FINISHED:
                continue
            for c in p.spec.containers or []:
                for k, v in ((c.resources.limits or {}) if c.resources else {}).items():
                    if k.startswith(RESOURCE_PREFIX):
                        out[k[len(RESOURCE_PREFIX) :]] += int(v)
        return out

    def _inventory(self, node: client.V1Node, gpus: dict[int, GpuConfig]) -> None:
        """The NVML inventory the real agent publishes: instances where they sit, the first `busy` ones busy."""
        labels = node.metadata.labels or {}
        model = catalog().match_product(labels.get(f"{GFD_PREFIX}gpu.product", ""))
        assert model is not None
        infos = []
        for i, g in sorted(gpus.items()):
            busy = Counter(self.busy.get(node.metadata.name, {}).get(i, {}))
            devices = []
            for k, pl in enumerate(geometry(model).place(g.layout)):
                prof = model.profile(pl.profile)
                uuid = f"MIG-{node.metadata.name}-{i}-{k}"
                devices.append(MigDevice(profile=pl.profile, profile_id=prof.profile_id or 0, gi=k + 1,
                                         start=pl.start, size=pl.size, memory_mib=prof.memory_mib, uuid=uuid,
                                         busy=busy[pl.profile] > 0))  # fmt: skip
                busy[pl.profile] -= 1
            infos.append(GpuInfo(index=i, uuid=f"GPU-{node.metadata.name}-{i}", name=model.nvml_names[0],
                                 memory_mib=model.memory_mib, mig_capable=True, mig_enabled=True, mig_pending=True,
                                 busy=any(d.busy for d in devices), instances=tuple(devices)))  # fmt: skip
        inventory = Inventory(gpus=tuple(infos))
        self.core.patch_node(node.metadata.name, {"metadata": {"annotations": {GPUS: inventory.to_annotation()}}})

    def _status(self, node: str, status: wire.Status) -> None:
        self.core.patch_node(node, {"metadata": {"annotations": {IN_PLACE_STATUS: wire.encode_status(status)}}})

    # -- the device plugin ----------------------------------------------------------------------------------

    def _device_plugin(self, node: client.V1Node) -> None:
        name = node.metadata.name
        label = (node.metadata.labels or {}).get(DEVICE_PLUGIN_CONFIG)
        if name not in self._plugin_seen:
            self._plugin_seen[name] = label
            return
        if label == self._plugin_seen[name] or name in self.plugin_dead:
            return
        self._plugin_seen[name] = label  # config-manager: a new config name -> SIGHUP -> re-enumerate
        threading.Timer(self.lag, self._publish, args=(name,)).start()

    def _publish(self, name: str) -> None:
        node = self.core.read_node(name)
        labels = node.metadata.labels or {}
        model = catalog().match_product(labels.get(f"{GFD_PREFIX}gpu.product", ""))
        assert model is not None
        gpus = decode_layouts((node.metadata.annotations or {}).get(LAYOUTS_ANNOTATION),
                              int(labels.get(f"{GFD_PREFIX}gpu.count", "1")))  # fmt: skip
        resources = {k: "0" for k in (node.status.capacity or {}) if k.startswith(RESOURCE_PREFIX)
                     or k == WHOLE_GPU_RESOURCE}  # fmt: skip
        resources.update({k: str(v) for k, v in advertised(model, gpus).items()})
        self.core.patch_node_status(name, {"status": {"capacity": resources, "allocatable": resources}})
        gfd: dict[str, Any] = {k: None for k in labels if k.startswith(RESOURCE_PREFIX) and k.endswith(".count")}
        gfd.update(gfd_labels(model, gpus))
        self.core.patch_node(name, {"metadata": {"labels": gfd}})


def _holding(gpus: dict[int, GpuConfig]) -> dict[int, tuple[wire.Held, ...]]:
    """What each GPU holds, as the agent reports it (placements are not simulated: start 0, size 1)."""
    return {i: tuple(wire.Held(p, 0, 1, False) for p, n in g.layout for _ in range(n)) for i, g in gpus.items()}


def _encode(gpus: dict[int, GpuConfig]) -> str:
    return encode_layouts([gpus[i] for i in sorted(gpus)])
