"""The REAL in-place node agent on a kwok node, with only the GPU, the kubelet and the device plugin simulated.

Real: migctl/agent/inplace_loop.py (`InPlaceLoop`), the apply engine (agent/apply.py, journal.py), the kubelet-aware
usage reader (agent/usage.py), the inventory publisher, the runner's tick (agent/runner.py; its apscheduler is
replaced by a plain thread), the NVML adapter (adapters/nvml.py, nvml_mig.py), the PodResources gRPC client, and
migctl's Kubernetes client (adapters/kube) talking to the real kube-apiserver. They are wired as `migctl agent`
wires them with `agent.in_place: true` (cli/agent.py).

SIMULATED, each at its real interface:
* the GPUs: tests/unit/fake_nvml_mig.py at pynvml's interface (A100-40GB geometry from the catalog), with every
  mutating call timed (`TimedFake.times`) so a test can tell whether the node was tainted when the GPU changed;
* the kubelet: a real gRPC PodResources v1 server on a unix socket (tests/unit/fake_podresources.py). Its `List`
  answers what the kubelet's device manager would: each non-finished pod bound to the node (read from the API
  server) holds the MIG UUIDs of fake-NVML instances of the profile it requests, sticky for the pod's life; an
  instance can be pinned to a pod (`pin`). A bound pod for which no free instance exists is recorded in
  `unadmitted` (the real kubelet would fail it with UnexpectedAdmissionError); a held instance that vanished from the
  fake NVML is recorded in `lost`. NVML shows no process on any instance: every pod is allocated-but-not-started as
  far as NVML knows, so only PodResources tells the agent what is in use;
* the NVIDIA device plugin: when the node's `nvidia.com/device-plugin.config` label CHANGES, `lag` seconds later it
  publishes capacity/allocatable `nvidia.com/mig-<p>` from the fake NVML's instances (vanished ones at "0") and
  GFD's count labels. Without a flip, allocatable never changes.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kubernetes import client

from migctl.adapters.kube import KubeApi
from migctl.adapters.nvml import NvmlReader
from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import PodResourcesClient
from migctl.agent.apply import Applier, Retry
from migctl.agent.inplace_loop import InPlaceLoop
from migctl.agent.journal import JOURNAL, Journal, LayoutRecord
from migctl.agent.publisher import Publisher
from migctl.agent.runner import AgentRunner
from migctl.agent.usage import KubeletAwareReader
from migctl.config.agent import AgentSettings
from migctl.core.hardware.geometry import geometry
from migctl.core.hardware.naming import RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, resource_name
from migctl.core.model.gpu_config import GpuConfig
from migctl.wire.names import DEVICE_PLUGIN_CONFIG
from tests.unit.fake_nvml_mig import AgentKilled, FakeMigNvml, MigGpu
from tests.unit.fake_podresources import FakeKubelet, serve_kubelet

from .gpunodes import GFD_PREFIX, advertised, catalog, gfd_labels

log = logging.getLogger(__name__)
MODEL = "a100-40gb"
CONFIGS = ("migctl-a", "migctl-b")
_FINISHED = {"Succeeded", "Failed"}


class TimedFake(FakeMigNvml):
    """The fake driver, thread-safe against the simulators' reads, with the time of every mutating call."""

    def __init__(self, gpus: list[MigGpu]) -> None:
        super().__init__(gpus)
        self.lock = threading.RLock()
        self.times: list[float] = []

    def _timed(self, fn: Any, *args: Any) -> Any:
        with self.lock:
            self.times.append(time.monotonic())
            return fn(*args)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: int, placement: Any) -> Any:  # noqa: N802
        return self._timed(super().nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile_id, placement)

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int) -> Any:  # noqa: N802
        return self._timed(super().nvmlGpuInstanceCreateComputeInstance, handle, profile_id)

    def nvmlComputeInstanceDestroy(self, handle: Any) -> None:  # noqa: N802
        self._timed(super().nvmlComputeInstanceDestroy, handle)

    def nvmlGpuInstanceDestroy(self, handle: Any) -> None:  # noqa: N802
        self._timed(super().nvmlGpuInstanceDestroy, handle)

    def instances(self) -> list[tuple[int, str, int, int, str]]:
        """(GPU, profile, start, size, MIG UUID) of every instance with its compute instance."""
        names = {p.profile_id: p.name for p in catalog().model(MODEL).profiles}
        with self.lock:
            return [(i, names[pid], s, z, u) for i in range(len(self.gpus)) for pid, s, z, u in self.layout(i) if u]


