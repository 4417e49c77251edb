"""The in-place agent's least privilege, proven by the real API server: its RBAC (SubjectAccessReview), its
node-restriction ValidatingAdmissionPolicy (admission of real requests made with a real ServiceAccount token bound to a
pod on one node), and the API server's validation of the rendered DaemonSet (server-side dry run).

Nothing is simulated here: helm renders the chart, the objects are created for real, and every request is the
in-place agent's own, authenticated by its token (see test_deploy.py's bound_token).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from . import test_deploy as deploy
from .controlplane import ControlPlane, find_bin_dir
from .test_deploy import Release, _denied, _until_active, bound_token, can, find, one, render, with_token

IN_PLACE = ["--set", "agent.inPlace.enabled=true"]


@pytest.fixture(scope="module")
def helm() -> Path:
    bin_dir, why = find_bin_dir(deploy.REPO)
    if bin_dir is None or not (bin_dir / "helm").exists():
        pytest.skip(f"no helm: {why}")
    return bin_dir / "helm"


@pytest.fixture
def namespaces(core: client.CoreV1Api) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(f"t-{uuid.uuid4().hex[:8]}")
        core.create_namespace({"metadata": {"name": made[-1]}})
        return made[-1]

    yield make
    for name in made:
        core.delete_namespace(name)


@pytest.fixture
def release(helm: Path, api: client.ApiClient, namespaces: Callable[[], str]) -> Iterator[Release]:
    """The chart's RBAC objects with the in-place agent on, created for real (test_deploy.Release)."""
    rel = Release(helm, api, namespaces(), namespaces(), *IN_PLACE)
    try:
        yield rel
    finally:
        rel.delete()


pytestmark = pytest.mark.cluster

DP = "nvidia.com/device-plugin.config"
STATUS = "migctl.io/in-place-status"


def ann(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"annotations": {key: value}}}


def label(key: str, value: str | None) -> dict[str, Any]:
    return {"metadata": {"labels": {key: value}}}


@pytest.fixture
def two_nodes(core: client.CoreV1Api, release: Release) -> Iterator[tuple[str, str]]:
    own, neighbour = f"{release.name}-ip-a", f"{release.name}-ip-b"
    for n in (own, neighbour):
        core.create_node({"metadata": {
            "name": n,
            "labels": {"migctl.io/actuation": "in-place", DP: "migctl-a", "nvidia.com/mig.config": "all-1g.10gb"},
            "annotations": {"migctl.io/in-place-target": '{"version":"v1","plan":"p1","gpus":{}}',
                            "migctl.io/phase": "in-place-applying"},
        }})  # fmt: skip
    try:
        yield own, neighbour
    finally:
        for n in (own, neighbour):
            core.delete_node(n)


def test_in_place_agent_changes_only_its_own_status_and_device_plugin_label(
    control_plane: ControlPlane, core: client.CoreV1Api, release: Release, two_nodes: tuple[str, str]
) -> None:
    """With the token of an in-place agent pod on node A: it may answer on A (in-place-status), publish A's inventory
    and flip A's device-plugin config between the two named configs. It can change neither node B (its annotations or
    its device-plugin label) nor anything else on A: the controller's target and phase, mig-manager's label, another
    device-plugin config name, the label's removal, taints."""
    own, neighbour = two_nodes
    sa_name = release.sa("agent-in-place").rsplit(":", 1)[1]
    token = bound_token(core, release.ns, sa_name, own)
    with with_token(control_plane, token) as api:
        agent = client.CoreV1Api(api)
        status = ann(STATUS, '{"version":"v1","plan":"p1","state":"applied","message":"","gpus":{}}')
        fresh = itertools.count()  # a new value each time: a no-op patch is never refused
        _until_active(lambda: _denied(lambda: agent.patch_node(neighbour, ann(STATUS, f"{next(fresh)}")), "own node"),
                      "the in-place policy")  # fmt: skip
        agent.patch_node(own, status)
        agent.patch_node(own, ann("migctl.io/gpus", "{}"))
        agent.patch_node(own, label(DP, "migctl-b"))
        agent.patch_node(own, label(DP, "migctl-a"))
        node = core.read_node(own)
        assert node.metadata.labels[DP] == "migctl-a" and '"applied"' in node.metadata.annotations[STATUS]
        assert agent.read_node(own).metadata.name == own  # it reads its target
        wrong = {
            "neighbour's status": _denied(lambda: agent.patch_node(neighbour, status), "own node"),
            "neighbour's device plugin": _denied(
                lambda: agent.patch_node(neighbour, label(DP, "migctl-b")), "own node"
            ),
            "controller's target": _denied(
                lambda: agent.patch_node(own, ann("migctl.io/in-place-target", "{}")), "may only change the annotations"
            ),
            "phase": _denied(lambda: agent.patch_node(own, ann("migctl.io/phase", None)), "only change the annot"),
            "mig-manager's label": _denied(
                lambda: agent.patch_node(own, label("nvidia.com/mig.config", "x")), "may only set the label"
            ),
            "another config name": _denied(lambda: agent.patch_node(own, label(DP, "evil")), "may only set the label"),
            "label removed": _denied(lambda: agent.patch_node(own, label(DP, None)), "may only set the label"),
            "actuation label": _denied(
                lambda: agent.patch_node(own, label("migctl.io/actuation", None)), "may only set the label"
            ),
            "taint": _denied(
                lambda: agent.patch_node(own, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}}),
                "may only change the annotations",
            ),
        }
        assert not {k: v for k, v in wrong.items() if v}, wrong


