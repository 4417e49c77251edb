"""The node agent's inventory in planning: per-GPU usage, live memory, layout cross-checks (additive to the adapter)."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

from migctl.adapters.objects import load_objects, snapshot_from_objects
from migctl.cli.plan import example_path
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Node
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice

EXAMPLE = load_objects(example_path())
# all-balanced on an A100-40GB: 2g.10gb at 0, 1g.5gb at 2 and 3, 3g.20gb at 4.
BALANCED = [
    ("2g.10gb", 14, 0, 2, 9984),
    ("1g.5gb", 19, 2, 1, 4864),
    ("1g.5gb", 19, 3, 1, 4864),
    ("3g.20gb", 9, 4, 4, 20096),
]


def _find(kind: str, name: str) -> dict[str, Any]:
    return deepcopy(next(o for o in EXAMPLE if o["kind"] == kind and o["metadata"]["name"] == name))


def _a100(
    index: int,
    busy: set[int] = frozenset(),
    layout: list[tuple[str, int, int, int, int]] = BALANCED,  # type: ignore[assignment]
    unknown: bool = False,
) -> GpuInfo:
    devices = tuple(
        MigDevice(
            profile=p,
            profile_id=pid,
            gi=n + 1,
            start=s,
            size=z,
            memory_mib=mib,
            uuid=f"MIG-{index}-{n}",
            busy=None if unknown else n in busy,
        )
        for n, (p, pid, s, z, mib) in enumerate(layout)
    )
    return GpuInfo(
        index=index,
        uuid=f"GPU-{index}",
        name="NVIDIA A100-SXM4-40GB",
        memory_mib=40536,
        mig_capable=True,
        mig_enabled=True,
        mig_pending=True,
        busy=bool(busy),
        instances=devices,
    )


def _with_inventory(node: dict[str, Any], inv: Inventory) -> dict[str, Any]:
    node["metadata"].setdefault("annotations", {})["migctl.io/gpus"] = inv.to_annotation()
    return node


def _snap(catalog: Catalog, *objs: dict[str, Any]) -> tuple[Node, tuple[str, ...]]:
    snap = snapshot_from_objects([*objs, _find("ConfigMap", "default-mig-parted-config")], catalog)
    (node,) = snap.nodes
    return node, snap.warnings


def test_busy_flags_make_per_gpu_usage_known(catalog: Catalog) -> None:
    """notebook-0 holds a 1g.5gb; NVML says it is the one on GPU 1: GPU 0 becomes reconfigurable."""
    inv = Inventory(gpus=(_a100(0), _a100(1, busy={1})), profiles={"1g.5gb": 4864})
    node, warnings = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv), _find("Pod", "notebook-0"))
    assert node.usage_known and not warnings
    assert [dict(g.used or {}) for g in node.gpus] == [{}, {"1g.5gb": 1}]
    assert [g.busy for g in node.gpus] == [False, True]
    without, _ = _snap(catalog, _find("Node", "a100-node-1"), _find("Pod", "notebook-0"))
    assert not without.usage_known  # the same node without the agent: unknown, as before


def test_pod_holding_an_idle_instance_is_attributed_when_only_one_gpu_could_hold_it(catalog: Catalog) -> None:
    """Three pods hold a 1g.5gb, NVML sees two busy (GPU 0): the third has not started its process yet, and
    only GPU 1 has idle 1g.5gb instances, so it must be there."""
    inv = Inventory(gpus=(_a100(0, busy={1, 2}), _a100(1)))
    pods = [_find("Pod", "notebook-0") for _ in range(3)]
    for n, pod in enumerate(pods):
        pod["metadata"]["name"] = f"notebook-{n}"
    node, _ = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv), *pods)
    assert node.usage_known
    assert [dict(g.used or {}) for g in node.gpus] == [{"1g.5gb": 2}, {"1g.5gb": 1}]


def test_ambiguous_idle_holder_leaves_usage_unknown(catalog: Catalog) -> None:
    inv = Inventory(gpus=(_a100(0), _a100(1)))
    node, warnings = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv), _find("Pod", "notebook-0"))
    assert not node.usage_known and all(g.used is None for g in node.gpus)
    assert any("per-GPU usage unknown" in w and "1g.5gb" in w for w in warnings)


def test_unknown_busy_state_leaves_usage_unknown(catalog: Catalog) -> None:
    inv = Inventory(gpus=(_a100(0, unknown=True), _a100(1, unknown=True)))
    node, _ = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv), _find("Pod", "notebook-0"))
    assert not node.usage_known


def test_nvml_profile_memory_overrides_gfd_and_catalog(catalog: Catalog) -> None:
    n = _find("Node", "a100-node-1")
    n["metadata"]["labels"]["nvidia.com/mig-3g.20gb.memory"] = "19968"  # GFD says one thing
    inv = Inventory(gpus=(_a100(0), _a100(1)), profiles={"3g.20gb": 20224, "1g.5gb": 4864})  # NVML another
    node, _ = _snap(catalog, _with_inventory(n, inv))
    assert node.model is not None
    assert node.model.profile("3g.20gb").memory_mib == 20224
    assert node.model.memory_mib == 40536


def test_hardware_layout_disagreeing_with_the_recorded_one_freezes_the_node(catalog: Catalog) -> None:
    seven = [("1g.5gb", 19, s, 1, 4864) for s in range(7)]
    inv = Inventory(gpus=(_a100(0, layout=seven), _a100(1)))
    node, warnings = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv))
    assert "disagrees with the hardware" in node.frozen_reason and "GPU 0" in node.frozen_reason
    assert any("disagrees with the hardware" in w for w in warnings)
    assert dict(node.gpus[0].config.layout) == {"1g.5gb": 7}  # the hardware is what is there


def test_hardware_fills_in_a_layout_the_labels_cannot_resolve(catalog: Catalog) -> None:
    n = _find("Node", "a100-node-1")
    n["metadata"]["labels"]["nvidia.com/mig.config"] = "custom-xyz"
    n["status"]["allocatable"] = n["status"]["capacity"] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    node, _ = _snap(catalog, _with_inventory(n, Inventory(gpus=(_a100(0), _a100(1)))))
    assert node.frozen_reason == ""
    assert [dict(g.config.layout) for g in node.gpus] == [{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}] * 2


def test_pending_mig_mode_change_freezes(catalog: Catalog) -> None:
    gpu = _a100(1).model_copy(update={"mig_pending": False})
    node, _ = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), Inventory(gpus=(_a100(0), gpu))))
    assert "pending a GPU reset on GPU 1" in node.frozen_reason


def test_broken_inventory_is_a_warning_and_ignored(catalog: Catalog) -> None:
    n = _find("Node", "a100-node-1")
    n["metadata"]["annotations"] = {"migctl.io/gpus": '{"version": "v1", "gpus": [{"index": -1}]}'}
    node, warnings = _snap(catalog, n, _find("Pod", "notebook-0"))
    assert not node.usage_known
    assert any(w.startswith("node a100-node-1:") and "gpus[0].index" in w and "ignored" in w for w in warnings)
