"""`Pod.gated` and `Pod.other_gates` from `spec.schedulingGates`: migctl's gate and everyone else's, read strictly;
a malformed list is that pod's error."""

from __future__ import annotations

from typing import Any

import pytest

from migctl.adapters.objects import snapshot_from_objects
from migctl.adapters.pods import gpu_demand, pod_from_object
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import PlannerSettings
from migctl.wire.names import QUEUE_GATE
from tests.unit.kube_builders import pod

PROFILE = {"nvidia.com/mig-1g.10gb": "1"}


def _gated(gates: Any, node: str | None = None) -> dict[str, Any]:
    p = pod("p", PROFILE, node=node)
    p["spec"]["schedulingGates"] = gates
    return p


@pytest.mark.parametrize(
    ("gates", "gated", "others"),
    [
        (None, False, False),
        ([], False, False),
        ([{"name": "example.com/other"}], False, True),
        ([{"name": QUEUE_GATE}], True, False),
        ([{"name": "example.com/other"}, {"name": QUEUE_GATE}], True, True),
    ],
)
def test_the_queue_gate_is_read(gates: Any, gated: bool, others: bool) -> None:
    got = pod_from_object(_gated(gates), PlannerSettings())
    assert (got.gated, got.other_gates) == (gated, others)


def test_a_bound_pod_is_never_gated() -> None:
    """The API server allows no gate once a pod has a node; its gates are not even read (a bad one cannot make
    its node's usage unknown)."""
    assert pod_from_object(_gated([{"name": QUEUE_GATE}], node="n1"), PlannerSettings(), notes=[]).gated is False
    assert pod_from_object(_gated([{"name": "x/y"}], node="n1"), PlannerSettings(), notes=[]).other_gates is False
    assert pod_from_object(_gated("nonsense", node="n1"), PlannerSettings(), notes=[]).gated is False


@pytest.mark.parametrize(
    ("gates", "where"),
    [
        ("migctl.io/queue", "spec.schedulingGates: expected a list"),
        (["migctl.io/queue"], "spec.schedulingGates[0]: expected an object"),
        ([{"name": QUEUE_GATE}, {"name": 3}], "spec.schedulingGates[1].name: 3"),
        ([{}], "spec.schedulingGates[0].name: None"),
    ],
)
def test_a_malformed_gate_list_names_the_field(gates: Any, where: str) -> None:
    with pytest.raises((ValueError, TypeError), match=where.replace("[", r"\[").replace("]", r"\]")):
        pod_from_object(_gated(gates), PlannerSettings())


def test_a_malformed_gate_list_rejects_only_that_pod(catalog: Catalog) -> None:
    good = _gated([{"name": QUEUE_GATE}])
    bad = _gated([{"name": 7}])
    bad["metadata"]["name"] = "bad"
    snap = snapshot_from_objects([good, bad], catalog)
    assert [(p.key, p.gated) for p in snap.pods] == [("ns/p", True)]
    assert [k for k, _ in snap.rejected] == ["ns/bad"]
    assert "spec.schedulingGates[0].name" in snap.rejected[0][1]


def test_gpu_demand_is_the_planners_reading() -> None:
    (d,) = gpu_demand(pod("p", {"nvidia.com/mig-1g.10gb": "2"}), "migctl.io/vram")
    assert (d.kind, d.profile, d.count) == ("profile", "1g.10gb", 2)
    assert [d.kind for d in gpu_demand(pod("p"), "migctl.io/vram")] == ["vram"]
    with pytest.raises(ValueError, match=r"nvidia.com/mig-1g.10gb"):
        gpu_demand(pod("p", {"nvidia.com/mig-1g.10gb": "lots"}), "migctl.io/vram")
