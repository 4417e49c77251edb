"""The static-MIG DRA executor (controller/dra.py) against the real control plane: a static DRA node opted into
migctl's agent is re-cut with only the changed GPU fenced; its other GPU keeps serving running and new claims
throughout; the fenced GPU's devices get no claim; the fences come off on every end.

Real: kube-apiserver, kube-scheduler (its DRA allocator, DeviceTaintRules), kube-controller-manager's resourceclaim
controller, kwok; migctl's executor through `executors.BEGIN` with the real Kubernetes adapter. SIMULATED at their
real interfaces: NVIDIA's kubelet plugin (fake_dra_driver.py: it republishes only when its pod is deleted, keeps the
pool generation at 1) and the node agent (`SimDraAgent`: the node's `in-place-target` in, `in-place-status` out,
and, like `migctl agent` on a DRA node, it re-cuts and then deletes its own node's plugin pod). The controller's
planning of DRA nodes is the reconcile's (tests/unit/reconcile); here the target is the one two pending 3g.40gb
claims get on an idle GPU.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client

from migctl.adapters.kube import KubeApi
from migctl.config import Config
from migctl.config.selector import LabelSelector
from migctl.controller.actuator import Actuator
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.dra import DRA_STEPS
from migctl.controller.events import EventSink
from migctl.controller.executors import BEGIN
from migctl.controller.metrics import Metrics
from migctl.core.hardware.geometry import Placement
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.nodestate import Target
from migctl.reconcile.paths import DRA_STATIC, opted_in, path_of
from migctl.wire import inplace as wire
from migctl.wire.names import (
    ACTUATION,
    DEPLOY_MIG_MANAGER,
    FENCE_NODE,
    IN_PLACE,
    IN_PLACE_STATUS,
    IN_PLACE_TARGET,
    LAST_ERROR,
    PHASE,
    RESHAPE_TAINT,
)
from tests.nvidia_slices import DRIVER, gpu_uuid

from .dra_harness import DraCluster, request
from .fake_dra_driver import FakeNvidiaPlugin, raw
from .gpunodes import catalog

pytestmark = pytest.mark.cluster

MODEL = "h100-80gb"
ALL_1G = [Placement("1g.10gb", i, 1) for i in range(7)]
OPTED_IN = {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"}
GPUS = {0: GpuConfig.mig({"3g.40gb": 2}), 1: GpuConfig.mig({"1g.10gb": 7})}
SETTINGS = {"poll_interval_s": 0.1, "dra_fence_settle_s": 1.0, "dra_drain_timeout_s": 4.0,
            "dra_agent_timeout_s": 15.0, "dra_advertise_timeout_s": 6.0, "api_retry_max_wait_s": 0.2}  # fmt: skip


class Crash(Exception):  # noqa: N818 - a signal
    """The controller dies at a step: nothing after it is written."""


def place(counts: dict[str, int]) -> list[Placement]:
    """Where the agent puts a target's instances: largest first, each at its first free placement."""
    model, used, out = catalog().model(MODEL), set[int](), []
    for name, n in sorted(counts.items(), key=lambda kv: -model.profile(kv[0]).memory_mib):
        for _ in range(n):
            start, size = next((s, z) for s, z in model.profile(name).placements if not used & set(range(s, s + z)))
            used |= set(range(start, start + size))
            out.append(Placement(name, start, size))
    return out


class SimDraAgent:
    """migctl's agent on one static-MIG DRA node, at its real interface: answers each new target once (applying,
    then the hardware re-cut and the node's plugin pod deleted, then applied), or `answer` when set."""

    def __init__(self, api: client.ApiClient, node: str, plugin: FakeNvidiaPlugin, hardware: list[Any]) -> None:
        self.core, self.node, self.plugin, self.hardware = client.CoreV1Api(api), node, plugin, hardware
        self.answer: str | None = None  # None: apply
        self.silent = False
        self.answered: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sim-dra-agent", daemon=True)

    def __enter__(self) -> SimDraAgent:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _status(self, status: wire.Status) -> None:
        patch = {"metadata": {"annotations": {IN_PLACE_STATUS: wire.encode_status(status)}}}
        self.core.patch_node(self.node, patch)

    def _loop(self) -> None:
        while not self._stop.wait(0.1):
            raw_target = (raw(self.core.read_node, self.node)["metadata"].get("annotations") or {}).get(IN_PLACE_TARGET)
            if not raw_target or self.silent:
                continue
            target = wire.decode_target(raw_target)
            if target.plan in self.answered:
                continue
            self._status(wire.Status(target.plan, "applying"))
            if self.answer is not None:
                self._status(wire.Status(target.plan, self.answer, "injected"))  # type: ignore[arg-type]
            else:
                for i, counts in target.gpus.items():
                    self.hardware[i][:] = place(dict(counts))
                self.plugin.restart()  # the plugin does not rescan: its pod is deleted, the DaemonSet makes one
                held = {i: tuple(wire.Held(p.profile, p.start, p.size, False) for p in self.hardware[i])
                        for i in target.gpus}  # fmt: skip
                self._status(wire.Status(target.plan, "applied", "", held))
            self.answered.append(target.plan)


