"""`migctl plan` against a live (real) API server: it reads nodes, pods and the mig-parted ConfigMap and writes nothing.

The GPU node is a kwok node with GFD-style labels (the GPU itself is simulated: see gpunodes.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

from migctl.cli import cli
from migctl.core.model.gpu_config import GpuConfig

from .controlplane import ControlPlane
from .gpunodes import MIG_CONFIG_LABEL, create_gpu_node

pytestmark = pytest.mark.cluster


def test_plan_reads_the_live_cluster_and_changes_nothing(
    control_plane: ControlPlane, core: client.CoreV1Api, namespace: str, node_names: list[str], tmp_path: Path
) -> None:
    layout = {"1g.10gb": 7}
    mig_parted = {"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": layout}]}}  # fmt: skip
    cm = core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "mig-parted"}, "data": {"config.yaml": yaml.safe_dump(mig_parted)}}
    )
    name = f"{namespace}-h100"
    node_names.append(name)
    create_gpu_node(core, name, "h100-80gb", [GpuConfig.mig(layout)], labels={"test": namespace},
                    mig_config="all-1g.10gb")  # fmt: skip
    core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": "big"},
            "spec": {
                "nodeSelector": {"test": namespace},
                "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/mig-3g.40gb": "1"}}}],
            },
        },
    )
    config = tmp_path / "migctl.yaml"
    config.write_text(
        yaml.safe_dump({"gpu_operator": {"configmap_namespace": namespace, "configmap_name": "mig-parted"}})
    )
    before = core.read_node(name).metadata

    res = CliRunner().invoke(
        cli, ["plan", "--kubeconfig", str(control_plane.kubeconfig), "--config", str(config), "-o", "json"]
    )

    assert res.exit_code == 0, res.stderr
    plan = json.loads(res.stdout)
    (mine,) = [n for n in plan["nodes"] if n["name"] == name]
    assert mine["changed"] is True
    assert mine["gpus"][0]["current"] == layout
    assert mine["gpus"][0]["target"].get("3g.40gb", 0) >= 1
    assert {"pod": f"{namespace}/big", "node": name, "gpu": 0, "profile": "3g.40gb"}.items() <= next(
        a for a in plan["assignments"] if a["pod"] == f"{namespace}/big"
    ).items()
    # read-only: the selection label, migctl's annotations and the ConfigMap are untouched
    after = core.read_node(name).metadata
    assert after.labels[MIG_CONFIG_LABEL] == before.labels[MIG_CONFIG_LABEL] == "all-1g.10gb"
    assert {k: v for k, v in (after.annotations or {}).items() if k.startswith("migctl.io/")} == {}
    assert core.read_namespaced_config_map("mig-parted", namespace).metadata.resource_version == (
        cm.metadata.resource_version
    )
    assert core.read_namespaced_pod("big", namespace).spec.node_name is None
