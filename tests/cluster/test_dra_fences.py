"""migctl's live controller on a DRA cluster: its fences (DeviceTaintRules) steer the real scheduler's first fit on a
DynamicMIG node so that a 4g and a 7g claim of a burst get devices first fit alone strands; a static-MIG node not
opted in and a device-plugin node in the same cluster are left as they were and planned as before. The controller's
rights on DeviceTaintRules are checked with the real authorizer and the chart's ValidatingAdmissionPolicy.

Real: kube-apiserver, kube-scheduler and kube-controller-manager 1.37 (the allocator, the resourceclaim
controller), kwok, the Controller itself (in-process threads, its informers on the API server). SIMULATED at their
API objects: NVIDIA's kubelet plugin (fake_dra_driver.py: NVIDIA's slices), and for the device-plugin node the GPU
Operator's mig-manager + device plugin (sim_gpu_operator.py).

The burst on 2x A100-40GB, DynamicMIG: two 1g.5gb claims, a 4g.20gb, a 7g.40gb, in this queue order. First fit puts
the 1g claims at slices 0 and 1 of GPU 0; the 4g.20gb (placed only at slice 0) goes to GPU 1; the 7g finds no GPU.
The burst arrives held (a scheduling gate of the test's, as Kueue's admission holds one) so that migctl plans it
before the scheduler allocates any of it; the gates are lifted one pod at a time in queue order, which is the order
migctl's predictor assumes. (migctl's own queue gate would hold pods on a node whose changes never start: DynamicMIG
nodes are not actuated, so the test does not rely on it.)
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

from migctl.adapters.kube import KubeApi
from migctl.cli import cli
from migctl.controller.fences import PLACEMENT, rule_body
from migctl.controller.loop import Controller
from migctl.core.dra.fences import FENCE
from migctl.core.dra.firstfit import Choice
from migctl.core.hardware.geometry import Placement
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.settings import GpuOperatorSettings
from migctl.wire.names import FENCE_NODE

from .controlplane import ControlPlane, find_bin_dir
from .dra_harness import IMAGE, NO_DEVICES, SETTLE_S, DraCluster, Placed, request
from .fake_dra_driver import raw
from .test_controller_e2e import (
    GROUP,
    assert_reconfigured,
    config_for,
    gpu_node,
    mig_pod,
    running,
    running_on,
    seed_configmap,
    settled,
    sim_for,
)
from .test_deploy import REPO, Release, _denied, _until_active, as_user, can
from .waiting import wait_for

pytestmark = pytest.mark.cluster

HOLD = "migctl.test/hold"  # the test's own scheduling gate (not migctl's queue gate)
BURST = ["1g.5gb", "1g.5gb", "4g.20gb", "7g.40gb"]
TARGET_3G = {0: GpuConfig.mig({"3g.40gb": 2})}


def held_pod(dra: DraCluster, name: str, template: str, node: str) -> str:
    """A claim pod pinned to `node`, held by the test's scheduling gate."""
    spec = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "schedulingGates": [{"name": HOLD}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
    }
    kube: Any = dra.core
    kube.create_namespaced_pod(dra.namespace, {"metadata": {"name": name}, "spec": spec})
    return name


def release_gate(dra: DraCluster, pod: str) -> None:
    dra.core.patch_namespaced_pod(pod, dra.namespace, [{"op": "remove", "path": "/spec/schedulingGates"}])


def fences_on(dra: DraCluster, node: str) -> list[str]:
    """The devices migctl's DeviceTaintRules fence on `node`, as the API server has them."""
    items = raw(dra.resource.list_device_taint_rule, label_selector=f"{FENCE_NODE}={node}")["items"]
    return sorted(r["spec"]["deviceSelector"]["device"] for r in items)


def burst_templates(dra: DraCluster) -> list[str]:
    """One template per claim of the burst, named in queue order (`b0-1g5gb`, ...)."""
    return [dra.template(f"b{i}-{p.replace('.', '')}", request(p)) for i, p in enumerate(BURST)]


