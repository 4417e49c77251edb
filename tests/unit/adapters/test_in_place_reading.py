"""In-place nodes in the snapshot: the actuation label, and each GPU's instances where they sit and whether held."""

from __future__ import annotations

from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Instance
from migctl.core.model.inventory import Inventory
from tests.unit.adapters.test_inventory_adapter import _a100, _find, _snap, _with_inventory


def _in_place(node: dict[str, object]) -> dict[str, object]:
    node["metadata"].setdefault("labels", {})["migctl.io/actuation"] = "in-place"  # type: ignore[index, union-attr]
    return node


def test_in_place_node_lists_instances_with_placements_and_use(catalog: Catalog) -> None:
    inv = Inventory(gpus=(_a100(0), _a100(1, busy={1})), profiles={"1g.5gb": 4864})
    node, _ = _snap(catalog, _in_place(_with_inventory(_find("Node", "a100-node-1"), inv)), _find("Pod", "notebook-0"))
    assert node.in_place
    assert node.gpus[0].instances == (
        Instance("2g.10gb", 0, 2, False),
        Instance("1g.5gb", 2, 1, False),
        Instance("1g.5gb", 3, 1, False),
        Instance("3g.20gb", 4, 4, False),
    )
    assert node.gpus[1].instances is not None
    assert [i for i in node.gpus[1].instances if i.in_use] == [Instance("1g.5gb", 2, 1, True)]


def test_stock_node_carries_no_instances(catalog: Catalog) -> None:
    """The stock path plans on counts: the same node without the label is read exactly as before."""
    inv = Inventory(gpus=(_a100(0), _a100(1, busy={1})), profiles={"1g.5gb": 4864})
    node, _ = _snap(catalog, _with_inventory(_find("Node", "a100-node-1"), inv), _find("Pod", "notebook-0"))
    assert not node.in_place
    assert all(g.instances is None for g in node.gpus)


def test_held_but_idle_instance_fixes_every_idle_instance_of_its_profile(catalog: Catalog) -> None:
    """Three pods hold a 1g.5gb and NVML sees two busy on GPU 0: the third is GPU 1's, but which of its two
    1g.5gb the kubelet handed out is unknown here, so both stay fixed (moving the held one would break a pod)."""
    inv = Inventory(gpus=(_a100(0, busy={1, 2}), _a100(1)))
    pods = [_find("Pod", "notebook-0") for _ in range(3)]
    for n, pod in enumerate(pods):
        pod["metadata"]["name"] = f"notebook-{n}"
    node, _ = _snap(catalog, _in_place(_with_inventory(_find("Node", "a100-node-1"), inv)), *pods)
    assert node.gpus[1].instances is not None
    held = [(i.profile, i.start) for i in node.gpus[1].instances if i.in_use]
    assert held == [("1g.5gb", 2), ("1g.5gb", 3)]


def test_unknown_usage_gives_no_instances(catalog: Catalog) -> None:
    """NVML cannot say which instances run processes: no instance list, so nothing can be re-cut around it."""
    inv = Inventory(gpus=(_a100(0, unknown=True), _a100(1, unknown=True)))
    node, _ = _snap(catalog, _in_place(_with_inventory(_find("Node", "a100-node-1"), inv)), _find("Pod", "notebook-0"))
    assert node.in_place
    assert all(g.instances is None for g in node.gpus)
