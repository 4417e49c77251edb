"""The in-place agent's least privilege on DRA nodes (dra.enabled), proven by the real API server: its RBAC
(SubjectAccessReview) and its plugin-pod ValidatingAdmissionPolicy (admission of real requests made with a real
ServiceAccount token bound to a pod on one node), exercised by the agent's own code (`DraNode` over `KubeApi`).

Nothing is simulated here: helm renders the chart, the objects are created for real, and every request is the
in-place agent's own, authenticated by its token (test_deploy.bound_token). The plugin pods are real pods bound to
nodes no kubelet runs, so a delete leaves them terminating (as on a real node until its kubelet confirms).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from migctl.adapters.kube import KubeApi
from migctl.adapters.kube.errors import ConflictError
from migctl.agent.dra import DraNode
from migctl.config.agent import AgentDraSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.wire.names import NVIDIA_DRA_DRIVER

from . import test_deploy as deploy
from .controlplane import ControlPlane, find_bin_dir
from .test_deploy import Release, _denied, _until_active, bound_token, can, find, with_token

pytestmark = pytest.mark.cluster

LABELS = {"dra-driver-nvidia-gpu-component": "kubelet-plugin", "app.kubernetes.io/name": "dra-driver-nvidia-gpu"}
RESOURCE = "resource.k8s.io"
Core = Any  # client.CoreV1Api: its stubs want model objects, these tests pass the JSON the API takes


@pytest.fixture(scope="module")
def helm() -> Path:
    bin_dir, why = find_bin_dir(deploy.REPO)
    if bin_dir is None or not (bin_dir / "helm").exists():
        pytest.skip(f"no helm: {why}")
    return bin_dir / "helm"


@pytest.fixture
def namespaces(core: Core) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        made.append(f"t-{uuid.uuid4().hex[:8]}")
        core.create_namespace({"metadata": {"name": made[-1]}})
        return made[-1]

    yield make
    for name in made:
        for p in core.list_namespaced_pod(name).items:  # no kubelet confirms: end them outright
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(p.metadata.name, name, grace_period_seconds=0)
        core.delete_namespace(name)


@pytest.fixture
def plugin_ns(namespaces: Callable[[], str]) -> str:
    return namespaces()


def dra_values(plugin_ns: str) -> list[str]:
    return [
        "--set", "agent.inPlace.enabled=true", "--set", "dra.enabled=true",
        "--set", f"dra.pluginNamespace={plugin_ns}",
        "--set", "dra.pluginLabels.app\\.kubernetes\\.io/name=dra-driver-nvidia-gpu",
    ]  # fmt: skip


@pytest.fixture
def release(helm: Path, api: client.ApiClient, namespaces: Callable[[], str], plugin_ns: str) -> Iterator[Release]:
    """The chart's RBAC objects and policies with the in-place agent and DRA on, created for real."""
    rel = Release(helm, api, namespaces(), namespaces(), *dra_values(plugin_ns))
    try:
        yield rel
    finally:
        rel.delete()


@pytest.fixture
def two_nodes(core: Core, release: Release) -> Iterator[tuple[str, str]]:
    own, neighbour = f"{release.name}-dra-a", f"{release.name}-dra-b"
    for n in (own, neighbour):
        core.create_node({"metadata": {"name": n, "labels": {"migctl.io/actuation": "in-place"}}})
    try:
        yield own, neighbour
    finally:
        for n in (own, neighbour):
            core.delete_node(n)


def make_pod(core: Core, namespace: str, name: str, node: str, labels: dict[str, str]) -> Any:
    body = {
        "metadata": {"name": name, "labels": labels},
        "spec": {"nodeName": node, "containers": [{"name": "plugin", "image": "registry.invalid/plugin:test"}]},
    }
    return core.create_namespaced_pod(namespace, body)


def dry_delete(agent: Core, namespace: str, name: str) -> Callable[[], object]:
    """A delete as the agent would send it, in dry-run: admission and RBAC decide, nothing is deleted."""
    return lambda: agent.delete_namespaced_pod(name, namespace, dry_run="All")