def devices(node: str, placed: Sequence[Placed | None]) -> list[tuple[str, ...] | None]:
    return [tuple(d.removeprefix(f"{node}/") for d in p.devices) if p else None for p in placed]


def test_without_migctl_first_fit_strands_the_7g_claim(dra_cluster: DraCluster) -> None:
    """The control case: the same burst, the same node, no migctl. The real scheduler allocates the 1g claims at
    GPU 0's slices 0 and 1, the 4g on GPU 1, and leaves the 7g Pending (no device)."""
    node = dra_cluster.dra_node("plain", "a100-40gb", 2, mode="dynamic").node
    placed = dra_cluster.place_templates(burst_templates(dra_cluster), node)
    assert devices(node, placed) == [
        ("gpu-0-mig-1g5gb-19-0",), ("gpu-0-mig-1g5gb-19-1",), ("gpu-1-mig-4g20gb-5-0",), None,
    ]  # fmt: skip
    assert NO_DEVICES in (dra_cluster.unschedulable(f"b3-7g40gb-{node}") or "")


def test_migctls_fences_place_the_burst_first_fit_strands(
    api: client.ApiClient, core: Any, namespace: str, node_names: list[str], dra_cluster: DraCluster
) -> None:
    """One controller, three kinds of node in one cluster:
    * DynamicMIG A100 (2 GPUs): migctl fences GPU 0's 1g placements the plan keeps for the 4g, before any claim
      is allocated; released one by one, every claim gets the device migctl predicted with its fences, the 7g
      included; once the burst is served the fences are lifted (none left over), and the node is never tainted;
    * static-MIG H100, not opted in (no migctl.io/actuation=in-place): frozen. A pending claim there that only
      a re-cut could serve gets no fence, no annotation, no change: it stays Pending;
    * device-plugin H100: a pending nvidia.com/mig-3g.40gb pod is planned and reconfigured as before (mig-manager
      path, SIMULATED GPU Operator), and runs."""
    seed_configmap(core, namespace)
    dyn = dra_cluster.dra_node("dyn", "a100-40gb", 2, mode="dynamic").node
    static_layout = [[Placement("1g.10gb", s, 1) for s in range(7)]]
    static = dra_cluster.dra_node("static", "h100-80gb", 1, mode="static", layouts=static_layout).node
    legacy = gpu_node(core, namespace, node_names, suffix="plugin")
    static_before = core.read_node(static)

    templates = burst_templates(dra_cluster)
    pods = [held_pod(dra_cluster, f"p{i}", t, dyn) for i, t in enumerate(templates)]
    dra_cluster.template("big-static", request("3g.40gb"))
    dra_cluster.claim_pod("static-big", "big-static", node_selector={"kubernetes.io/hostname": static})
    legacy_pod = mig_pod("legacy", namespace, "3g.40gb", nodeSelector={"kubernetes.io/hostname": legacy})
    core.create_namespaced_pod(namespace, legacy_pod)

    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [legacy], delay=0.3):
        wanted = [f"gpu-0-mig-1g5gb-19-{s}" for s in range(4)]  # GPU 0's slices 0-3 stay for the 4g.20gb
        wait_for("migctl's fences on the DynamicMIG node", lambda: fences_on(dra_cluster, dyn) == wanted, 30)
        outcome = ctl.last_outcome
        assert outcome is not None and dyn in outcome.fences
        burst = [o for o in outcome.fences[dyn].prediction.outcomes if o.claim.startswith(f"{namespace}/p")]
        predicted = [o.names if isinstance(o, Choice) else None for o in burst]  # (the static node's claim left out)
        assert predicted == [
            ("gpu-0-mig-1g5gb-19-4",), ("gpu-0-mig-1g5gb-19-5",), ("gpu-0-mig-4g20gb-5-0",), ("gpu-1-mig-7g40gb-0-0",),
        ]  # fmt: skip
        sent = {reason for what, reason, _ in ctl.events.sent if what == f"Node {dyn}"}
        assert "MigctlFenced" in sent
        time.sleep(SETTLE_S)  # the scheduler's informer has the rules (it cannot say so)

        placed = []
        for pod in pods:
            release_gate(dra_cluster, pod)
            placed.append(dra_cluster.wait_placed(pod, timeout=30))
        assert devices(dyn, placed) == predicted  # the 7g.40gb and the 4g.20gb both got their devices

        wait_for("fences lifted once the burst is served", lambda: fences_on(dra_cluster, dyn) == [], 30)
        assert not (core.read_node(dyn).spec.taints or []), "a DRA node is never tainted as a whole"

        # the device-plugin node: planned and reconfigured through mig-manager, as before
        assert wait_for("legacy pod running", lambda: running_on(core, namespace, "legacy"), timeout=40) == legacy
        wait_for("device-plugin node settled", lambda: settled(core, legacy))
        assert_reconfigured(core, legacy, TARGET_3G)

        # the static-MIG node: frozen, not fenced, not touched
        snapshot_node = next(n for n in ctl.last_outcome.whole.nodes if n.name == static)  # type: ignore[union-attr]
        assert snapshot_node.dra == "static" and "migctl.io/actuation=in-place" in snapshot_node.frozen_reason
        assert fences_on(dra_cluster, static) == []
        after = core.read_node(static)
        assert after.metadata.annotations == static_before.metadata.annotations
        assert after.metadata.labels == static_before.metadata.labels and not after.spec.taints
        assert NO_DEVICES in dra_cluster.wait_unschedulable("static-big")
        assert dra_cluster.pod("static-big")["spec"].get("nodeName") is None
    assert GROUP in core.read_node(dyn).metadata.labels  # the node was this controller's all along