def test_the_inventory_agent_may_not_answer_for_the_in_place_path(
    control_plane: ControlPlane, core: client.CoreV1Api, release: Release, two_nodes: tuple[str, str]
) -> None:
    """The unprivileged agent's policy is unchanged: it cannot write the in-place status or the device-plugin label,
    even on its own node."""
    own, _ = two_nodes
    token = bound_token(core, release.ns, release.sa("agent").rsplit(":", 1)[1], own)
    with with_token(control_plane, token) as api:
        agent = client.CoreV1Api(api)
        fresh = itertools.count()  # a new value each time: a no-op patch is never refused
        _until_active(lambda: _denied(lambda: agent.patch_node(own, ann(STATUS, f"{next(fresh)}")), "only change"),
                      "the agent policy")  # fmt: skip
        assert _denied(lambda: agent.patch_node(own, label(DP, "migctl-b")), "only change") == ""


def test_in_place_agent_rbac(api: client.ApiClient, release: Release) -> None:
    """It reads and patches Nodes (the policy narrows the patch); it touches no pod, secret or other object."""
    sa = release.sa("agent-in-place")
    assert all(can(api, sa, v, "nodes") for v in ("get", "list", "watch", "patch"))
    denied = [("create", "nodes", ""), ("delete", "nodes", ""), ("update", "nodes/status", ""),
              ("patch", "nodes/status", ""), ("delete", "pods", "default"), ("create", "pods/eviction", "default"),
              ("get", "secrets", "default"), ("patch", "configmaps", "default")]  # fmt: skip
    assert not [d for d in denied if can(api, sa, d[0], d[1], d[2])]


def test_in_place_render_passes_server_side_validation(
    helm: Path, api: client.ApiClient, namespaces: Callable[[], str]
) -> None:
    """The privileged DaemonSet and its policy as the API server validates them (dry run), and the inventory agent
    kept off the in-place nodes."""
    ns, dynamic = namespaces(), DynamicClient(api)
    objs = render(helm, *IN_PLACE, "--set", f"gpuOperator.namespace={ns}", namespace=ns)
    ds = one(objs, "DaemonSet", "-agent-in-place")
    spec = ds["spec"]["template"]["spec"]
    assert spec["hostPID"] is True and spec["nodeSelector"] == {"migctl.io/actuation": "in-place"}
    container = spec["containers"][0]
    assert container["securityContext"]["privileged"] is True
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["pod-resources"]["readOnly"] is True and mounts["dev"]["mountPath"] == "/dev"
    stock = one(objs, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    terms = stock["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expected = {"key": "migctl.io/actuation", "operator": "NotIn", "values": ["in-place"]}
    assert terms == [{"matchExpressions": [expected]}]
    for obj in objs:
        res = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        try:
            dynamic.server_side_apply(res, body=obj, namespace=obj["metadata"].get("namespace"),
                                      field_manager="migctl-test", dry_run="All")  # fmt: skip
        except Exception as e:
            pytest.fail(f"API server rejected {obj['kind']} {obj['metadata']['name']}: {getattr(e, 'body', e)}")
    assert find(objs, "ValidatingAdmissionPolicyBinding", "-agent-in-place-node-restriction")