def test_the_agent_deletes_only_its_own_nodes_plugin_pod(
    control_plane: ControlPlane, core: Core, release: Release, two_nodes: tuple[str, str], plugin_ns: str
) -> None:
    """With the token of an in-place agent pod on node A: `DraNode.restart_plugin` (the agent's code, over the
    real KubeApi) deletes A's plugin pod, with its uid. The agent can delete neither B's plugin pod, nor a pod on A
    in the plugin's namespace without the plugin's labels, nor a pod with the labels in another namespace; with a
    uid that is not the pod's the API server refuses (409); a token bound to no pod deletes nothing."""
    own, neighbour = two_nodes
    mine = make_pod(core, plugin_ns, "plugin-a", own, LABELS)
    make_pod(core, plugin_ns, "plugin-b", neighbour, LABELS)
    make_pod(core, plugin_ns, "unlabelled-a", own, {"app": "other"})
    make_pod(core, plugin_ns, "half-labelled-a", own, {"dra-driver-nvidia-gpu-component": "kubelet-plugin"})
    make_pod(core, release.ns, "elsewhere-a", own, LABELS)
    sa_name = release.sa("agent-in-place").rsplit(":", 1)[1]
    token = bound_token(core, release.ns, sa_name, own)
    with with_token(control_plane, token) as api:
        agent: Core = client.CoreV1Api(api)
        _until_active(lambda: _denied(dry_delete(agent, plugin_ns, "plugin-b"), "of its own node"), "the DRA policy")
        wrong = {
            "neighbour's plugin pod": _denied(dry_delete(agent, plugin_ns, "plugin-b"), "of its own node"),
            "unlabelled pod, own node": _denied(
                dry_delete(agent, plugin_ns, "unlabelled-a"), "may delete only the DRA kubelet-plugin pods"
            ),
            "one label missing, own node": _denied(
                dry_delete(agent, plugin_ns, "half-labelled-a"), "may delete only the DRA kubelet-plugin pods"
            ),
            "plugin's labels in another namespace": _denied(dry_delete(agent, release.ns, "elsewhere-a"), "forbidden"),
            "a pod made in the plugin namespace": _denied(
                lambda: agent.create_namespaced_pod(
                    plugin_ns,
                    {"metadata": {"name": "x", "labels": LABELS}, "spec": {"nodeName": own, "containers": []}},
                    dry_run="All",
                ),
                "forbidden",
            ),
            "own plugin pod relabelled": _denied(
                lambda: agent.patch_namespaced_pod("plugin-a", plugin_ns, {"metadata": {"labels": {"x": "y"}}}),
                "forbidden",
            ),
            "every plugin pod at once": _denied(
                lambda: agent.delete_collection_namespaced_pod(plugin_ns, dry_run="All"), "forbidden"
            ),
        }
        assert not {k: v for k, v in wrong.items() if v}, wrong

        kube = KubeApi(api, attempts=2, max_wait_s=1.0)  # as `migctl agent` builds it
        settings = AgentDraSettings(enabled=True, plugin_namespace=plugin_ns, plugin_labels=LABELS)
        node = DraNode(kube, own, settings, load_catalog())
        assert [p["metadata"]["name"] for p in node.plugin_pods()] == ["plugin-a"]
        with pytest.raises(ConflictError):  # the uid precondition reaches the server
            kube.delete_pod(plugin_ns, "plugin-a", str(uuid.uuid4()))
        assert node.restart_plugin() == [f"{plugin_ns}/plugin-a"]
        gone = core.read_namespaced_pod("plugin-a", plugin_ns)
        assert gone.metadata.uid == mine.metadata.uid and gone.metadata.deletion_timestamp is not None
        assert node.restart_plugin() == []  # terminating: its successor comes after it, nothing to do
        assert kube.list_node_resource_slices(own, NVIDIA_DRA_DRIVER) == []  # it may read slices and claims
        assert isinstance(kube.list_resource_claims(), list)
    left = {p.metadata.name for p in core.list_namespaced_pod(plugin_ns).items if not p.metadata.deletion_timestamp}
    assert left == {"plugin-b", "unlabelled-a", "half-labelled-a"}
    assert core.read_namespaced_pod("elsewhere-a", release.ns).metadata.deletion_timestamp is None
    unbound = core.create_namespaced_service_account_token(sa_name, release.ns, {"spec": {"audiences": []}})
    with with_token(control_plane, unbound.status.token) as api:
        got = _denied(dry_delete(client.CoreV1Api(api), plugin_ns, "plugin-b"), "(token bound to node '')")
        assert got == "", got