def test_live_plan_shows_the_dra_section_a_snapshot_of_the_same_objects_shows(
    control_plane: ControlPlane, dra_cluster: DraCluster, tmp_path: Path
) -> None:
    """`migctl plan` against the API server reads the DRA kinds too (KubeApi.cluster_objects): its `dra` section
    (the node's mode, the fences `migctl run` would set) is the one a snapshot file of the same objects gives."""
    node = dra_cluster.dra_node("live", "a100-40gb", 2, mode="dynamic").node
    for i, t in enumerate(burst_templates(dra_cluster)):
        held_pod(dra_cluster, f"p{i}", t, node)
    with control_plane.api_client() as api:
        objects = KubeApi(api, attempts=1).cluster_objects(GpuOperatorSettings())
    kinds = {o["kind"] for o in objects}
    assert {"ResourceSlice", "ResourceClaimTemplate", "DeviceClass"} <= kinds, kinds
    snapshot = tmp_path / "snapshot.yaml"
    snapshot.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objects}))

    def plan(*args: str) -> dict[str, Any]:
        res = CliRunner().invoke(cli, ["plan", *args, "-o", "json"])
        assert res.exit_code == 0, res.output
        out: dict[str, Any] = json.loads(res.stdout)["dra"]
        return out

    live = plan("--kubeconfig", str(control_plane.kubeconfig))
    assert live == plan("--snapshot", str(snapshot))
    assert live["nodes"][node] == "dynamic"
    assert live["fences"][node]["add"] == [f"gpu-0-mig-1g5gb-19-{s}" for s in range(4)]


# -- the controller's rights on DeviceTaintRules, with the real authorizer -----------------------------------


def _rule(name: str, node: str, **changes: Any) -> dict[str, Any]:
    body = rule_body(node, node, "gpu-0-mig-1g5gb-19-0", PLACEMENT, FENCE)
    body["metadata"]["name"] = name
    for path, value in changes.items():
        where = body
        *parents, last = path.split(".")
        for p in parents:
            where = where[p]
        if value is None:
            del where[last]
        else:
            where[last] = value
    return body


@pytest.fixture
def helm_bin() -> Path:
    bin_dir, why = find_bin_dir(REPO)
    if bin_dir is None or not (bin_dir / "helm").exists():
        pytest.fail(f"no helm in the test binaries: {why}")  # the cluster tier runs with it: never a quiet skip
    return bin_dir / "helm"


