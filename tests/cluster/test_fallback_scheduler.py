"""The non-MIG fallback against the real control plane: VRAM capacity on node status, per-GPU best fit, binding.

Real: kube-apiserver (node status subresource, Binding API, Events), kwok (marks bound pods Running). No GPU
Operator is involved here: the T4 nodes carry the labels GFD would write, and the node agent's inventory is the
annotation the agent would publish (its NVML side is tested against the fake NVML in the unit tier).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client, watch

from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.fallback.scheduler import FallbackScheduler

from .controlplane import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE
from .waiting import wait_for

pytestmark = pytest.mark.cluster
GIB = 2**30
MIB = 2**20
T4_MIB = 15360
RESOURCE = "migctl.io/vram"


def t4_node(core: client.CoreV1Api, name: str, group: str, gpus: int = 2) -> None:
    """A kwok node as GFD and the device plugin leave a node with `gpus` Tesla T4s."""
    capacity = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "migctl.test/group": group,
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "Tesla-T4",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.memory": str(T4_MIB),
                "nvidia.com/mig.capable": "false",
            },
            "annotations": {KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }
    node = core.create_node(body)
    if (node.status.capacity or {}).get("pods") is None:
        core.patch_node_status(name, {"status": body["status"]})


def vram_pod(name: str, request: str, group: str, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "migctl",
        "nodeSelector": {"migctl.test/group": group},
        "containers": [
            {
                "name": "main",
                "image": "registry.invalid/cuda:fake",
                "resources": {"limits": {RESOURCE: request}},
                "env": [
                    {
                        "name": "NVIDIA_VISIBLE_DEVICES",
                        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['migctl.io/visible-devices']"}},
                    }
                ],
            }
        ],
    }
    spec.update(extra.pop("spec", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **extra}, "spec": spec}


def running_pod(name: str, node: str, request: str, gpu: int) -> dict[str, Any]:
    """A pod migctl placed earlier: bound, with its GPU annotation."""
    body = vram_pod(name, request, "unused", annotations={"migctl.io/gpu-index": str(gpu)})
    body["spec"]["nodeName"] = node
    del body["spec"]["nodeSelector"]
    return body


def vram(core: client.CoreV1Api, node: str) -> tuple[str | None, str | None]:
    status = core.read_node(node).status
    return (status.capacity or {}).get(RESOURCE), (status.allocatable or {}).get(RESOURCE)


def is_running(core: client.CoreV1Api, namespace: str, name: str) -> Callable[[], bool]:
    def check() -> bool:
        p = core.read_namespaced_pod(name, namespace)
        return p.status.phase == "Running"

    return check


@pytest.fixture
def catalog() -> Any:
    return load_catalog()


@pytest.fixture
def scheduler_thread(api: client.ApiClient, catalog: Any) -> Iterator[Callable[[FallbackSettings], FallbackScheduler]]:
    stops: list[tuple[threading.Event, threading.Thread]] = []

    def start(settings: FallbackSettings) -> FallbackScheduler:
        sched = FallbackScheduler(api, catalog, settings)
        stop = threading.Event()
        thread = threading.Thread(target=sched.serve, args=(stop,), daemon=True)
        thread.start()
        stops.append((stop, thread))
        return sched

    yield start
    for stop, thread in stops:
        stop.set()
        thread.join(timeout=10)


def _inventory(mig: tuple[bool, bool]) -> str:
    gpus = []
    for i, on in enumerate(mig):
        devices = (
            (
                MigDevice(
                    profile="7g.80gb",
                    profile_id=0,
                    gi=0,
                    start=0,
                    size=8,
                    memory_mib=81152,
                    uuid=f"MIG-{i}",
                    busy=False,
                ),
            )
            if on
            else ()
        )
        gpus.append(
            GpuInfo(
                index=i,
                uuid=f"GPU-h100-{i}",
                name="NVIDIA H100 80GB HBM3",
                memory_mib=81559,
                mig_capable=True,
                mig_enabled=on,
                mig_pending=on,
                busy=False,
                instances=devices,
            )
        )
    return Inventory(gpus=tuple(gpus)).to_annotation()


def test_capacity_appears_on_a_non_mig_node_and_follows_the_hardware(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str], catalog: Any
) -> None:
    t4, h100 = f"{namespace}-t4", f"{namespace}-h100"
    t4_node(core, t4, namespace)
    node_names.append(t4)
    sched = FallbackScheduler(api, catalog, FallbackSettings(reserve_mib_per_gpu=512))
    sched.run_once()
    expected = str(2 * (T4_MIB - 512) * MIB)
    assert vram(core, t4) == (expected, expected)
    time.sleep(1.5)  # kwok heartbeats the node status meanwhile; the capacity must survive them
    assert vram(core, t4) == (expected, expected)
    assert sched.run_once().capacity_changes == {}  # in sync: nothing patched

    # GFD reports less memory (another driver): the capacity follows.
    core.patch_node(t4, {"metadata": {"labels": {"nvidia.com/gpu.memory": "15109"}}})
    sched.run_once()
    assert vram(core, t4)[0] == str(2 * (15109 - 512) * MIB)

    # Counting in 512Mi units instead of bytes.
    FallbackScheduler(api, catalog, FallbackSettings(unit="512Mi")).run_once()
    assert vram(core, t4) == (str(2 * (15109 // 512)), str(2 * (15109 // 512)))

    # An H100 node whose agent reports GPU 1 switched to MIG: only GPU 0 counts; both MIG: the resource goes.
    from migctl.core.model.gpu_config import GpuConfig

    from .gpunodes import create_gpu_node

    create_gpu_node(core, h100, "h100-80gb", [GpuConfig.disabled(), GpuConfig.disabled()])
    node_names.append(h100)
    sched.run_once()
    assert vram(core, h100)[0] == str(2 * (81559 - 512) * MIB)
    core.patch_node(h100, {"metadata": {"annotations": {"migctl.io/gpus": _inventory((False, True))}}})
    sched.run_once()
    assert vram(core, h100)[0] == str((81559 - 512) * MIB)
    core.patch_node(h100, {"metadata": {"annotations": {"migctl.io/gpus": _inventory((True, True))}}})
    sched.run_once()
    assert vram(core, h100) == (None, None)


def test_pod_lands_on_the_best_fit_gpu_with_the_gpu_in_the_binding(
    core: client.CoreV1Api,
    namespace: str,
    node_names: list[str],
    scheduler_thread: Callable[[FallbackSettings], FallbackScheduler],
) -> None:
    node = f"{namespace}-t4"
    t4_node(core, node, namespace)
    node_names.append(node)
    # GPU 0 already holds 10 GiB (5 GiB free), GPU 1 is empty (15 GiB free).
    core.create_namespaced_pod(namespace, running_pod("existing", node, "10Gi", gpu=0))
    wait_for("existing pod Running", is_running(core, namespace, "existing"))

    seen: list[tuple[str | None, dict[str, str]]] = []
    started = threading.Event()

    def observe() -> None:
        w = watch.Watch()
        started.set()
        for ev in w.stream(
            core.list_namespaced_pod, namespace, field_selector="metadata.name=small", timeout_seconds=30
        ):
            pod = ev["object"]
            seen.append((pod.spec.node_name, dict(pod.metadata.annotations or {})))
            if pod.status.phase == "Running":
                w.stop()

    observer = threading.Thread(target=observe, daemon=True)
    observer.start()
    started.wait()
    scheduler_thread(FallbackSettings(interval_seconds=2))
    core.create_namespaced_pod(namespace, vram_pod("small", "4Gi", namespace))
    wait_for("small Running", is_running(core, namespace, "small"))
    observer.join(timeout=30)

    pod = core.read_namespaced_pod("small", namespace)
    assert pod.spec.node_name == node
    annotations = pod.metadata.annotations
    assert annotations["migctl.io/gpu-index"] == "0"  # best fit: 1 GiB left on GPU 0 beats 11 GiB on GPU 1
    assert annotations["migctl.io/visible-devices"] == "0"  # no agent here: the index (no UUID known)
    bound = [a for n, a in seen if n]
    assert bound and all(a.get("migctl.io/gpu-index") == "0" for a in bound)  # never bound without it
    # one write: the Binding sets the node and its annotations together (no pod patch; the fallback has no such right)
    assert not any(n is None and "migctl.io/gpu-index" in a for n, a in seen)


def test_pod_bigger_than_any_single_gpu_is_not_bound_and_gets_an_event(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str], catalog: Any
) -> None:
    node = f"{namespace}-t4"
    t4_node(core, node, namespace)
    node_names.append(node)
    core.create_namespaced_pod(namespace, running_pod("a", node, "8Gi", gpu=0))
    core.create_namespaced_pod(namespace, running_pod("b", node, "8Gi", gpu=1))
    core.create_namespaced_pod(namespace, vram_pod("big", "12Gi", namespace))  # 7 GiB free on each GPU, 14 in all
    sched = FallbackScheduler(api, catalog, FallbackSettings())
    result = sched.run_once()
    key = f"{namespace}/big"
    assert key in result.unplaced and not any(p.pod == key for p in result.bound)

    def event() -> Any:
        events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=big").items
        return next((e for e in events if e.reason == "FailedScheduling"), None)

    ev = wait_for("FailedScheduling event", event)
    assert ev.type == "Warning"
    assert "no single GPU has 12 GiB of VRAM free" in ev.message
    assert "split across 2 GPUs" in ev.message
    time.sleep(1)
    pod = core.read_namespaced_pod("big", namespace)
    assert pod.spec.node_name is None
    scheduled = next(c for c in pod.status.conditions or [] if c.type == "PodScheduled")
    assert (scheduled.status, scheduled.reason) == ("False", "Unschedulable")
    sched.run_once()  # a second pass keeps it pending and does not repeat the same event
    assert core.read_namespaced_pod("big", namespace).spec.node_name is None
    events = core.list_namespaced_event(namespace, field_selector="involvedObject.name=big").items
    assert len([e for e in events if e.reason == "FailedScheduling"]) == 1


class _CountingPatches:
    """Delegates to a CoreV1Api and counts the node patches sent through it."""

    def __init__(self, inner: client.CoreV1Api) -> None:
        self.inner = inner
        self.patches = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not name.startswith("patch_node"):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.patches += 1
            return attr(*args, **kwargs)

        return counted


def test_agent_inventory_gives_uuids_and_the_cli_runs_a_pass(
    control_plane: Any, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """The agent (fake NVML, real API) publishes once; the fallback then hands the pod the GPU's UUID."""
    from click.testing import CliRunner

    from migctl.adapters.kube import KubeApi
    from migctl.adapters.nvml import NvmlReader
    from migctl.agent.publisher import Publisher
    from migctl.cli import cli
    from migctl.core.model.gpu_config import GpuConfig
    from tests.unit.fake_nvml import FakeNvml, h100_no_mig

    from .gpunodes import create_gpu_node

    node = f"{namespace}-h100"
    create_gpu_node(core, node, "h100-80gb", [GpuConfig.disabled(), GpuConfig.disabled()], labels={"g": namespace})
    node_names.append(node)
    gpus = [h100_no_mig(), h100_no_mig()]
    gpus[1].uuid = "GPU-h100-0001"
    gpus[0].processes = 1  # busy with something outside Kubernetes: does not change VRAM accounting
    kube = KubeApi(api)
    counting = kube.core = _CountingPatches(core)
    publisher = Publisher(kube, node)
    reader = NvmlReader(FakeNvml(gpus))
    assert publisher.publish(reader.read()) is True
    assert counting.patches == 1
    # unchanged hardware: no patch at all (counted at the client: kwok heartbeats move the node's
    # resourceVersion on their own, so comparing resourceVersions would be racy)
    assert publisher.publish(reader.read()) is False
    assert counting.patches == 1

    core.create_namespaced_pod(namespace, running_pod("a", node, "70Gi", gpu=0))
    body = vram_pod("p", "8Gi", namespace)
    body["spec"]["nodeSelector"] = {"g": namespace}
    core.create_namespaced_pod(namespace, body)
    result = CliRunner().invoke(cli, ["fallback", "--once", "--kubeconfig", str(control_plane.kubeconfig)])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output[result.output.index("{") :])
    assert out["bound"] == [{"pod": f"{namespace}/p", "node": node, "gpu": 0, "uuid": "GPU-h100-0000"}]
    assert out["capacity_changes"][node] == 2 * 81559 * MIB
    pod = core.read_namespaced_pod("p", namespace)
    assert pod.metadata.annotations["migctl.io/visible-devices"] == "GPU-h100-0000"
    assert pod.metadata.annotations["migctl.io/gpu-uuid"] == "GPU-h100-0000"
    wait_for("p Running", is_running(core, namespace, "p"))
