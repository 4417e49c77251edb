"""The actuator's pure decisions: mig-manager verdicts, capacity verification, drain bookkeeping, the
persisted target format, and the ConfigMap merge that keeps configs other nodes still use."""

from __future__ import annotations

import json

import pytest

from migctl.controller.actuator import (
    BoundPod,
    Rollback,
    Target,
    capacity_mismatch,
    classify_pods,
    drain_status,
    layout_json,
    mig_manager_verdict,
)
from migctl.controller.configmap import merged, referenced_configs
from migctl.core.migparted.config import parse, render
from migctl.core.model.gpu_config import GpuConfig, config_name

GPUS = {0: GpuConfig.mig({"3g.40gb": 2}), 1: GpuConfig.disabled()}


@pytest.mark.parametrize(
    ("labels", "elapsed", "verdict"),
    [
        ({"nvidia.com/mig.config": "c", "nvidia.com/mig.config.state": "success"}, 0, "success"),
        ({"nvidia.com/mig.config": "c", "nvidia.com/mig.config.state": "failed"}, 0, "failed"),
        ({"nvidia.com/mig.config": "c", "nvidia.com/mig.config.state": "pending"}, 5, "wait"),
        ({"nvidia.com/mig.config": "c"}, 5, "wait"),  # state cleared by migctl: not answered yet
        ({"nvidia.com/mig.config": "c", "nvidia.com/mig.config.state": "pending"}, 10, "timeout"),  # the wedge
        ({"nvidia.com/mig.config": "other", "nvidia.com/mig.config.state": "success"}, 0, "relabel"),
    ],
)
def test_mig_manager_verdict(labels: dict[str, str], elapsed: float, verdict: str) -> None:
    assert mig_manager_verdict(labels, "c", elapsed, timeout=10) == verdict


def _node(alloc: dict[str, str], labels: dict[str, str]) -> dict[str, object]:
    return {"metadata": {"labels": labels}, "status": {"allocatable": alloc}}


def test_capacity_matches_ignoring_stale_zeros() -> None:
    node = _node(
        {"cpu": "64", "nvidia.com/mig-3g.40gb": "2", "nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "0"},
        {"nvidia.com/mig-3g.40gb.count": "2", "nvidia.com/mig-3g.40gb.memory": "40192", "nvidia.com/gpu.count": "2"},
    )
    assert capacity_mismatch(node, GPUS) == ""


def test_capacity_mismatch_names_what_differs() -> None:
    old_alloc = _node({"nvidia.com/mig-1g.10gb": "7", "nvidia.com/gpu": "1"}, {"nvidia.com/mig-3g.40gb.count": "2"})
    assert "allocatable" in capacity_mismatch(old_alloc, GPUS)
    stale_gfd = _node({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/gpu": "1"}, {"nvidia.com/mig-1g.10gb.count": "7"})
    problem = capacity_mismatch(stale_gfd, GPUS)
    assert "GFD counts" in problem and "allocatable" not in problem


def test_classify_and_drain_status() -> None:
    pods = [
        {"metadata": {"namespace": "a", "name": "gpu", "uid": "1"},
         "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}]}},
        {"metadata": {"namespace": "a", "name": "cpu"}, "spec": {"containers": [{"resources": {}}]}},
        {"metadata": {"namespace": "a", "name": "done"}, "status": {"phase": "Succeeded"},
         "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}},
        {"metadata": {"namespace": "a", "name": "vram", "deletionTimestamp": "x"},
         "spec": {"initContainers": [{"resources": {"requests": {"migctl.io/vram": "5Gi"}}}]}},
    ]  # fmt: skip
    views = classify_pods(pods, "migctl.io/vram")
    assert [(v.key, v.gpu, v.terminating) for v in views] == [
        ("a/gpu", True, False),
        ("a/cpu", False, False),
        ("a/vram", True, True),
    ]
    target = Target("p", "c", GPUS, evict=("a/gpu",))
    unexpected, to_evict, remaining = drain_status(views, target)
    # a GPU resource of zero holds nothing (the API server writes `0`, `0Gi`, `0.0`...); an unreadable one may
    zeros = [{"metadata": {"namespace": "z", "name": f"zero-{v}"},
              "spec": {"containers": [{"resources": {"limits": {"migctl.io/vram": v, "nvidia.com/gpu": 0}}}]}}
             for v in ("0", "0Gi", "0.0", "0Mi")]  # fmt: skip
    odd = {"metadata": {"namespace": "z", "name": "odd"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "one"}}}]}}  # fmt: skip
    assert [(v.key, v.gpu) for v in classify_pods([*zeros, odd], "migctl.io/vram")] == [
        *((f"z/zero-{v}", False) for v in ("0", "0Gi", "0.0", "0Mi")),
        ("z/odd", True),
    ]
    # on a node, only what it offers can hold a device there (as the snapshot reads it): an absurd VRAM value
    # on a MIG node holds none; an unreadable count of a profile the node offers may hold one
    mig_node = {"status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7", "migctl.io/vram": "0"}}}
    absurd = {"metadata": {"namespace": "z", "name": "absurd"},
              "spec": {"containers": [{"resources": {"limits": {"migctl.io/vram": "1e5000"}}}]}}  # fmt: skip
    on_node = classify_pods([absurd, odd], "migctl.io/vram", mig_node)
    assert [(v.key, v.gpu) for v in on_node] == [("z/absurd", False), ("z/odd", True)]
    assert unexpected == [] and [p.key for p in to_evict] == ["a/gpu"] and remaining == ["a/gpu", "a/vram"]

    late = [*views, BoundPod("b/late", "", terminating=False, gpu=True)]
    assert drain_status(late, target)[0] == ["b/late"]  # a pod the plan does not allow: roll back, never evict
    kept = drain_status(late, Target("p", "c", GPUS, keep=("b/late",), evict=("a/gpu",)))
    assert kept[0] == [] and "b/late" not in kept[2]