def test_dra_agent_rbac(api: client.ApiClient, release: Release, plugin_ns: str) -> None:
    """It reads ResourceSlices and ResourceClaims and writes none; it lists and deletes pods in the plugin's
    namespace only (the policy narrows the delete), and gets, creates, patches or evicts none."""
    sa = release.sa("agent-in-place")
    allowed = [(v, r, "", RESOURCE) for v in ("get", "list", "watch") for r in ("resourceslices", "resourceclaims")]
    allowed += [("list", "pods", plugin_ns, ""), ("delete", "pods", plugin_ns, "")]
    assert [a for a in allowed if not can(api, sa, a[0], a[1], a[2], group=a[3])] == []
    denied = [(v, r, ns, RESOURCE) for v in ("create", "update", "patch", "delete")
              for r, ns in (("resourceslices", ""), ("resourceclaims", "default"))]  # fmt: skip
    denied += [
        ("create", "devicetaintrules", "", RESOURCE), ("delete", "devicetaintrules", "", RESOURCE),
        ("update", "resourceclaims/status", "default", RESOURCE), ("list", "deviceclasses", "", RESOURCE),
        ("get", "pods", plugin_ns, ""), ("create", "pods", plugin_ns, ""), ("patch", "pods", plugin_ns, ""),
        ("deletecollection", "pods", plugin_ns, ""), ("create", "pods/eviction", plugin_ns, ""),
        ("delete", "pods", "default", ""), ("list", "pods", "default", ""), ("delete", "pods", "", ""),
        ("get", "secrets", plugin_ns, ""),
    ]  # fmt: skip
    assert [d for d in denied if can(api, sa, d[0], d[1], d[2], group=d[3])] == []


def test_without_dra_the_in_place_agent_gets_none_of_it(
    helm: Path, api: client.ApiClient, namespaces: Callable[[], str], plugin_ns: str
) -> None:
    """dra.enabled false (the default): no DRA rights, no pod policy, and no agent.dra in the config."""
    rel = Release(helm, api, namespaces(), namespaces(), "--set", "agent.inPlace.enabled=true")
    try:
        sa = rel.sa("agent-in-place")
        assert not can(api, sa, "list", "resourceslices", group=RESOURCE)
        assert not can(api, sa, "delete", "pods", plugin_ns)
        assert not find(rel.objs, "ValidatingAdmissionPolicy", "-dra-plugin-restart")
        config = next(o for o in rel.objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config"))
        assert "dra" not in config["data"]["config.yaml"]
    finally:
        rel.delete()


def test_the_rendered_config_carries_the_dra_values(helm: Path, plugin_ns: str) -> None:
    """What the chart writes is what the agent reads: `Config` loads it, with the namespace and both labels."""
    import yaml

    from migctl.config import Config

    objs = deploy.render(helm, *dra_values(plugin_ns))
    config = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config"))
    dra = Config.model_validate(yaml.safe_load(config["data"]["config.yaml"])).agent.dra
    assert (dra.enabled, dra.plugin_namespace, dra.plugin_labels) == (True, plugin_ns, LABELS)
    policy = deploy.one(objs, "ValidatingAdmissionPolicy", "-dra-plugin-restart")
    assert policy["spec"]["matchConditions"][0]["expression"].endswith(':migctl-agent-in-place"')


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.agent.dra.enabled=true"], "not config.agent.dra"),
        (["--set", "dra.pluginNamespace=Bad_NS"], "/dra/pluginNamespace"),
        (["--set", "dra.pluginLabels.dra-driver-nvidia-gpu-component=null"], "/dra/pluginLabels"),
        (["--set", "dra.pluginLabels.x=bad value"], "/dra/pluginLabels/x"),
        (["--set", "dra.enabeld=true"], "additional properties 'enabeld'"),
    ],
)
def test_bad_dra_values_are_rejected(helm: Path, args: list[str], message: str) -> None:
    res = deploy.run_helm(helm, "template", "migctl", str(deploy.CHART), "--kube-version", deploy.KUBE_VERSION,
                          "--set", "agent.inPlace.enabled=true", "--set", "dra.enabled=true", *args)  # fmt: skip
    assert res.returncode != 0, f"{args} rendered without error"
    assert message in res.stderr, res.stderr