class AgentProcess:
    """One run of the agent (`migctl agent` with agent.in_place): `start()` then a tick every `interval` seconds.
    A failpoint's AgentKilled ends it as SIGKILL would (no rollback); a new one on the same state dir is a restart."""

    def __init__(self, rig: RealAgentRig, interval: float) -> None:
        kube = KubeApi(rig.api, attempts=5, max_wait_s=1.0)
        applier = Applier(
            MigNvml(rig.fake), PodResourcesClient(rig.socket, 5), Journal(rig.state), catalog(), rig.count_caps,
            Retry(3, 0.01, 0.05), LayoutRecord(rig.state),
        )  # fmt: skip
        self.loop = InPlaceLoop(kube, rig.node, applier, CONFIGS)
        reader = KubeletAwareReader(NvmlReader(rig.fake), PodResourcesClient(rig.socket, 5))
        settings = AgentSettings(interval_seconds=interval, in_place=True)
        self.runner = AgentRunner(reader, Publisher(kube, rig.node), settings, before_read=self._tick)
        self.rig = rig
        self.interval, self.killed = interval, False
        self.notes: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"agent-{rig.node}", daemon=True)

    def _tick(self) -> object:
        if self.rig.before_tick is not None:
            self.rig.before_tick()  # the simulated world changes between two ticks (tests' hook)
        return self.loop.tick()

    def _run(self) -> None:
        try:
            self.notes = self.loop.start()
            while not self._stop.is_set():
                self.runner.tick()
                self._stop.wait(self.interval)
        except AgentKilled:
            self.killed = True
            log.warning("agent killed by a failpoint")

    def begin(self) -> AgentProcess:
        self._thread.start()
        return self

    def end(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class RealAgentRig:
    """A kwok A100-40GB node's GPUs (fake NVML), kubelet (PodResources) and device plugin, plus its real agent."""

    def __init__(self, api: client.ApiClient, node: str, gpus: Sequence[GpuConfig], *, lag: float = 0.5,
                 interval: float = 0.2) -> None:  # fmt: skip
        self.api, self.node, self.lag, self.interval = api, node, lag, interval
        self.core = client.CoreV1Api(api)
        self.fake = TimedFake([MigGpu(uuid=f"GPU-{node}-{i}") for i in range(len(gpus))])
        model = catalog().model(MODEL)
        for i, g in enumerate(gpus):
            for pl in geometry(model).place(g.layout):
                self.fake.add(i, pl.profile, pl.start)
        self.state = Path(tempfile.mkdtemp(prefix="migctl-agent-state-"))
        self.caps = 0
        self.pins: dict[tuple[str, str], str] = {}  # (namespace, pod) -> MIG UUID it must get
        self.held: dict[tuple[str, str], list[tuple[str, str]]] = {}  # (namespace, pod) -> [(resource, MIG UUID)]
        self.unadmitted: set[tuple[str, str]] = set()
        self.lost: set[tuple[str, str, str]] = set()
        self.flips: list[str] = []
        self.agents: list[AgentProcess] = []
        self.before_tick: Callable[[], None] | None = None
        self.ghosts: dict[tuple[str, str], list[tuple[str, str]]] = {}  # allocations of pods the API does not list
        self.kubelet: FakeKubelet
        self.socket: Path
        self._plugin_label: str | None = None
        self._stop = threading.Event()
        self._sims = threading.Thread(target=self._simulate, name=f"sim-{node}", daemon=True)
        self._stack = ExitStack()
        self._sync_lock = threading.Lock()

    def count_caps(self) -> None:
        self.caps += 1

    def uuid_at(self, gpu: int, start: int) -> str:
        return next(u for i, _, s, _, u in self.fake.instances() if (i, s) == (gpu, start))

    def pin(self, namespace: str, pod: str, gpu: int, start: int) -> str:
        """The kubelet will hand this pod the instance at (gpu, start); returns its MIG UUID."""
        uuid = self.uuid_at(gpu, start)
        self.pins[(namespace, pod)] = uuid
        return uuid

    def ghost(self, namespace: str, pod: str, gpu: int, start: int) -> str:
        """The kubelet hands the instance at (gpu, start) to a pod the API server does not list bound here (one
        admitted after the inventory the planner read; a static pod); returns its MIG UUID."""
        uuid = self.uuid_at(gpu, start)
        prof = next(p for i, p, s, _, u in self.fake.instances() if u == uuid)
        self.ghosts[(namespace, pod)] = [(resource_name(prof), uuid)]
        self._sync_kubelet()
        return uuid

    def journal_empty(self) -> bool:
        return not (self.state / JOURNAL).exists()

    # -- lifecycle ------------------------------------------------------------------------------------------

    def __enter__(self) -> RealAgentRig:
        socket_dir = Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix="kubelet-")))  # short: sun_path
        self.kubelet, self.socket = self._stack.enter_context(serve_kubelet(socket_dir))
        self._sync_kubelet()
        self._sims.start()
        self.start_agent()
        return self

    def __exit__(self, *exc: object) -> None:
        for agent in self.agents:
            agent.end()
        self._stop.set()
        self._sims.join(timeout=10)
        self._stack.close()

    def start_agent(self) -> AgentProcess:
        """A new agent run on the same node, GPUs and state directory (the first start, or a restart)."""
        agent = AgentProcess(self, self.interval).begin()
        self.agents.append(agent)
        return agent

    # -- the kubelet and the device plugin ------------------------------------------------------------------

    def _simulate(self) -> None:
        while not self._stop.wait(0.05):
            try:
                self._sync_kubelet()
                self._device_plugin()
            except client.ApiException as e:
                log.warning("sim %s: %s", self.node, e)
            except Exception:
                log.exception("sim %s crashed", self.node)

    def _sync_kubelet(self) -> None:
        """PodResources `List` = the instances the device manager handed to the pods bound to this node."""
        with self._sync_lock:
            self._sync_pods()

    def _sync_pods(self) -> None:
        pods = self.core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}").items
        present = {u: (p, s) for _, p, s, _, u in self.fake.instances()}
        bound = {}
        for p in pods:
            if p.status and p.status.phase in _FINISHED:
                continue
            key = (p.metadata.namespace, p.metadata.name)
            wants: Counter[str] = Counter()
            for c in p.spec.containers or []:
                for k, v in ((c.resources.limits or {}) if c.resources else {}).items():
                    if k.startswith(RESOURCE_PREFIX) and k != WHOLE_GPU_RESOURCE:
                        wants[k] += int(v)
            if wants:
                bound[key] = wants
        self.held = {k: v for k, v in self.held.items() if k in bound}
        for key, held in self.held.items():
            self.lost.update((*key, u) for _, u in held if u not in present)
        taken = {u for held in [*self.held.values(), *self.ghosts.values()] for _, u in held}
        for key, wants in sorted(bound.items()):
            if key in self.held:
                continue
            got: list[tuple[str, str]] = []
            for res, n in sorted(wants.items()):
                pinned = self.pins.get(key)
                free = [u for u, (prof, _) in present.items() if resource_name(prof) == res and u not in taken]
                free.sort(key=lambda u: (u != pinned, u))
                got.extend((res, u) for u in free[:n])
                taken.update(free[:n])
                if len(free) < n:
                    self.unadmitted.add(key)
            self.held[key] = got
        listed = {**self.ghosts, **self.held}
        self.kubelet.allocations = {(ns, pod, "main"): _by_resource(held) for (ns, pod), held in listed.items()}

    def _device_plugin(self) -> None:
        node = self.core.read_node(self.node)
        label = (node.metadata.labels or {}).get(DEVICE_PLUGIN_CONFIG)
        if self._plugin_label is None:
            self._plugin_label = label or ""
            return
        if label == self._plugin_label:
            return
        self._plugin_label = label or ""  # config-manager: a new config name -> SIGHUP -> re-enumerate
        self.flips.append(label or "")
        timer = threading.Timer(self.lag, self._publish)
        timer.daemon = True
        timer.start()

    def gpu_configs(self) -> dict[int, GpuConfig]:
        layouts: dict[int, Counter[str]] = {i: Counter() for i in range(len(self.fake.gpus))}
        for i, prof, _, _, _ in self.fake.instances():
            layouts[i][prof] += 1
        return {i: GpuConfig.mig(dict(c)) for i, c in layouts.items()}

    def _publish(self) -> None:
        if self._stop.is_set():
            return
        try:
            self._advertise()
        except client.ApiException as e:
            log.warning("sim device plugin %s: %s", self.node, e)

    def _advertise(self) -> None:
        model = catalog().model(MODEL)
        gpus = self.gpu_configs()
        node = self.core.read_node(self.node)
        labels = node.metadata.labels or {}
        resources = {k: "0" for k in (node.status.capacity or {}) if k.startswith(RESOURCE_PREFIX)}
        resources.update({k: str(v) for k, v in advertised(model, gpus).items()})
        self.core.patch_node_status(self.node, {"status": {"capacity": resources, "allocatable": resources}})
        gfd: dict[str, Any] = {k: None for k in labels if k.startswith(RESOURCE_PREFIX) and k.endswith(".count")}
        gfd.update(gfd_labels(model, gpus))
        self.core.patch_node(self.node, {"metadata": {"labels": gfd}})
        by_res: dict[str, list[str]] = {}
        for _, prof, _, _, u in self.fake.instances():
            by_res.setdefault(resource_name(prof), []).append(u)
        self.kubelet.allocatable = by_res
        log.info("sim device plugin %s re-enumerated: %s", self.node, resources)


def _by_resource(held: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for res, uuid in held:
        out.setdefault(res, []).append(uuid)
    return out


@contextmanager
def real_agent(api: client.ApiClient, node: str, gpus: Sequence[GpuConfig], **kw: Any) -> Iterator[RealAgentRig]:
    with RealAgentRig(api, node, gpus, **kw) as rig:
        yield rig


__all__ = ["CONFIGS", "GFD_PREFIX", "MODEL", "AgentProcess", "RealAgentRig", "TimedFake", "real_agent"]