class Watch:
    """Samples, every 50 ms, the node's taints and migctl's reshape fences, as an outsider sees them."""

    def __init__(self, api: client.ApiClient, node: str) -> None:
        self.core, self.resource, self.node = client.CoreV1Api(api), client.ResourceV1Api(api), node
        self.node_taints: list[str] = []
        self.fenced: set[str] = set()
        self.fence_samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.node_taints += [t["key"] for t in raw(self.core.read_node, self.node)["spec"].get("taints") or []]
            rules = raw(self.resource.list_device_taint_rule, label_selector=FENCE_NODE)["items"]
            mine = [r for r in rules if r["spec"]["deviceSelector"]["pool"] == self.node]
            self.fenced |= {r["spec"]["deviceSelector"]["device"] for r in mine}
            self.fence_samples += bool(mine)


def static_node(dra: DraCluster, suffix: str, **plugin_args: Any) -> tuple[str, FakeNvidiaPlugin, list[Any]]:
    """A kwok node with two H100s of 7x 1g.10gb in static MIG, opted into migctl's agent; `hardware` is what the
    plugin finds when it (re)starts."""
    hardware: list[Any] = [list(ALL_1G), list(ALL_1G)]
    plugin = dra.dra_node(suffix, MODEL, 2, mode="static", layouts=hardware, labels=OPTED_IN, **plugin_args)
    return plugin.node, plugin, hardware


def actuator(api: client.ApiClient, hook: Any = None) -> Actuator:
    cfg = Config.model_validate({"controller": SETTINGS})
    kube = KubeApi(api, attempts=5, max_wait_s=0.2)
    writer = ConfigMapWriter(kube, "default", "unused", cfg.gpu_operator, set)
    return Actuator(kube=kube, config=cfg, configmaps=writer, events=EventSink(kube, "test"), metrics=Metrics(),
                    ledger=EvictionLedger(), stop=threading.Event(), hook=hook)  # fmt: skip


def begin(a: Actuator, dra: DraCluster, node: str, keep: tuple[str, ...] = ()) -> str:
    """Start the change the way the loop does: the node's path from the paths record, then its executor."""
    labels = dict(raw(dra.core.read_node, node)["metadata"].get("labels") or {})
    path = path_of(labels, LabelSelector.parse(""), "static")
    assert path is DRA_STATIC and opted_in(labels, LabelSelector.parse(""))
    assert path.refusal(labels, {}, a.settings) is None
    target = Target("p0000000042", config_name(GPUS), GPUS, keep=keep, started=time.time())
    return BEGIN[path.name](a, node, target, lambda fresh: True)


def gpu_request(minor: int, node: str) -> dict[str, Any]:
    return request("1g.10gb", cel=[f"device.attributes['{DRIVER}'].parentUUID == '{gpu_uuid(node, minor)}'"])


def node_annotations(dra: DraCluster, node: str) -> dict[str, str]:
    return dict(raw(dra.core.read_node, node)["metadata"].get("annotations") or {})


def fences(dra: DraCluster, node: str) -> list[str]:
    rules = raw(dra.resource.list_device_taint_rule, label_selector=FENCE_NODE)["items"]
    return sorted(r["spec"]["deviceSelector"]["device"] for r in rules if r["spec"]["deviceSelector"]["pool"] == node)


