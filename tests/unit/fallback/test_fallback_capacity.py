"""Fallback capacity math (bytes and 512Mi units), eligibility per GPU, per-GPU accounting, status patches."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import pytest
from pydantic import ValidationError

from migctl.adapters.node_status import capacity_patch
from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.fallback.capacity import fallback_view, gpu_units, node_gpus, node_units, vram_units

MIB = 2**20


def t4_node(name: str = "t4-1", gpus: int = 2, memory: str | None = "15360", **labels: str) -> dict[str, Any]:
    lab = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": str(gpus), **labels}
    if memory is not None:
        lab["nvidia.com/gpu.memory"] = memory
    cap = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": lab},
        "status": {"capacity": cap, "allocatable": dict(cap)},
    }


def pod(name: str, request: str | None, node: str | None = None, gpu: int | None = None, **spec: Any) -> dict[str, Any]:
    limits = {"migctl.io/vram": request} if request else {}
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}"}
    if gpu is not None:
        meta["annotations"] = {"migctl.io/gpu-index": str(gpu)}
    body: dict[str, Any] = {
        "kind": "Pod",
        "metadata": meta,
        "status": {"phase": "Running" if node else "Pending"},
        "spec": {"schedulerName": "migctl", "containers": [{"name": "c", "resources": {"limits": limits}}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def h100_inventory(mig: list[tuple[bool, bool]]) -> str:
    gpus = []
    for i, (on, pending) in enumerate(mig):
        dev = MigDevice(
            profile="7g.80gb", profile_id=0, gi=0, start=0, size=8, memory_mib=81152, uuid=f"MIG-{i}", busy=False
        )
        gpus.append(
            GpuInfo(
                index=i,
                uuid=f"GPU-{i}",
                name="NVIDIA H100 80GB HBM3",
                memory_mib=81559,
                mig_capable=True,
                mig_enabled=on,
                mig_pending=pending,
                busy=False,
                instances=(dev,) if on else (),
            )
        )
    return Inventory(gpus=tuple(gpus)).to_annotation()


@pytest.mark.parametrize(
    ("memory", "reserve", "unit", "expected"),
    [
        (15360, 0, "1", 15360 * MIB),  # bytes: pods write 8Gi
        (15360, 512, "1", (15360 - 512) * MIB),
        (15360, 0, "512Mi", 30),  # unit counts: pods write 16 for 8 GiB
        (15109, 0, "512Mi", 29),  # a partial unit is not advertised (floor)
        (15109, 600, "1Gi", 14),
        (400, 512, "1", 0),  # a reserve larger than the GPU never goes negative
    ],
)
def test_gpu_units(memory: int, reserve: int, unit: str, expected: int) -> None:
    assert gpu_units(memory, reserve, FallbackSettings(unit=unit).unit_bytes) == expected


@pytest.mark.parametrize("unit", ["0", "-1Gi", "0.5", "lots"])
def test_unit_must_be_a_positive_whole_number_of_bytes(unit: str) -> None:
    with pytest.raises(ValidationError):
        FallbackSettings(unit=unit)


def test_gfd_labels_give_memory_times_count(catalog: Catalog) -> None:
    gpus = node_gpus(t4_node(gpus=4), catalog)
    assert gpus is not None and gpus.source == "gfd" and not gpus.reason
    assert [(g.index, g.memory_mib) for g in gpus.gpus] == [(0, 15360), (1, 15360), (2, 15360), (3, 15360)]
    assert node_units(gpus, FallbackSettings(unit="512Mi", reserve_mib_per_gpu=256)) == 4 * ((15360 - 256) // 512)
    no_label = node_gpus(t4_node(memory=None), catalog)
    assert no_label is not None and no_label.gpus[0].memory_mib == 15360  # the catalog's prior for a T4


def test_gfd_path_refuses_nodes_with_mig_on(catalog: Catalog) -> None:
    node = t4_node(**{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/mig-1g.10gb.count": "7"})
    gpus = node_gpus(node, catalog)
    assert gpus is not None and not gpus.gpus and "needs the node agent" in gpus.reason
    assert node_gpus({"kind": "Node", "metadata": {"name": "cpu"}}, catalog) is None  # not a GPU node


def test_agent_inventory_counts_only_gpus_without_mig(catalog: Catalog) -> None:
    node = t4_node(**{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})
    node["metadata"]["annotations"] = {"migctl.io/gpus": h100_inventory([(False, False), (True, True), (False, True)])}
    gpus = node_gpus(node, catalog)
    assert gpus is not None and gpus.source == "agent"
    assert [(g.index, g.uuid) for g in gpus.gpus] == [(0, "GPU-0")]  # GPU 2 is switching to MIG: excluded
    node["metadata"]["annotations"] = {"migctl.io/gpus": h100_inventory([(True, True)])}
    gpus = node_gpus(node, catalog)
    assert gpus is not None and node_units(gpus, FallbackSettings()) is None and "MIG on" in gpus.reason
    node["metadata"]["annotations"] = {"migctl.io/gpus": "{broken"}
    gpus = node_gpus(node, catalog)
    assert gpus is not None and "unreadable inventory" in gpus.reason


def test_vram_units_follow_effective_requests() -> None:
    p = pod("p", "4Gi")
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"limits": {"migctl.io/vram": "6Gi"}}}]
    assert vram_units(p, "migctl.io/vram") == 6 * 2**30  # the init container's peak wins
    assert vram_units(pod("q", "16"), "migctl.io/vram") == 16  # unit counts are taken as written


def test_view_attributes_use_by_annotation_and_keeps_the_rest_unattributed(catalog: Catalog) -> None:
    objs = [t4_node(), pod("a", "8Gi", "t4-1", gpu=0), pod("b", "2Gi", "t4-1"), pod("new", "4Gi")]
    view = fallback_view(objs, catalog)
    (node,) = view.nodes
    assert [(g.index, g.capacity, g.used) for g in node.gpus] == [(0, 15 * 2**30, 8 * 2**30), (1, 15 * 2**30, 0)]
    assert node.unattributed == 2 * 2**30  # b has no GPU annotation: it may be on either GPU
    assert [node.free(g) for g in node.gpus] == [5 * 2**30, 13 * 2**30]
    assert [p.pod.key for p in view.pods] == ["ns/new"]
    assert view.capacity == {"t4-1": 30 * 2**30}


def test_node_running_device_plugin_gpu_pods_is_excluded(catalog: Catalog) -> None:
    whole = pod("w", None, "t4-1")
    whole["spec"]["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    (node,) = fallback_view([t4_node(), whole], catalog).nodes
    assert "nvidia.com GPUs" in node.reason


def test_a_node_listed_twice_is_its_last_copy(catalog: Catalog) -> None:
    """As the snapshot reads it (and warns): one node, the last copy's GPUs, not two nodes of one name."""
    view = fallback_view([t4_node(gpus=2), t4_node(gpus=4)], catalog)
    (node,) = view.nodes
    assert len(node.gpus) == 4
    assert any("listed more than once" in w for w in view.warnings)


def test_capacity_patch_adds_updates_and_removes() -> None:
    status: dict[str, Any] = {"capacity": {"cpu": "16"}, "allocatable": {"cpu": "16"}}
    ops = capacity_patch(status, "migctl.io/vram", 42)
    assert ops == [
        {"op": "add", "path": "/status/capacity/migctl.io~1vram", "value": "42"},
        {"op": "add", "path": "/status/allocatable/migctl.io~1vram", "value": "42"},
    ]
    synced = deepcopy(status)
    synced["capacity"]["migctl.io/vram"] = synced["allocatable"]["migctl.io/vram"] = "42"
    assert capacity_patch(synced, "migctl.io/vram", 42) == []
    assert [o["value"] for o in capacity_patch(synced, "migctl.io/vram", 40)] == ["40", "40"]
    assert capacity_patch(synced, "migctl.io/vram", None) == [
        {"op": "remove", "path": "/status/capacity/migctl.io~1vram"},
        {"op": "remove", "path": "/status/allocatable/migctl.io~1vram"},
    ]
    assert capacity_patch(status, "migctl.io/vram", None) == []