def test_the_controller_may_create_and_delete_only_its_own_nvidia_fences(
    control_plane: ControlPlane, api: client.ApiClient, core: Any, helm_bin: Path
) -> None:
    """The chart's ClusterRole lets the controller read every DRA kind and the GPU Operator's objects, and write
    DeviceTaintRules; its ValidatingAdmissionPolicy narrows the writes: only rules labelled migctl.io/fence-node
    on a device of gpu.nvidia.com, NoSchedule, created or deleted, never updated. An administrator's rule is out
    of reach."""
    spaces = [f"{n}-{time.monotonic_ns() % 10**6}" for n in ("t-rel", "t-op")]
    for ns in spaces:
        core.create_namespace({"metadata": {"name": ns}})
    rel = Release(helm_bin, api, *spaces)
    resource: Any = client.ResourceV1Api(api)
    admin_rule = f"{rel.name}-admins"
    try:
        ctl = rel.sa("controller")
        group = "resource.k8s.io"
        rights = [
            (verb, res, grp, want)
            for verb, res, grp, want in [
                ("list", "resourceslices", group, True), ("watch", "resourceslices", group, True),
                ("get", "resourceclaims", group, True), ("watch", "resourceclaimtemplates", group, True),
                ("list", "deviceclasses", group, True), ("create", "devicetaintrules", group, True),
                ("delete", "devicetaintrules", group, True), ("watch", "devicetaintrules", group, True),
                ("list", "gpuclusters", "nvidia.com", True), ("watch", "clusterpolicies", "nvidia.com", True),
                ("update", "devicetaintrules", group, False), ("patch", "devicetaintrules", group, False),
                ("deletecollection", "devicetaintrules", group, False), ("create", "resourceslices", group, False),
                ("delete", "resourceclaims", group, False), ("update", "deviceclasses", group, False),
                ("patch", "gpuclusters", "nvidia.com", False),
            ]
        ]  # fmt: skip
        wrong = [f"{verb} {res}: {not want}" for verb, res, grp, want in rights if can(api, ctl, verb, res, group=grp)
                 != want]  # fmt: skip
        assert not wrong, wrong

        resource.create_device_taint_rule({
            "metadata": {"name": admin_rule},
            "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0"},
                     "taint": {"key": "maintenance", "effect": "NoSchedule"}},
        })  # fmt: skip
        with as_user(control_plane, ctl) as as_ctl:
            mine: Any = client.ResourceV1Api(as_ctl)
            unlabelled = _rule(f"{rel.name}-x", "n1", **{"metadata.labels": None})
            _until_active(lambda: _denied(lambda: mine.create_device_taint_rule(unlabelled), "fence-node"), "policy")
            own = _rule(f"{rel.name}-own", "n1")
            mine.create_device_taint_rule(own)
            wrong_driver = _rule(f"{rel.name}-y", "n1", **{"spec.deviceSelector.driver": "example.com"})
            no_execute = _rule(f"{rel.name}-z", "n1", **{"spec.taint.effect": "NoExecute"})
            refused = {
                "another driver": _denied(lambda: mine.create_device_taint_rule(wrong_driver), "gpu.nvidia.com"),
                "NoExecute": _denied(lambda: mine.create_device_taint_rule(no_execute), "NoSchedule only"),
                "update its own": _denied(
                    lambda: mine.patch_device_taint_rule(own["metadata"]["name"], {"metadata": {"labels": {"a": "b"}}}),
                    "forbidden",
                ),
                "delete the admin's": _denied(lambda: mine.delete_device_taint_rule(admin_rule), "fence-node"),
            }
            assert not {k: v for k, v in refused.items() if v}, refused
            mine.delete_device_taint_rule(own["metadata"]["name"])
        resource.read_device_taint_rule(admin_rule)  # still there
    finally:
        for name in (admin_rule, f"{rel.name}-own"):
            try:
                resource.delete_device_taint_rule(name)
            except client.ApiException as e:
                if e.status != 404:
                    raise
        rel.delete()
        for ns in spaces:
            core.delete_namespace(ns)
