"""A bound pod costs only what it can hold: it is read resource by resource, and only an unreadable value of a
resource its node offers as GPU devices leaves the node's usage unknown (issue 33: one hostile pod froze a node)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from migctl.adapters.objects import load_objects, snapshot_from_objects
from migctl.cli.plan import example_path
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Node, Snapshot

BASE = load_objects(example_path())
NODE, POD = "a100-node-1", "research/notebook-0"  # the pod runs there and holds a 1g.5gb


def _snap(catalog: Catalog, mutate: Callable[[dict[str, Any]], None]) -> tuple[Snapshot, Node]:
    items = copy.deepcopy(BASE)
    pod = next(o for o in items if o["kind"] == "Pod" and o["metadata"]["name"] == POD.split("/")[1])
    mutate(pod)
    snap = snapshot_from_objects(items, catalog)
    return snap, next(n for n in snap.nodes if n.name == NODE)


def _limit(resource: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """The value as the first container's limit and request (a request of its own would win over the limit)."""

    def mutate(pod: dict[str, Any]) -> None:
        res = pod["spec"]["containers"][0]["resources"]
        for part in ("limits", "requests"):
            res.setdefault(part, {})[resource] = value

    return mutate


@pytest.mark.parametrize(
    ("resource", "value"),
    [("migctl.io/vram", "1e5000"), ("nvidia.com/mig-7g.80gb", "one"), ("example.com/dongle", "1e5000"),
     ("cpu", "1e5000"), ("memory", "lots")],
    ids=["vram on a MIG node", "a profile the node does not offer", "another resource", "cpu", "memory"],
)  # fmt: skip
def test_an_unreadable_value_that_holds_no_device_there_is_a_warning_not_a_frozen_node(
    catalog: Catalog, resource: str, value: str
) -> None:
    snap, node = _snap(catalog, _limit(resource, value))
    _, before = _snap(catalog, lambda p: None)
    assert not node.frozen_reason, node.frozen_reason
    assert (node.gpus, node.mig_free, node.usage_known) == (before.gpus, before.mig_free, before.usage_known)
    assert node.mig_free["1g.5gb"] == 3  # of 4: the pod's readable 1g.5gb still counts as held
    assert any(w.startswith(f"pod {POD}: ") and resource in w for w in snap.warnings), snap.warnings
    assert not any("usage is unknown" in w for w in snap.warnings)
    assert POD in {p.key for p in snap.pods}


@pytest.mark.parametrize(
    "mutate",
    [_limit("nvidia.com/mig-1g.5gb", "one"), _limit("nvidia.com/mig-2g.10gb", "1e5000"),
     lambda p: p["spec"]["containers"][0].__setitem__("resources", "big")],
    ids=["the profile it holds", "another profile the node offers", "resources not an object"],
)  # fmt: skip
def test_an_unreadable_value_that_may_hold_a_device_on_its_node_leaves_its_usage_unknown(
    catalog: Catalog, mutate: Callable[[dict[str, Any]], None]
) -> None:
    snap, node = _snap(catalog, mutate)
    assert "usage unknown" in node.frozen_reason and not node.mig_free  # nothing on it counts as free
    assert any(w.startswith(f"pod {POD}: unreadable (") and f"{NODE}'s usage is unknown" in w for w in snap.warnings)


def test_a_pending_pod_with_any_unreadable_value_is_rejected(catalog: Catalog) -> None:
    items = copy.deepcopy(BASE)
    pending = next(o for o in items if o["kind"] == "Pod" and not o["spec"].get("nodeName"))
    pending["spec"]["containers"][0]["resources"].setdefault("limits", {})["example.com/dongle"] = "1e5000"
    snap = snapshot_from_objects(items, catalog)
    key = f"{pending['metadata']['namespace']}/{pending['metadata']['name']}"
    assert any(k == key and "example.com/dongle" in why for k, why in snap.rejected), snap.rejected
