"""Kubernetes objects -> planner models: labels, ConfigMap, annotations, requests, bad input."""

from __future__ import annotations

import json
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
import yaml

from migctl.adapters.objects import load_objects, snapshot_from_objects
from migctl.adapters.pods import pod_from_object
from migctl.cli.plan import example_path
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import PlannerSettings
from migctl.errors import InputError

EXAMPLE = load_objects(example_path())


def _find(kind: str, name: str) -> dict[str, Any]:
    return deepcopy(next(o for o in EXAMPLE if o["kind"] == kind and o["metadata"]["name"] == name))


def test_example_nodes_read_layouts_from_the_operator_configmap(catalog: Catalog) -> None:
    snap = snapshot_from_objects(EXAMPLE, catalog)
    nodes = {n.name: n for n in snap.nodes}
    assert "cpu-node-1" not in nodes  # no GPUs
    h2 = nodes["h100-node-2"]
    assert h2.model is not None and h2.model.id == "h100-80gb"
    assert [dict(g.config.layout) for g in h2.gpus] == [{"1g.10gb": 7}] * 4
    a1 = nodes["a100-node-1"]
    assert [dict(g.config.layout) for g in a1.gpus] == [{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}] * 2
    assert not a1.usage_known  # a GPU pod runs there and nothing says on which GPU
    assert a1.mig_free["1g.5gb"] == 3


def test_live_gfd_memory_overrides_the_catalog(catalog: Catalog) -> None:
    n = _find("Node", "h100-node-2")
    n["metadata"]["labels"]["nvidia.com/mig-1g.10gb.memory"] = "10240"
    snap = snapshot_from_objects([n, _find("ConfigMap", "default-mig-parted-config")], catalog)
    (node,) = snap.nodes
    assert node.model is not None
    assert node.model.profile("1g.10gb").memory_mib == 10240


def test_migctl_annotation_wins_over_the_configmap(catalog: Catalog) -> None:
    n = _find("Node", "h100-node-2")
    layout = {"gpus": {str(i): {"mig": True, "layout": {"7g.80gb": 1}} for i in range(4)}}
    n["metadata"]["annotations"] = {"migctl.io/layout": json.dumps(layout)}
    n["status"]["allocatable"] = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/mig-7g.80gb": "4"}
    (node,) = snapshot_from_objects([n], catalog).nodes
    assert [dict(g.config.layout) for g in node.gpus] == [{"7g.80gb": 1}] * 4
    assert node.frozen_reason == ""


def test_disagreeing_device_plugin_counts_freeze_the_node(catalog: Catalog) -> None:
    n = _find("Node", "h100-node-2")
    n["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "20"
    snap = snapshot_from_objects([n, _find("ConfigMap", "default-mig-parted-config")], catalog)
    assert "disagree" in snap.nodes[0].frozen_reason
    assert any("disagree" in w for w in snap.warnings)


@pytest.mark.parametrize(("state", "expected"), [("pending", "in progress"), ("failed", "failed")])
def test_mig_manager_state_freezes_the_node(catalog: Catalog, state: str, expected: str) -> None:
    n = _find("Node", "h100-node-2")
    n["metadata"]["labels"]["nvidia.com/mig.config.state"] = state
    snap = snapshot_from_objects([n, _find("ConfigMap", "default-mig-parted-config")], catalog)
    assert expected in snap.nodes[0].frozen_reason


def test_unknown_config_name_leaves_layout_unknown(catalog: Catalog) -> None:
    n = _find("Node", "h100-node-2")
    n["metadata"]["labels"]["nvidia.com/mig.config"] = "custom-xyz"
    snap = snapshot_from_objects([n, _find("ConfigMap", "default-mig-parted-config")], catalog)
    assert "current layout unknown" in snap.nodes[0].frozen_reason
    assert any("custom-xyz" in w for w in snap.warnings)


def test_unknown_gpu_model_is_a_warning_not_a_crash(catalog: Catalog) -> None:
    n = _find("Node", "h100-node-2")
    n["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Z9000"
    snap = snapshot_from_objects([n], catalog)
    assert snap.nodes == ()
    assert "NVIDIA-Z9000" in snap.warnings[0]
    assert "--profiles-dir" in snap.warnings[0]


def test_nonsense_vram_quantity_rejects_only_that_pod(catalog: Catalog) -> None:
    bad = _find("Pod", "infer-a")
    bad["spec"]["containers"][0]["resources"]["limits"]["migctl.io/vram"] = "seven gigs"
    snap = snapshot_from_objects([*EXAMPLE, bad], catalog)
    (reason,) = [r for k, r in snap.rejected if k == "ml/infer-a"]
    assert "spec.containers[0].resources[migctl.io/vram]" in reason
    assert "not a Kubernetes quantity" in reason


def test_effective_requests_follow_init_containers() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"namespace": "a", "name": "b"},
        "spec": {
            "initContainers": [{"name": "prep", "resources": {"limits": {"nvidia.com/mig-3g.40gb": 1, "cpu": "4"}}}],
            "containers": [
                {"name": "x", "resources": {"limits": {"nvidia.com/mig-1g.10gb": 1}, "requests": {"cpu": "1"}}},
                {"name": "y", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
            ],
        },
    }
    p = pod_from_object(pod, PlannerSettings())
    assert {(d.kind, d.profile, d.count) for d in p.gpu} == {("profile", "1g.10gb", 1), ("profile", "3g.40gb", 1)}
    assert p.requests.cpu_m == 4000  # the init container's 4 CPUs beat 1.5 of the app containers
    assert p.requests.memory == 2**30


def test_vram_request_and_annotation() -> None:
    pod = {
        "kind": "Pod",
        "metadata": {"namespace": "a", "name": "b", "annotations": {"migctl.io/vram": "3Gi"}},
        "spec": {"containers": [{"name": "x", "resources": {"limits": {"migctl.io/vram": "7Gi"}}}]},
    }
    p = pod_from_object(pod, PlannerSettings())
    assert p.gpu[0].kind == "vram"
    assert p.gpu[0].vram_mib == 7168
    assert p.need_mib == 3072


def test_fractional_mig_count_is_rejected() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "b"},
           "spec": {"containers": [{"resources": {"limits": {"nvidia.com/mig-1g.10gb": "500m"}}}]}}  # fmt: skip
    with pytest.raises(ValueError, match="not a whole non-negative count"):
        pod_from_object(pod, PlannerSettings())


def test_broken_snapshot_file_is_an_input_error(tmp_path: Path) -> None:
    f = tmp_path / "snap.yaml"
    f.write_text("items: [\n")
    with pytest.raises(InputError, match=r"snap\.yaml"):
        load_objects(f)
    f.write_text(yaml.safe_dump({"items": ["not an object"]}))
    with pytest.raises(InputError, match=r"items\[0\]"):
        load_objects(f)


def test_json_snapshots_load_too(tmp_path: Path, catalog: Catalog) -> None:
    f = tmp_path / "snap.json"
    f.write_text(json.dumps({"kind": "List", "items": EXAMPLE}))
    assert len(snapshot_from_objects(load_objects(f), catalog).nodes) == 5