def test_target_round_trips_and_uses_the_layout_format() -> None:
    t = Target("p1", "migctl-x", GPUS, evict=("a/b",), keep=("c/d",), pods=("e/f",), previous_config="all-1g",
               started=12.5)  # fmt: skip
    assert Target.from_json(t.to_json()) == t
    assert json.loads(t.to_json())["gpus"] == layout_json(GPUS)
    assert layout_json(GPUS) == {"0": {"mig": True, "layout": {"3g.40gb": 2}}, "1": {"mig": False, "layout": {}}}


def test_rollback_round_trips() -> None:
    rb = Rollback("why", "eviction", relabel=False, backoff=True, uncertain=True)
    assert Rollback.from_json(rb.to_json()) == rb


def test_configmap_merge_keeps_base_and_referenced_configs_and_drops_stale_ones() -> None:
    a, b = {0: GpuConfig.mig({"7g.80gb": 1})}, {0: GpuConfig.mig({"1g.10gb": 7})}
    base = parse("version: v1\nmig-configs:\n  all-disabled:\n  - devices: all\n    mig-enabled: false\n", "test")
    current = render({config_name(a): a, config_name(b): b}, base)
    new = merged(current, config_name(GPUS), GPUS, keep={config_name(a)})
    assert new is not None
    assert set(new.mig_configs) == {"all-disabled", config_name(a), config_name(GPUS)}
    assert merged(new, config_name(GPUS), GPUS, keep={config_name(a)}) is None  # idempotent: no second write


def test_referenced_configs_reads_labels_and_targets() -> None:
    nodes = [
        {"metadata": {"labels": {"nvidia.com/mig.config": "x"}}},
        {"metadata": {"annotations": {"migctl.io/target": Target("p1", "y", GPUS, previous_config="z").to_json()}}},
        {"metadata": {"annotations": {"migctl.io/target": "{broken"}}},
        {"metadata": {"annotations": {"migctl.io/target": json.dumps({"config": "w"})}}},  # not a target: no plan
    ]
    assert referenced_configs(nodes) == {"x", "y", "z"}
