"""The one reader of a node's GPUs (`adapters/node_gpus.py`), which the snapshot and the fallback share."""

from __future__ import annotations

from typing import Any

import pytest

from migctl.adapters.node_gpus import match_model, read_node_gpus
from migctl.adapters.objects import snapshot_from_objects
from migctl.core.hardware.catalog import Catalog
from migctl.fallback.capacity import node_gpus


def _node(**labels: str) -> dict[str, Any]:
    return {"kind": "Node", "metadata": {"name": "n", "labels": labels}, "status": {"allocatable": {"cpu": "8"}}}


def test_each_label_is_read_with_why_it_is_missing(catalog: Catalog) -> None:
    facts = read_node_gpus(_node(**{"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "2",
                                    "nvidia.com/gpu.memory": "15360"}))  # fmt: skip
    assert (facts.product, facts.count, facts.total_mib, facts.count_error, facts.total_error) == (
        "Tesla-T4", 2, 15360, "", ""
    )  # fmt: skip
    model, card = match_model(facts, catalog)
    assert model is None and card is not None and card.memory_mib > 0
    bad = read_node_gpus(_node(**{"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "2x",
                                  "nvidia.com/gpu.memory": "-1"}))  # fmt: skip
    assert bad.count is None and "'2x'" in bad.count_error
    assert bad.total_mib is None and "-1" in bad.total_error
    absent = read_node_gpus(_node())
    assert (absent.product, absent.count, absent.count_error, absent.inventory, absent.inventory_error) == (
        "", None, "", None, ""
    )  # fmt: skip
    broken = _node()
    broken["metadata"]["annotations"] = {"migctl.io/gpus": "{not json"}
    facts = read_node_gpus(broken)
    assert facts.inventory is None and facts.inventory_error and facts.has_inventory_annotation
    with pytest.raises((ValueError, TypeError), match=r"metadata\.labels"):
        read_node_gpus({"kind": "Node", "metadata": {"name": "n", "labels": ["not", "a", "map"]}})


def test_the_snapshot_and_the_fallback_read_an_unreadable_count_alike(catalog: Catalog) -> None:
    """One reading, two consequences: the snapshot freezes the node, the fallback gives it no capacity; both
    name the same label and its value."""
    node = _node(**{"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "two"})
    gpus = node_gpus(node, catalog)
    assert gpus is not None and not gpus.gpus and "nvidia.com/gpu.count" in gpus.reason and "'two'" in gpus.reason
    snap = snapshot_from_objects([node], catalog)
    assert any("nvidia.com/gpu.count" in w and "'two'" in w for w in snap.warnings), snap.warnings
