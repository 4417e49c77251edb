"""`migctl plan` and `migctl status` against a real API server read the controller's config ConfigMap.

The chart's ConfigMap (its labels, the config under config.yaml) is created here as the chart renders it; the
label selector that finds it is the real kube-apiserver's. The GPU node is a kwok node with GFD-style labels
(the GPU itself is simulated: see gpunodes.py). Other tests may leave labelled ConfigMaps of their own
releases on this shared control plane, so the command names this one (`--config-from-cluster`); the unit tier
covers finding the only one (tests/unit/cli/test_cluster_config.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

from migctl.adapters.kube import KubeApi
from migctl.cli import cli
from migctl.config.cluster import CONFIG_SELECTOR
from migctl.core.model.gpu_config import GpuConfig

from .controlplane import ControlPlane
from .gpunodes import create_gpu_node

pytestmark = pytest.mark.cluster

LABELS = {"app.kubernetes.io/name": "migctl", "app.kubernetes.io/component": "config",
          "app.kubernetes.io/part-of": "migctl", "app.kubernetes.io/managed-by": "Helm"}  # fmt: skip


def test_plan_and_status_use_the_controllers_configmap(
    api: client.ApiClient,
    control_plane: ControlPlane,
    core: client.CoreV1Api,
    namespace: str,
    node_names: list[str],
) -> None:
    layout = {"1g.10gb": 7}
    mig_parted = {"version": "v1", "mig-configs": {"all-1g.10gb": [
        {"devices": "all", "mig-enabled": True, "mig-devices": layout}]}}  # fmt: skip
    core.create_namespaced_config_map(
        namespace, {"metadata": {"name": "mig-parted"}, "data": {"config.yaml": yaml.safe_dump(mig_parted)}}
    )
    # the controller's settings: where its mig-parted ConfigMap is (without them the plan cannot read the
    # node's layout), as the chart renders them into <release>-config
    settings = {"gpu_operator": {"configmap_namespace": namespace, "configmap_name": "mig-parted"}}
    core.create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "migctl-config", "labels": LABELS}, "data": {"config.yaml": yaml.safe_dump(settings)}},
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "unlabelled"}, "data": {"config.yaml": "{}"}})
    found = KubeApi(api, attempts=1).list_configmaps(CONFIG_SELECTOR)
    ours = {(cm["metadata"]["namespace"], cm["metadata"]["name"]) for cm in found if
            cm["metadata"]["namespace"] == namespace}  # fmt: skip
    assert ours == {(namespace, "migctl-config")}  # the real selector: the labelled one only

    name = f"{namespace}-h100"
    node_names.append(name)
    create_gpu_node(core, name, "h100-80gb", [GpuConfig.mig(layout)], labels={"test": namespace},
                    mig_config="all-1g.10gb")  # fmt: skip
    kube = ["--kubeconfig", str(control_plane.kubeconfig), "--config-from-cluster", f"{namespace}/migctl-config"]

    res = CliRunner().invoke(cli, ["plan", *kube, "-o", "json"])
    assert res.exit_code == 0, res.stderr
    assert f"config: configmap {namespace}/migctl-config (--config-from-cluster)" in res.stderr
    (mine,) = [n for n in json.loads(res.stdout)["nodes"] if n["name"] == name]
    assert mine["gpus"][0]["current"] == layout  # read through the mig-parted ConfigMap the config names

    res = CliRunner().invoke(cli, ["status", name, *kube, "-o", "json"])
    assert res.exit_code == 0, res.stderr
    (row,) = json.loads(res.stdout)["nodes"]
    assert row["gpus"] == [{"index": 0, "mig_enabled": True, "instances": layout}]

    res = CliRunner().invoke(cli, ["status", name, "--kubeconfig", str(control_plane.kubeconfig),
                                   "--config-from-cluster", f"{namespace}/absent"])  # fmt: skip
    assert res.exit_code == 2 and f"error: --config-from-cluster {namespace}/absent: no such ConfigMap" in res.stderr


def test_plan_without_credentials_and_with_a_refusing_server(control_plane: ControlPlane, tmp_path: Path) -> None:
    """Exit 2 for credentials the person fixes, 1 for an API server that fails while reading."""
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    res = CliRunner().invoke(cli, ["plan", "--kubeconfig", str(bad)])
    assert res.exit_code == 2 and res.stderr.startswith("error: no usable Kubernetes credentials")
    cfg = yaml.safe_load(control_plane.kubeconfig.read_text())
    cfg["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"  # nothing listens there
    dead = tmp_path / "dead"
    dead.write_text(yaml.safe_dump(cfg))
    res = CliRunner().invoke(cli, ["plan", "--kubeconfig", str(dead), "--config", str(tmp_path / "none.yaml")])
    assert res.exit_code == 2 and "cannot read the config" in res.stderr  # the config file is checked first
    (tmp_path / "c.yaml").write_text("{}\n")
    res = CliRunner().invoke(cli, ["plan", "--kubeconfig", str(dead), "--config", str(tmp_path / "c.yaml")])
    assert res.exit_code == 1 and res.stderr.startswith("config: ") and "\nerror: reading the cluster failed" in (
        res.stderr
    )