def on_gpu0(dra: DraCluster, node: str) -> list[str]:
    """Every allocated claim result on GPU 0 of the node, as `claim/device`."""
    items = raw(dra.resource.list_namespaced_resource_claim, dra.namespace)["items"]
    return sorted(
        f"{c['metadata']['name']}/{r['device']}"
        for c in items
        for r in ((c.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or []
        if r["pool"] == node and r["device"].startswith("gpu-0-")
    )


def test_a_static_dra_node_is_recut_while_its_other_gpu_keeps_serving(dra_cluster: DraCluster, api: Any) -> None:
    """Two H100s of 7x 1g.10gb; a pod runs on GPU 1; two 3g.40gb claims are Unschedulable. migctl fences GPU 0's
    seven devices (no node taint), and during the window a new 1g.10gb claim, which first fit would put on
    `gpu-0-...-19-0`, lands on GPU 1. The agent re-cuts GPU 0 and deletes the plugin pod; once the slices list
    3g.40gb x2 the fences come off and both claims run; the pod on GPU 1 ran throughout."""
    node, plugin, hardware = static_node(dra_cluster, "static")
    dra_cluster.claim_pod("running", dra_cluster.template("on-gpu1", gpu_request(1, node)))
    assert dra_cluster.wait_placed("running").devices[0].startswith(f"{node}/gpu-1-")
    for pod in ("big-1", "big-2"):
        dra_cluster.claim_pod(pod, dra_cluster.template(pod, request("3g.40gb")))
        dra_cluster.wait_unschedulable(pod)
    during: list[str] = []

    def hook(name: str, step: str) -> None:
        if step == "dra-drained":  # fences on, settled; the target not yet written
            dra_cluster.claim_pod("during", dra_cluster.template("during", request("1g.10gb")))
            during.extend(dra_cluster.wait_placed("during").devices)

    a = actuator(api, hook)
    with SimDraAgent(api, node, plugin, hardware) as agent, Watch(api, node) as watch:
        assert begin(a, dra_cluster, node, keep=(f"{dra_cluster.namespace}/running",)) == "succeeded"
        placed = [dra_cluster.wait_placed(p).devices[0] for p in ("big-1", "big-2")]
    assert len(agent.answered) == 1 and plugin.starts == 2  # applied once; the plugin restarted once
    assert watch.fence_samples > 0 and watch.fenced == {f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)}
    assert watch.node_taints == []  # never a node taint
    assert during and during[0].startswith(f"{node}/gpu-1-")  # the unchanged GPU served a new claim meanwhile
    assert sorted(placed) == [f"{node}/gpu-0-mig-3g40gb-9-0", f"{node}/gpu-0-mig-3g40gb-9-4"]
    assert sorted(d.split("/")[1] for d in on_gpu0(dra_cluster, node)) == [
        "gpu-0-mig-3g40gb-9-0",
        "gpu-0-mig-3g40gb-9-4",
    ]  # fmt: skip  (nothing ever got a fenced 1g.10gb device: claims are never moved)
    assert dra_cluster.placed("running") is not None  # still Running on GPU 1
    assert fences(dra_cluster, node) == [] and PHASE not in node_annotations(dra_cluster, node)
    assert a.metrics.registry.get_sample_value("migctl_dra_window_seconds_count") == 1
    window = a.metrics.registry.get_sample_value("migctl_dra_window_seconds_sum") or 0.0
    print(f"dra window: {window:.2f} s (settle 1 s, simulated agent, plugin startup 0.5 s)")
    assert 1.0 <= window < 15


def test_a_plugin_that_does_not_come_back_ends_with_the_fences_lifted(dra_cluster: DraCluster, api: Any) -> None:
    """The plugin restarts slower than the kubelet's wiping delay and the advertise timeout: the node has no slices
    when the wait ends. migctl lifts the fences, records what the agent said the GPUs hold, and says why."""
    node, plugin, hardware = static_node(dra_cluster, "deadplugin", startup_s=60.0, wipe_after_s=0.3)
    a = actuator(api)
    with SimDraAgent(api, node, plugin, hardware):
        assert begin(a, dra_cluster, node) == "rolled-back"
    ann = node_annotations(dra_cluster, node)
    assert "did not list the new MIG devices" in ann[LAST_ERROR] and PHASE not in ann
    assert fences(dra_cluster, node) == []
    assert a.metrics.registry.get_sample_value("migctl_dra_changes_total", {"result": "timeout"}) == 1


def test_a_claim_on_a_fenced_device_holds_the_change_until_the_drain_timeout(dra_cluster: DraCluster, api: Any) -> None:
    """A claim that got a fenced device anyway (here: it tolerates the fence, as one the scheduler allocated
    before its informer saw the rule would have it): the agent is never asked, the fences come off at the drain
    timeout, and the claim keeps its device."""
    tolerate = {"key": RESHAPE_TAINT, "operator": "Exists", "effect": "NoSchedule"}
    node, plugin, hardware = static_node(dra_cluster, "raced")
    landed: list[str] = []

    def hook(name: str, step: str) -> None:
        if step == "dra-fenced":
            dra_cluster.claim_pod("raced", dra_cluster.template("raced", request("1g.10gb", tolerations=[tolerate])))
            landed.extend(dra_cluster.wait_placed("raced").devices)

    a = actuator(api, hook)
    with SimDraAgent(api, node, plugin, hardware) as agent:
        assert begin(a, dra_cluster, node) == "rolled-back"
    assert landed == [f"{node}/gpu-0-mig-1g10gb-19-0"] and not agent.answered
    ann = node_annotations(dra_cluster, node)
    assert "raced" in ann[LAST_ERROR] and IN_PLACE_TARGET not in ann
    assert fences(dra_cluster, node) == [] and plugin.starts == 1
    assert dra_cluster.placed("raced") is not None


@pytest.mark.parametrize("step", DRA_STEPS)
def test_a_controller_killed_at_each_step_is_finished_by_the_next(dra_cluster: DraCluster, api: Any, step: str) -> None:
    node, plugin, hardware = static_node(dra_cluster, "crash")

    def crash(name: str, at: str) -> None:
        if at == step:
            raise Crash(at)

    with SimDraAgent(api, node, plugin, hardware) as agent:
        with pytest.raises(Crash):
            begin(actuator(api, crash), dra_cluster, node)
        assert node_annotations(dra_cluster, node)[PHASE].startswith("dra-")
        assert actuator(api).drive(node) == "succeeded"
    assert len(agent.answered) == 1 and fences(dra_cluster, node) == []
    assert sorted(d.name for d in dra_cluster.pool(node).devices if d.minor == 0) == [
        "gpu-0-mig-3g40gb-9-0", "gpu-0-mig-3g40gb-9-4"
    ]  # fmt: skip
