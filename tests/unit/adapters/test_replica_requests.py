"""Pods that request alike are read once per snapshot (`pods.Shapes`): the same pods as reading each one, and
every problem still found and said for the pod that has it, whatever was read before it."""

from __future__ import annotations

from copy import deepcopy
from typing import Any

import pytest

from migctl.adapters.objects import load_objects, snapshot_from_objects
from migctl.adapters.pods import Shapes, pod_from_object
from migctl.cli.plan import example_path
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import PlannerSettings
from tests.unit.kube_builders import gpu_node, pod

SETTINGS = PlannerSettings()


def _read(objs: list[dict[str, Any]], shapes: Shapes | None) -> list[Any]:
    out: list[Any] = []
    for o in objs:
        notes: list[str] = []
        try:
            out.append((pod_from_object(o, SETTINGS, notes, shapes), notes))
        except (ValueError, TypeError) as e:
            out.append(str(e))
    return out


def test_replicas_read_through_the_shapes_equal_pods_read_one_by_one() -> None:
    pods = [o for o in load_objects(example_path()) if o["kind"] == "Pod"]
    replicas = [deepcopy(o) for o in pods for _ in range(3)]
    for i, o in enumerate(replicas):
        o["metadata"]["name"] = f"{o['metadata']['name']}-{i}"
    shapes: Shapes = {}
    assert _read(replicas, shapes) == _read(replicas, None)
    assert 0 < len(shapes) < len(replicas)  # replicas share an entry


@pytest.mark.parametrize(("other", "refused"), [(True, True), (1.0, False), ([1], True), ({"n": 1}, True)])
def test_a_value_equal_to_a_good_one_is_still_read_as_itself(other: Any, refused: bool) -> None:
    """`True == 1` and `1.0 == 1` in Python: the key holds the types, so a pod written `true` is refused even
    after a replica written `1` was read (and an unhashable value is read the long way, and refused)."""
    good = pod("good", {"nvidia.com/mig-1g.10gb": 1})
    same = pod("other", {"nvidia.com/mig-1g.10gb": other})
    first, second = _read([good, same], {})
    assert isinstance(first, tuple)
    assert second == _read([same], None)[0]
    assert isinstance(second, str) == refused
    if refused:
        assert "spec.containers[0].resources[nvidia.com/mig-1g.10gb]" in second


def test_a_note_on_a_bound_pod_is_given_to_every_bound_replica_and_never_spares_a_pending_one() -> None:
    requests = {"nvidia.com/mig-1g.10gb": "1", "example.com/widget": "lots"}  # unreadable, but not GPU planning's
    running = [pod(f"run-{i}", requests, node="n1", phase="Running") for i in range(2)]
    pending = pod("wait", requests)
    shapes: Shapes = {}
    got = _read([*running, pending], shapes)
    assert got == _read([*running, pending], None)
    assert all(isinstance(g, tuple) and g[1] for g in got[:2])  # each bound replica says why it skipped it
    assert isinstance(got[2], str) and "example.com/widget" in got[2]  # the pending pod is refused
    assert shapes == {}  # a reading that noted something is never kept


def test_the_snapshot_is_the_same_with_and_without_replicas_read_once(catalog: Catalog) -> None:
    node = gpu_node("n1", layouts={0: {"1g.10gb": 4}})
    objs = [node, *(pod(f"p{i}", {"nvidia.com/mig-1g.10gb": "1"}) for i in range(5)), pod("x", {"cpu": "two"})]
    snap = snapshot_from_objects(objs, catalog, SETTINGS)
    assert [p.name for p in snap.pods] == [f"p{i}" for i in range(5)]
    assert snap.rejected and snap.rejected[0][0] == "ns/x"
    assert all(p.gpu == snap.pods[0].gpu and p.requests == snap.pods[0].requests for p in snap.pods)


def test_an_init_container_read_as_a_sidecar_only_when_its_restart_policy_says_so() -> None:
    """The key holds each init container's restartPolicy: a sidecar (`Always`) adds to the app containers, a
    plain init container only raises the peak, so the same resources read differently."""
    plain, sidecar = pod("plain", {"cpu": "1"}), pod("sidecar", {"cpu": "1"})
    for o, policy in ((plain, None), (sidecar, "Always")):
        init: dict[str, Any] = {"name": "init", "resources": {"requests": {"cpu": "1"}}}
        if policy:
            init["restartPolicy"] = policy
        o["spec"]["initContainers"] = [init]
    shapes: Shapes = {}
    got = _read([plain, sidecar], shapes)
    assert got == _read([plain, sidecar], None)
    assert [g[0].requests.cpu_m for g in got] == [1000, 2000]
    assert len(shapes) == 2
