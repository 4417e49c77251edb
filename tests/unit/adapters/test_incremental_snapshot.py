"""The controller's incremental conversion (adapters/memo.py) gives the snapshot a fresh conversion gives, after
any sequence of watch events: pods added, changed (bound, finished, re-annotated, made unreadable), deleted;
nodes relabelled or retainted; the mig-parted ConfigMap rewritten. And it converts only what changed."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.adapters.memo import ConversionMemo
from migctl.adapters.objects import snapshot_from_objects
from migctl.core.hardware.catalog import Catalog, load_catalog
from tests.unit.kube_builders import Obj, bumped, gpu_node, mig_parted, pod

CATALOG: Catalog = load_catalog()
SMALL = {0: {"1g.5gb": 7}}
MIXED = {0: {"3g.20gb": 2}, 1: {"1g.5gb": 3, "2g.10gb": 2}}
BIG = {0: {"7g.40gb": 1}}


def cluster() -> list[Obj]:
    nodes = [gpu_node("n0", layouts=SMALL), gpu_node("n1", layouts=MIXED), gpu_node("n2", layouts=BIG)]
    pods = [pod(f"p{i}", {"migctl.io/vram": f"{4 + 3 * i}Gi"}, priority=i % 3) for i in range(5)]
    pods.append(pod("r0", {"nvidia.com/mig-1g.5gb": 1}, node="n0"))
    pods.append(pod("r1", {"nvidia.com/mig-3g.20gb": 1}, node="n1"))
    return [mig_parted(SMALL, MIXED, BIG), *nodes, *pods]


def _set(path: tuple[str, ...], value: Any) -> Any:
    def change(o: Obj) -> None:
        d = o
        for k in path[:-1]:
            d = d.setdefault(k, {})
        if value is None:
            d.pop(path[-1], None)
        else:
            d[path[-1]] = value

    return change


POD_CHANGES = [
    _set(("spec", "nodeName"), "n0"),
    _set(("spec", "nodeName"), "n1"),
    _set(("status", "phase"), "Succeeded"),
    _set(("status", "phase"), "Running"),
    _set(("metadata", "annotations", "migctl.io/vram"), "3Gi"),
    _set(("metadata", "deletionTimestamp"), "2026-01-01T00:00:00Z"),
    _set(("spec", "containers"), [{"name": "main", "resources": {"limits": {"migctl.io/vram": "lots"}}}]),
    _set(("spec", "containers"), [{"name": "main", "resources": {"limits": {"nvidia.com/mig-2g.10gb": "1"}}}]),
    _set(("spec", "priority"), 7),
]
NODE_CHANGES = [
    _set(("metadata", "labels", "nvidia.com/mig.config.state"), "pending"),
    _set(("metadata", "labels", "nvidia.com/mig.config"), "no-such-config"),
    _set(("metadata", "labels", "pool"), "a"),
    _set(("spec", "taints"), [{"key": "migctl.io/reconfiguring", "value": "true", "effect": "NoSchedule"}]),
    _set(("spec", "unschedulable"), True),
    _set(("status", "allocatable", "cpu"), "2"),
    _set(("status", "allocatable", "nvidia.com/mig-1g.5gb"), "1"),
]
event = st.one_of(
    st.tuples(st.just("pod"), st.integers(0, 20), st.integers(0, len(POD_CHANGES) - 1)),
    st.tuples(st.just("delete"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("add"), st.integers(0, 20), st.integers(0, 4)),
    st.tuples(st.just("node"), st.integers(0, 2), st.integers(0, len(NODE_CHANGES) - 1)),
    st.tuples(st.just("configmap"), st.integers(0, 2), st.just(0)),
)


def apply(objs: list[Obj], ev: tuple[str, int, int], serial: int) -> list[Obj]:
    """One watch event on the cache's objects (new dicts for new versions, as the informer stores them)."""
    what, i, j = ev
    pods = [k for k, o in enumerate(objs) if o["kind"] == "Pod"]
    nodes = [k for k, o in enumerate(objs) if o["kind"] == "Node"]
    out = list(objs)
    if what == "pod" and pods:
        k = pods[i % len(pods)]
        out[k] = bumped(objs[k], POD_CHANGES[j])
    elif what == "delete" and pods:
        del out[pods[i % len(pods)]]
    elif what == "add":
        out.append(pod(f"new{serial}", {"migctl.io/vram": f"{1 + 5 * j}Gi"}, priority=j % 2))
    elif what == "node":
        k = nodes[i % len(nodes)]
        out[k] = bumped(objs[k], NODE_CHANGES[j])
    elif what == "configmap":
        layouts = [SMALL, MIXED, BIG]
        kept = [lay for n, lay in enumerate(layouts) if n != i]  # one config dropped: its node's layout is unknown
        fresh = mig_parted(*kept)
        out[0] = bumped(objs[0], lambda o: o.update(data=fresh["data"]))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(event, min_size=1, max_size=12))
def test_incremental_snapshot_equals_a_fresh_one_after_any_events(events: list[tuple[str, int, int]]) -> None:
    objs = cluster()
    memo = ConversionMemo()
    assert snapshot_from_objects(objs, CATALOG, memo=memo) == snapshot_from_objects(copy.deepcopy(objs), CATALOG)
    for serial, ev in enumerate(events):
        objs = apply(objs, ev, serial)
        incremental = snapshot_from_objects(objs, CATALOG, memo=memo)
        assert incremental == snapshot_from_objects(copy.deepcopy(objs), CATALOG), ev


def test_one_pod_event_converts_one_pod_and_nothing_else() -> None:
    objs = cluster()
    memo = ConversionMemo()
    snapshot_from_objects(objs, CATALOG, memo=memo)
    assert memo.converted == {"Pod": 7, "Node": 3}
    snapshot_from_objects(objs, CATALOG, memo=memo)
    assert memo.converted == {"Pod": 0, "Node": 0}
    k = next(k for k, o in enumerate(objs) if o["metadata"]["name"] == "p2")
    objs[k] = bumped(objs[k], _set(("metadata", "annotations", "note"), "x"))
    snapshot_from_objects(objs, CATALOG, memo=memo)
    assert memo.converted == {"Pod": 1, "Node": 0}
    objs[k] = bumped(objs[k], _set(("spec", "nodeName"), "n1"))  # bound: its node's usage changes too
    snapshot_from_objects(objs, CATALOG, memo=memo)
    assert memo.converted == {"Pod": 1, "Node": 1}


def test_objects_without_a_resource_version_are_converted_every_time() -> None:
    objs = cluster()
    for o in objs:
        del o["metadata"]["resourceVersion"]
    memo = ConversionMemo()
    snapshot_from_objects(objs, CATALOG, memo=memo)
    snapshot_from_objects(objs, CATALOG, memo=memo)
    assert memo.converted == {"Pod": 7, "Node": 3}


def test_other_settings_start_afresh() -> None:
    objs = cluster()
    memo = ConversionMemo()
    snapshot_from_objects(objs, CATALOG, memo=memo)
    other = CATALOG.readable_by((0, 10, 0))
    snapshot_from_objects(objs, other, memo=memo)
    assert memo.converted == {"Pod": 7, "Node": 3}
