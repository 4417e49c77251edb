"""The Helm chart and plain manifests against the real kube-apiserver: lint, render, schema, server-side dry run, RBAC.

What is real here: helm (built by hack/testbin.sh), the kube-apiserver's object validation and defaulting (server-side
apply with dryRun=All), its RBAC authorizer (SubjectAccessReview and impersonated requests as the chart's
ServiceAccounts), and its ValidatingAdmissionPolicy admission. The RBAC objects are created for real (not dry run),
with a release name unique to each test, and removed afterwards.
"""

from __future__ import annotations

import contextlib
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from migctl.config import Config, load_config
from migctl.webhook.configuration import webhook_configuration

from .controlplane import ControlPlane, find_bin_dir

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "migctl"
MANIFESTS = REPO / "deploy" / "manifests" / "migctl.yaml"
KUBE_VERSION = "1.37"
Obj = dict[str, Any]

# Every optional part on, and non-default names, so the templates' other branches render and validate too.
FULL = [
    "--set", "fallback.enabled=true",
    "--set", "webhook.enabled=true",
    "--set", "config.webhook.path=/admit/vram",
    "--set", "config.webhook.opt_out_key=example.com/no-vram-webhook",
    "--set", "config.webhook.opt_out_value=off",
    "--set", "controller.serviceMonitor.enabled=true",
    "--set", "controller.replicas=3",
    "--set", "controller.podDisruptionBudget.minAvailable=2",
    "--set", "agent.runtimeClassName=",
    "--set", "config.controller.metrics_port=9090",
    "--set", "config.controller.configmap_name=my-mig-config",
    "--set", "config.controller.leader_election.lease_name=my-lease",
    "--set", "config.planner.evictions=lower-priority",
    "--set", "config.fallback.unit=512Mi",
    "--set", "config.agent.health_port=9091",
    "--set-json", 'agent.tolerations=[{"key":"dedicated","operator":"Equal","value":"gpu","effect":"NoExecute"}]',
    "--set-json", 'agent.extraTolerations=[{"key":"example.com/pool","operator":"Exists"}]',
    "--set-json", 'controller.extraEnv=[{"name":"MIGCTL_CONTROLLER__DRY_RUN","value":"true"}]',
    "--set", "config.fallback.metrics_port=9092",
    "--set", "config.webhook.metrics_port=9093",
    "--set", "webhook.podDisruptionBudget.minAvailable=1",
    "--set", "controller.serviceMonitor.honorLabels=true",
    "--set-json", 'controller.serviceMonitor.relabelings=[{"targetLabel":"cluster","replacement":"c1"}]',
]  # fmt: skip


# -- helpers ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    bin_dir, why = find_bin_dir(REPO)
    if bin_dir is None or not (bin_dir / "helm").exists():
        pytest.skip(f"no helm: {why}")
    return bin_dir / "helm"


def run_helm(helm: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=60, check=False)


def render(helm: Path, *values: str, release: str = "migctl", namespace: str = "migctl") -> list[Obj]:
    res = run_helm(helm, "template", release, str(CHART), "--namespace", namespace, "--kube-version", KUBE_VERSION,
                   *values)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return [d for d in yaml.safe_load_all(res.stdout) if d]


def find(objs: list[Obj], kind: str, suffix: str = "") -> list[Obj]:
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]


def one(objs: list[Obj], kind: str, suffix: str = "") -> Obj:
    found = find(objs, kind, suffix)
    assert len(found) == 1, f"expected one {kind} *{suffix}, got {[o['metadata']['name'] for o in found]}"
    return found[0]


# -- lint, render, schema -------------------------------------------------------------------------------


@pytest.mark.parametrize("values", [[], FULL], ids=["defaults", "full"])
def test_helm_lint(helm: Path, values: list[str]) -> None:
    res = run_helm(helm, "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, *values)
    assert res.returncode == 0, res.stdout + res.stderr


def test_default_render_has_the_safe_shape(helm: Path) -> None:
    objs = render(helm)
    kinds = sorted({o["kind"] for o in objs})
    assert kinds == sorted(
        ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "Deployment", "PodDisruptionBudget", "Role",
         "RoleBinding", "Service", "ServiceAccount", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    )  # fmt: skip
    assert {p["metadata"]["name"] for p in find(objs, "ValidatingAdmissionPolicy")} == {
        "migctl-agent-node-restriction", "migctl-controller-fences"
    }  # fmt: skip
    assert not find(objs, "Deployment", "-fallback"), "the fallback is off by default"

    ctl = one(objs, "Deployment", "-controller")["spec"]
    assert ctl["replicas"] == 2
    pod = ctl["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = pod["containers"][0]
    assert c["args"] == ["run", "--config", "/etc/migctl/config.yaml"]
    assert c["securityContext"] == {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "privileged": False,
        "capabilities": {"drop": ["ALL"]},
    }  # fmt: skip
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["resources"]["requests"] and c["resources"]["limits"]
    assert one(objs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1

    ds = one(objs, "DaemonSet", "-agent")["spec"]["template"]["spec"]
    assert ds["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert ds["runtimeClassName"] == "nvidia"
    assert ds["priorityClassName"] == "system-node-critical"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in ds["tolerations"]
    assert {s["metadata"]["name"] for s in find(objs, "Service")} == {"migctl-metrics", "migctl-agent-metrics"}
    agent = ds["containers"][0]
    assert agent["securityContext"]["privileged"] is False
    assert agent["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in agent["env"]}
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all"
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "nvidia.com/gpu" not in str(agent["resources"]), "the agent must not take a GPU from workloads"


def test_full_render_uses_the_values(helm: Path) -> None:
    objs = render(helm, *FULL)
    assert one(objs, "Deployment", "-controller")["spec"]["replicas"] == 3
    c = one(objs, "Deployment", "-controller")["spec"]["template"]["spec"]["containers"][0]
    assert c["ports"][0]["containerPort"] == 9090
    assert one(objs, "Service", "migctl-metrics")["spec"]["ports"][0]["port"] == 9090
    assert one(objs, "Service", "-fallback-metrics")["spec"]["ports"][0]["port"] == 9092
    assert one(objs, "Service", "-webhook-metrics")["spec"]["ports"][0]["port"] == 9093
    assert one(objs, "PodDisruptionBudget", "-webhook")["spec"]["minAvailable"] == 1
    tolerations = one(objs, "DaemonSet")["spec"]["template"]["spec"]["tolerations"]
    assert [t["key"] for t in tolerations] == ["dedicated", "example.com/pool"]  # a replaced list, plus the extra
    assert one(objs, "ServiceMonitor")["spec"]["endpoints"][0]["port"] == "metrics"
    fb = one(objs, "Deployment", "-fallback")["spec"]
    assert fb["replicas"] == 1 and fb["strategy"] == {"type": "Recreate"}
    assert "runtimeClassName" not in one(objs, "DaemonSet")["spec"]["template"]["spec"]
    rules = [r for role in find(objs, "Role") for r in role["rules"]]
    assert {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["my-mig-config"],
            "verbs": ["get", "list", "watch", "update"]} in rules  # fmt: skip
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["my-lease"],
            "verbs": ["get", "update"]} in rules  # fmt: skip
    assert {p["metadata"]["name"] for p in find(objs, "ValidatingAdmissionPolicy")} == {
        "migctl-agent-node-restriction", "migctl-fallback-status-restriction", "migctl-controller-fences"
    }  # fmt: skip


WEBHOOK_CONFIGS = {
    "defaults": ["--set", "webhook.enabled=true"],
    "renamed": [
        "--set", "webhook.enabled=true",
        "--set", "config.webhook.path=/admit/vram",
        "--set", "config.webhook.opt_out_key=example.com/no-vram-webhook",
        "--set", "config.webhook.opt_out_value=off",
        "--set", "config.webhook.failure_policy=Fail",
        "--set", "config.webhook.timeout_s=9",
        "--set", "config.webhook.configuration_name=vram-hook",
        "--set", "config.planner.vram_resource=example.com/gpu-memory",
    ],
    "queue-gate": ["--set", "webhook.enabled=true", "--set", "config.controller.queue_gate=true"],
}  # fmt: skip


@pytest.mark.parametrize("values", WEBHOOK_CONFIGS.values(), ids=WEBHOOK_CONFIGS.keys())
def test_chart_webhook_configuration_is_the_one_migctl_expects(helm: Path, tmp_path: Path, values: list[str]) -> None:
    """The chart's MutatingWebhookConfiguration is exactly migctl.webhook.configuration's for the rendered config
    (path, opt-out label, VRAM resource in matchConditions, failure policy, timeout), plus the chart's own
    namespace exclusions; and the Deployment serves that path from that config."""
    objs = render(helm, *values, namespace="ops")
    path = tmp_path / "config.yaml"
    path.write_text(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    cfg = load_config(path, environ={})
    rendered = one(objs, "MutatingWebhookConfiguration")
    assert rendered["metadata"]["name"] == cfg.webhook.configuration_name
    service = {"name": "migctl-webhook", "namespace": "ops", "path": cfg.webhook.path, "port": 443}
    expected = webhook_configuration(
        cfg.webhook.configuration_name,
        {"service": service},
        cfg.webhook,
        extra_namespace_expressions=[
            {"key": "kubernetes.io/metadata.name", "operator": "NotIn", "values": ["ops", "kube-system"]}
        ],
        planner=cfg.planner,
        queue_gate=cfg.controller.queue_gate,
    )
    assert rendered["webhooks"] == expected["webhooks"]
    assert ("nvidia.com/mig-" in str(rendered["webhooks"])) == ("config.controller.queue_gate=true" in values)
    if "config.webhook.path=/admit/vram" in values:  # the non-default values really arrived
        assert cfg.webhook.path == "/admit/vram" and "example.com/gpu-memory" in str(rendered["webhooks"])
    c = one(objs, "Deployment", "-webhook")["spec"]["template"]["spec"]["containers"][0]
    assert c["args"] == ["webhook", "--config", "/etc/migctl/config.yaml"]  # the process reads the same path


@pytest.mark.parametrize("values", [[], FULL], ids=["defaults", "full"])
def test_rendered_config_loads_in_migctl(helm: Path, tmp_path: Path, values: list[str]) -> None:
    """The one config file the chart renders is what migctl's loader accepts, with the chart's namespace defaults,
    and every component mounts it at the path its --config names."""
    objs = render(helm, *values, namespace="ops")
    path = tmp_path / "config.yaml"
    path.write_text(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    cfg = load_config(path, environ={})
    assert cfg.controller.configmap_namespace == "gpu-operator"
    assert cfg.gpu_operator.configmap_namespace == "gpu-operator"
    assert cfg.controller.leader_election.lease_namespace == "ops"
    assert cfg.controller.leader_election.enabled is True
    assert cfg.agent.health_port == (9091 if values else 8081)
    assert cfg.fallback.unit == ("512Mi" if values else "1")
    for workload in [*find(objs, "Deployment"), *find(objs, "DaemonSet")]:
        pod = workload["spec"]["template"]["spec"]
        c = pod["containers"][0]
        assert c["args"][1:] == ["--config", "/etc/migctl/config.yaml"], workload["metadata"]["name"]
        mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
        assert mount["mountPath"] == "/etc/migctl"
        vol = next(v for v in pod["volumes"] if v["name"] == "config")
        assert vol["configMap"]["items"] == [{"key": "config.yaml", "path": "config.yaml"}]


def test_values_yaml_config_defaults_match_the_model() -> None:
    """values.yaml spells out some Config defaults for readability; they must be the model's defaults."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    model = Config().model_dump(mode="json")

    def walk(v: Any, m: Any, path: str) -> None:
        if isinstance(v, dict):
            for k, sub in v.items():
                assert k in m, f"values.yaml config.{path}{k} is not a Config field"
                walk(sub, m[k], f"{path}{k}.")
        else:
            assert v == m, f"values.yaml config.{path.rstrip('.')} = {v!r}, but the model's default is {m!r}"

    walk(values["config"], model, "")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "config.controller.max_concurent_nodes=2"], "additional properties 'max_concurent_nodes'"),
        (["--set", "config.controller.max_concurrent_nodes=0"], "/config/controller/max_concurrent_nodes"),
        (["--set", "config.planner.evictions=all"], "/config/planner/evictions"),
        (["--set", "config.controller.log_level=verbose"], "/config/controller/log_level"),
        (["--set", "controller.replicas=-1"], "/controller/replicas"),
        (["--set", "controller.replicas=two"], "/controller/replicas"),
        (["--set", "image.pullPolicy=Sometimes"], "/image/pullPolicy"),
        (["--set", "config.agent.interval_seconds=-1"], "/config/agent/interval_seconds"),
        (["--set", "agent.nodeSelecter.x=y"], "additional properties 'nodeSelecter'"),
        (["--set", "config.fallback.resource=1"], "/config/fallback/resource"),
        (["--set", "gpuOperator.namespace=GPU_Operator"], "/gpuOperator/namespace"),
        (["--set", "controller.serviceMonitor.interval=often"], "/controller/serviceMonitor/interval"),
        (["--set", "webhook.enabled=yes"], "/webhook/enabled"),
        (["--set", "bogus=1"], "additional properties 'bogus'"),
        # Template-level guards (not expressible in JSON Schema).
        (["--set", "config.controller.leader_election.enabled=false"], "needs config.controller.leader_election"),
        (["--set", "config.controller.metrics_port=0"], "metrics_port must be a fixed port"),
        (["--set", "fallback.enabled=true", "--set", "config.fallback.metrics_port=0"], "fallback.metrics_port must"),
        (["--set", "webhook.enabled=true", "--set", "config.webhook.metrics_port=8443"], "must differ from"),
        (["--set", "controller.prometheusRule.disabled.MigctlTypo=true"], "additional properties 'MigctlTypo'"),
        (["--set", "agent.extraTolerations=none"], "/agent/extraTolerations"),
        (["--set", "controller.serviceMonitor.honorLabels=yes"], "/controller/serviceMonitor/honorLabels"),
    ],
)
def test_invalid_values_are_rejected(helm: Path, args: list[str], message: str) -> None:
    res = run_helm(helm, "template", "migctl", str(CHART), "--kube-version", KUBE_VERSION, *args)
    assert res.returncode != 0, f"{args} rendered without error"
    assert message in res.stderr, res.stderr


def test_single_replica_may_turn_leader_election_off(helm: Path) -> None:
    objs = render(helm, "--set", "controller.replicas=1", "--set", "config.controller.leader_election.enabled=false")
    assert not find(objs, "Role", "-leader-election"), "no Lease rights without leader election"


def test_plain_manifests_match_the_chart(helm: Path) -> None:
    """deploy/manifests/migctl.yaml is exactly the chart with default values (hack/render-manifests.sh)."""
    res = subprocess.run(
        [str(REPO / "hack" / "render-manifests.sh"), "--check"],
        capture_output=True, text=True, timeout=60, check=False, env={"HELM": str(helm), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    committed = [d for d in yaml.safe_load_all(MANIFESTS.read_text()) if d]
    assert committed == render(helm)


# -- the real API server ----------------------------------------------------------------------------------


@pytest.fixture
def dynamic(api: client.ApiClient) -> DynamicClient:
    return DynamicClient(api)


@pytest.fixture
def make_namespace(core: client.CoreV1Api) -> Iterator[Callable[[], str]]:
    made: list[str] = []

    def make() -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        core.create_namespace({"metadata": {"name": name}})
        made.append(name)
        return name

    yield make
    for name in made:
        core.delete_namespace(name)


@pytest.mark.parametrize("values", [[], FULL], ids=["defaults", "full"])
def test_server_side_dry_run_of_every_object(
    helm: Path, dynamic: DynamicClient, make_namespace: Callable[[], str], values: list[str]
) -> None:
    """kube-apiserver validates every rendered object (schemas, defaulting, RBAC escalation checks, CEL compilation
    of the ValidatingAdmissionPolicy) without persisting anything."""
    release_ns, operator_ns = make_namespace(), make_namespace()
    release = f"m{uuid.uuid4().hex[:6]}"
    objs = render(helm, *values, "--set", f"gpuOperator.namespace={operator_ns}", release=release,
                  namespace=release_ns)  # fmt: skip
    applied, skipped = [], []
    for obj in objs:
        if obj["apiVersion"].startswith("monitoring.coreos.com/"):
            # No prometheus-operator CRDs in the test API server; the template is checked in test_full_render.
            skipped.append(obj["kind"])
            continue
        res = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        ns = obj["metadata"].get("namespace")
        assert (ns is not None) == res.namespaced, f"{obj['kind']} {obj['metadata']['name']}: namespace {ns!r}"
        try:
            dynamic.server_side_apply(res, body=obj, namespace=ns, field_manager="migctl-test", dry_run="All")
        except Exception as e:  # report which object the API server refused and why
            pytest.fail(f"API server rejected {obj['kind']} {obj['metadata']['name']}: {getattr(e, 'body', e)}")
        applied.append(obj["kind"])
    assert "Deployment" in applied and "DaemonSet" in applied and "ClusterRole" in applied
    assert skipped == (["ServiceMonitor"] if values else [])
    # Dry run persisted nothing.
    assert not dynamic.resources.get(api_version="apps/v1", kind="Deployment").get(namespace=release_ns).items


# -- RBAC with the real authorizer ----------------------------------------------------------------------


class Release:
    """The chart's ServiceAccounts and RBAC objects, created for real under a unique release name."""

    def __init__(self, helm: Path, api: client.ApiClient, release_ns: str, operator_ns: str, *values: str) -> None:
        self.api, self.ns, self.operator_ns = api, release_ns, operator_ns
        self.name = f"m{uuid.uuid4().hex[:6]}"
        self.objs = render(helm, "--set", f"gpuOperator.namespace={operator_ns}", *values, release=self.name,
                           namespace=release_ns)  # fmt: skip
        self.dynamic = DynamicClient(api)
        self.created: list[tuple[Any, str, str | None]] = []
        keep = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
                "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")  # fmt: skip
        for obj in self.objs:
            if obj["kind"] in keep:
                res = self.dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
                ns = obj["metadata"].get("namespace")
                res.create(body=obj, namespace=ns)
                self.created.append((res, obj["metadata"]["name"], ns))

    def sa(self, component: str) -> str:
        """The user name of the component's ServiceAccount (that component's SA need not be rendered)."""
        return f"system:serviceaccount:{self.ns}:{self.name}-migctl-{component}"

    def delete(self) -> None:
        for res, name, ns in reversed(self.created):
            with contextlib.suppress(Exception):  # best-effort cleanup of a throw-away release
                res.delete(name=name, namespace=ns)


def can(api: client.ApiClient, user: str, verb: str, resource: str, namespace: str = "", name: str = "",
        group: str = "") -> bool:  # fmt: skip
    """The real authorizer's answer for `user` (a ServiceAccount, with its groups) via SubjectAccessReview."""
    resource, _, sub = resource.partition("/")
    ns_of_sa = user.split(":")[2]
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=user,
            groups=["system:serviceaccounts", f"system:serviceaccounts:{ns_of_sa}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                verb=verb, resource=resource, subresource=sub or None, namespace=namespace or None,
                name=name or None, group=group,
            ),
        )
    )  # fmt: skip
    out = client.AuthorizationV1Api(api).create_subject_access_review(review)
    return bool(out.status.allowed)


@pytest.fixture
def release(
    helm: Path, api: client.ApiClient, make_namespace: Callable[[], str], request: pytest.FixtureRequest
) -> Iterator[Release]:
    values: list[str] = getattr(request, "param", [])
    rel = Release(helm, api, make_namespace(), make_namespace(), *values)
    try:
        yield rel
    finally:
        rel.delete()


ALL_ON = ["--set", "fallback.enabled=true", "--set", "webhook.enabled=true"]


@pytest.mark.parametrize("release", [ALL_ON], indirect=True, ids=["all-components"])
def test_rbac_matrix(api: client.ApiClient, release: Release) -> None:
    """Each component can do exactly what its code calls, and not the dangerous neighbours of it.

    What RBAC cannot express is enforced by the chart's ValidatingAdmissionPolicies and tested through admission:
    the agent's own node (test_agent_changes_only_its_own_node_with_a_real_bound_token: another node is denied),
    the fallback's status writes (test_fallback_runs_on_its_rights_and_can_change_nothing_else), and the webhook's
    configuration per TLS mode (test_webhook_updates_its_configuration_only_in_self_signed_mode)."""
    ns, op = release.ns, release.operator_ns
    other = "kube-system"
    ctl, agent, fb, wh = (release.sa(c) for c in ("controller", "agent", "fallback", "webhook"))
    C, L = "migctl-mig-parted-config", "default-mig-parted-config"  # noqa: N806
    lease = ("coordination.k8s.io", "leases")
    ADM = "admissionregistration.k8s.io"  # noqa: N806
    # (user, verb, resource, namespace, name, group, expected)
    matrix: list[tuple[str, str, str, str, str, str, bool]] = [
        # controller: informers
        (ctl, "list", "pods", "", "", "", True),
        (ctl, "watch", "pods", "", "", "", True),
        (ctl, "list", "nodes", "", "", "", True),
        (ctl, "watch", "nodes", "", "", "", True),
        (ctl, "get", "nodes", "", "n1", "", True),
        (ctl, "watch", "namespaces", "", "", "", True),
        # controller: writes
        (ctl, "patch", "nodes", "", "n1", "", True),
        (ctl, "create", "pods/eviction", "team-a", "p1", "", True),
        (ctl, "create", "events", "team-a", "", "", True),
        (ctl, "create", "events", "default", "", "", True),
        (ctl, "get", "pods", "team-a", "p1", "", True),  # the queue gate: read, then lift with a JSON patch
        (ctl, "patch", "pods", "team-a", "p1", "", True),
        # controller: its ConfigMap (by name, in the operator namespace) and the operator's (read only)
        (ctl, "get", "configmaps", op, C, "", True),
        (ctl, "list", "configmaps", op, C, "", True),
        (ctl, "watch", "configmaps", op, C, "", True),
        (ctl, "update", "configmaps", op, C, "", True),
        (ctl, "create", "configmaps", op, "", "", True),
        (ctl, "get", "configmaps", op, L, "", True),
        (ctl, "watch", "configmaps", op, L, "", True),
        # controller: its Lease
        (ctl, "get", lease[1], ns, "migctl", lease[0], True),
        (ctl, "update", lease[1], ns, "migctl", lease[0], True),
        (ctl, "create", lease[1], ns, "", lease[0], True),
        # controller: must not
        (ctl, "get", "secrets", ns, "x", "", False),
        (ctl, "list", "secrets", "", "", "", False),
        (ctl, "delete", "pods", "team-a", "p1", "", False),
        (ctl, "deletecollection", "pods", "team-a", "", "", False),
        (ctl, "create", "pods", "team-a", "", "", False),
        (ctl, "update", "nodes", "", "n1", "", False),
        (ctl, "delete", "nodes", "", "n1", "", False),
        (ctl, "patch", "nodes/status", "", "n1", "", False),
        (ctl, "create", "pods/binding", "team-a", "p1", "", False),
        (ctl, "update", "configmaps", op, L, "", False),  # the operator's ConfigMap: read only
        (ctl, "update", "configmaps", op, "some-other", "", False),
        (ctl, "list", "configmaps", op, "", "", False),  # only with the metadata.name field selector
        (ctl, "delete", "configmaps", op, C, "", False),
        (ctl, "update", "configmaps", other, C, "", False),
        (ctl, "create", "configmaps", other, "", "", False),
        (ctl, "create", "configmaps", ns, "", "", False),
        (ctl, "get", "configmaps", other, C, "", False),
        (ctl, "update", lease[1], ns, "other-lease", lease[0], False),
        (ctl, "update", lease[1], other, "migctl", lease[0], False),
        (ctl, "delete", lease[1], ns, "migctl", lease[0], False),
        # agent: one verb on nodes
        (agent, "patch", "nodes", "", "gpu-1", "", True),
        (agent, "get", "nodes", "", "gpu-1", "", False),
        (agent, "update", "nodes", "", "gpu-1", "", False),
        (agent, "delete", "nodes", "", "gpu-1", "", False),
        (agent, "patch", "nodes/status", "", "gpu-1", "", False),
        (agent, "get", "secrets", ns, "x", "", False),
        (agent, "list", "pods", "", "", "", False),
        (agent, "get", "pods", ns, "p", "", False),
        (agent, "create", "pods/eviction", ns, "p", "", False),
        (agent, "update", "configmaps", op, C, "", False),
        # fallback: capacity on node status, annotate + bind + report pods
        (fb, "list", "nodes", "", "", "", True),
        (fb, "watch", "pods", "", "", "", True),
        (fb, "patch", "nodes/status", "", "n1", "", True),
        (fb, "create", "pods/binding", "team-a", "p1", "", True),
        (fb, "patch", "pods/status", "team-a", "p1", "", True),
        (fb, "create", "events", "team-a", "", "", True),
        (fb, "patch", "pods", "team-a", "p1", "", False),  # the GPU travels in the Binding's annotations
        (fb, "update", "pods", "team-a", "p1", "", False),
        (fb, "delete", "pods", "team-a", "p1", "", False),
        (fb, "create", "pods/eviction", "team-a", "p1", "", False),
        (fb, "patch", "nodes", "", "n1", "", False),
        (fb, "get", "secrets", "team-a", "x", "", False),
        (fb, "update", "configmaps", op, C, "", False),
        (fb, "update", lease[1], ns, "migctl", lease[0], False),
        # webhook: its view of the cluster, its own MutatingWebhookConfiguration and TLS Secret (config.webhook names)
        (wh, "list", "nodes", "", "", "", True),
        (wh, "list", "pods", "", "", "", True),
        (wh, "get", "pods", "team-a", "p1", "", True),
        (wh, "list", "namespaces", "", "", "", True),
        (wh, "create", "events", "team-a", "", "", True),
        (wh, "get", "configmaps", op, L, "", True),
        (wh, "get", "mutatingwebhookconfigurations", "", "migctl-webhook", ADM, True),
        (wh, "update", "mutatingwebhookconfigurations", "", "migctl-webhook", ADM, True),
        (wh, "update", "mutatingwebhookconfigurations", "", "someone-elses", ADM, False),
        (wh, "create", "mutatingwebhookconfigurations", "", "", ADM, False),
        (wh, "delete", "mutatingwebhookconfigurations", "", "migctl-webhook", ADM, False),
        (wh, "update", "validatingwebhookconfigurations", "", "migctl-webhook", ADM, False),
        (wh, "get", "secrets", ns, "migctl-webhook-tls", "", True),
        (wh, "update", "secrets", ns, "migctl-webhook-tls", "", True),
        (wh, "create", "secrets", ns, "", "", True),
        (wh, "get", "secrets", ns, "other", "", False),
        (wh, "list", "secrets", ns, "", "", False),
        (wh, "get", "secrets", other, "migctl-webhook-tls", "", False),
        (wh, "create", "secrets", other, "", "", False),
        (wh, "patch", "pods", "team-a", "p1", "", False),
        (wh, "get", lease[1], ns, "migctl", lease[0], True),  # is the controller alive (the queue gate)?
        (wh, "update", lease[1], ns, "migctl", lease[0], False),
        (wh, "get", lease[1], ns, "other-lease", lease[0], False),
        (wh, "list", lease[1], ns, "", lease[0], False),
        (wh, "update", "configmaps", op, L, "", False),
        (wh, "patch", "nodes", "", "n1", "", False),
    ]  # fmt: skip
    wrong = [
        f"{'CAN' if not want else 'CANNOT'} {user.rsplit('-', 1)[-1]}: {verb} {res}"
        f"{' ns=' + nsx if nsx else ''}{' name=' + name if name else ''}"
        for user, verb, res, nsx, name, group, want in matrix
        if can(api, user, verb, res, nsx, name, group) != want
    ]
    assert not wrong, "RBAC differs from the intended matrix:\n" + "\n".join(wrong)


def test_rbac_without_optional_components_grants_them_nothing(api: client.ApiClient, release: Release) -> None:
    assert {o["metadata"]["name"] for o in find(release.objs, "ServiceAccount")} == {
        f"{release.name}-migctl-controller",
        f"{release.name}-migctl-agent",
    }
    assert not find(release.objs, "ServiceAccount", "-fallback")
    assert not find(release.objs, "ServiceAccount", "-webhook")
    assert not can(api, release.sa("fallback"), "create", "pods/binding", "team-a", "p1")
    assert can(api, release.sa("controller"), "patch", "nodes", "", "n1")


def as_user(control_plane: ControlPlane, user: str, extra: dict[str, str] | None = None) -> client.ApiClient:
    """An ApiClient whose requests the API server handles as `user` (admin impersonation)."""
    api = control_plane.api_client()
    api.set_default_header("Impersonate-User", user)
    for key, value in (extra or {}).items():
        api.set_default_header(f"Impersonate-Extra-{key.replace('/', '%2F')}", value)
    return api


def test_controller_configmap_rights_work_for_real_requests(
    control_plane: ControlPlane, core: client.CoreV1Api, release: Release
) -> None:
    """The informer's name-selected list/watch, create, replace of migctl's ConfigMap succeed as the controller;
    the GPU Operator's ConfigMap stays read-only; an unselected list and Secrets are refused."""
    op, name = release.operator_ns, "migctl-mig-parted-config"
    core.create_namespaced_config_map(op, {"metadata": {"name": "default-mig-parted-config"}, "data": {"a": "1"}})
    with as_user(control_plane, release.sa("controller")) as api:
        ctl = client.CoreV1Api(api)
        ctl.create_namespaced_config_map(op, {"metadata": {"name": name}, "data": {"config.yaml": "version: v1\n"}})
        listed = ctl.list_namespaced_config_map(op, field_selector=f"metadata.name={name}")
        assert [i.metadata.name for i in listed.items] == [name]
        cm = ctl.read_namespaced_config_map(name, op)
        cm.data = {"config.yaml": "version: v1\nmig-configs: {}\n"}
        ctl.replace_namespaced_config_map(name, op, cm)
        base = ctl.read_namespaced_config_map("default-mig-parted-config", op)
        for attempt, call in {
            "list without a name selector": lambda: ctl.list_namespaced_config_map(op),
            "replace the operator's ConfigMap": lambda: ctl.replace_namespaced_config_map(
                "default-mig-parted-config", op, base
            ),
            "delete its own ConfigMap": lambda: ctl.delete_namespaced_config_map(name, op),
            "list Secrets": lambda: ctl.list_namespaced_secret(op),
            "create a ConfigMap elsewhere": lambda: ctl.create_namespaced_config_map(
                release.ns, {"metadata": {"name": name}}
            ),
        }.items():
            with pytest.raises(client.ApiException) as exc:
                call()
            assert exc.value.status == 403, f"{attempt}: {exc.value.status}"


def _denied(call: Callable[[], object], why: str) -> str:
    """'' when the API server refused the call (403 or 422, message containing `why`); else what happened."""
    try:
        call()
    except client.ApiException as e:
        return "" if e.status in (403, 422) and why in (e.body or "") else f"refused with {e.status}: {e.body}"
    return "allowed"


def _until_active(probe: Callable[[], str], what: str) -> None:
    """A new ValidatingAdmissionPolicy takes effect once the API server's informer has it: retry for a while."""
    deadline = time.monotonic() + 20
    while (got := probe()) != "":
        assert time.monotonic() < deadline, f"{what} never took effect: {got}"
        time.sleep(0.2)


def bound_token(core: client.CoreV1Api, namespace: str, sa_name: str, node: str) -> str:
    """A real ServiceAccount token bound to a pod on `node`, as the kubelet mounts for the agent's pod.

    The API server then puts the pod's node into the token and, when it authenticates a request with it, into
    userInfo.extra["authentication.kubernetes.io/node-name"]: nothing is impersonated here.
    """
    pod = core.create_namespaced_pod(
        namespace,
        {
            "metadata": {"name": f"agent-{uuid.uuid4().hex[:6]}"},
            "spec": {
                "serviceAccountName": sa_name,
                "automountServiceAccountToken": False,
                "nodeName": node,
                "containers": [{"name": "agent", "image": "registry.invalid/migctl:test"}],
            },
        },
    )
    request = {
        "spec": {
            "audiences": [],
            "expirationSeconds": 3600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod.metadata.uid},
        }
    }
    out = core.create_namespaced_service_account_token(sa_name, namespace, request)
    return str(out.status.token)


def with_token(control_plane: ControlPlane, token: str) -> client.ApiClient:
    """An ApiClient that authenticates with `token` alone (the admin client certificate dropped)."""
    api = control_plane.api_client()
    cfg = api.configuration
    cfg.cert_file = cfg.key_file = None
    cfg.api_key = {"authorization": f"Bearer {token}"}
    api.rest_client = type(api.rest_client)(cfg)
    return api


def test_agent_changes_only_its_own_node_with_a_real_bound_token(
    control_plane: ControlPlane, core: client.CoreV1Api, release: Release
) -> None:
    """Default values: the node-restriction policy is rendered and bound. With the token the API server issues for
    an agent pod on node A, the agent may set migctl.io/gpus on A, and nothing else: not on node B, not a label, a
    taint, migctl's phase annotations or any other annotation. A token bound to no pod changes no node."""
    assert find(release.objs, "ValidatingAdmissionPolicyBinding", "-agent-node-restriction")
    own, neighbour = f"{release.name}-gpu-a", f"{release.name}-gpu-b"
    for n in (own, neighbour):
        core.create_node({"metadata": {"name": n, "labels": {"pool": "gpu"}, "annotations": {"migctl.io/phase": "x"}}})
    sa_name = release.sa("agent").rsplit(":", 1)[1]
    try:
        token = bound_token(core, release.ns, sa_name, own)
        with with_token(control_plane, token) as api:
            who = client.AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                              "kind": "SelfSubjectReview"})  # fmt: skip
            assert who.status.user_info.username == release.sa("agent")
            assert who.status.user_info.extra["authentication.kubernetes.io/node-name"] == [own]
            agent = client.CoreV1Api(api)
            gpus = {"metadata": {"annotations": {"migctl.io/gpus": "{}"}}}
            _until_active(lambda: _denied(lambda: agent.patch_node(neighbour, gpus), "own node"), "the agent policy")
            # the real publisher, as the agent runs it, on its own node
            from migctl.adapters.kube import KubeApi
            from migctl.agent.publisher import Publisher, PublishError
            from migctl.core.model.inventory import Inventory

            inventory = Inventory(gpus=())
            as_agent = KubeApi(api, attempts=5, max_wait_s=10.0)  # as `migctl agent` builds it
            assert Publisher(as_agent, own).publish(inventory)
            assert core.read_node(own).metadata.annotations["migctl.io/gpus"] == inventory.to_annotation()
            wrong = {
                "label": _denied(lambda: agent.patch_node(own, {"metadata": {"labels": {"pool": "x"}}}), "only change"),
                "phase annotation": _denied(
                    lambda: agent.patch_node(own, {"metadata": {"annotations": {"migctl.io/phase": "done"}}}),
                    "only change",
                ),
                "removed annotation": _denied(
                    lambda: agent.patch_node(own, {"metadata": {"annotations": {"migctl.io/phase": None}}}),
                    "only change",
                ),
                "taint": _denied(
                    lambda: agent.patch_node(own, {"spec": {"taints": [{"key": "evil", "effect": "NoExecute"}]}}),
                    "only change",
                ),
                "cordon": _denied(lambda: agent.patch_node(own, {"spec": {"unschedulable": True}}), "only change"),
                "finalizer": _denied(
                    lambda: agent.patch_node(own, {"metadata": {"finalizers": ["example.com/keep"]}}), "only change"
                ),
                "neighbour": _denied(lambda: agent.patch_node(neighbour, gpus), "own node"),
                "create a node by server-side apply": _denied(  # RBAC: applying a missing object needs create
                    lambda: agent.patch_node(
                        f"{release.name}-made-up",
                        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": f"{release.name}-made-up"}},
                        field_manager="agent",
                        _content_type="application/apply-patch+yaml",
                    ),
                    "forbidden",
                ),
            }
            assert not {k: v for k, v in wrong.items() if v}, wrong
            with pytest.raises(PublishError, match="node-restriction policy refused the write"):
                Publisher(as_agent, neighbour).publish(inventory)  # a wrong NODE_NAME: told what to fix
        # a token bound to no pod carries no node: it changes no node at all
        unbound = core.create_namespaced_service_account_token(sa_name, release.ns, {"spec": {"audiences": []}})
        with with_token(control_plane, unbound.status.token) as api:
            got = _denied(lambda: client.CoreV1Api(api).patch_node(own, gpus), "own node (token bound to node '')")
            assert got == "", got
    finally:
        for n in (own, neighbour):
            core.delete_node(n)


@pytest.mark.parametrize("release", [["--set", "agent.nodeRestriction.enabled=false"]], indirect=True,
                         ids=["no-node-restriction"])  # fmt: skip
def test_node_restriction_can_be_turned_off(release: Release) -> None:
    assert not find(release.objs, "ValidatingAdmissionPolicy", "-agent-node-restriction")


FALLBACK = ["--set", "fallback.enabled=true"]


@pytest.mark.parametrize("release", [FALLBACK], indirect=True, ids=["fallback"])
def test_fallback_runs_on_its_rights_and_can_change_nothing_else(
    control_plane: ControlPlane, core: client.CoreV1Api, release: Release
) -> None:
    """The real FallbackScheduler, authenticated as the chart's fallback ServiceAccount: it advertises VRAM, binds a
    pod with its GPU annotations (no pod patch), reports an unplaceable one. Pod patches, node relabelling, forged
    node conditions, other capacity, pod IPs and PodScheduled on other schedulers' pods are refused."""
    from migctl.adapters.node_status import capacity_patch
    from migctl.core.hardware.catalog import load_catalog
    from migctl.fallback.scheduler import FallbackScheduler

    from .test_fallback_scheduler import t4_node, vram_pod

    node, group, ns = f"{release.name}-t4", release.name, release.ns
    t4_node(core, node, group, gpus=1)
    try:
        core.create_namespaced_pod(ns, vram_pod("fits", "8Gi", group))
        core.create_namespaced_pod(ns, vram_pod("too-big", "64Gi", group))
        other = core.create_namespaced_pod(
            ns, {"metadata": {"name": "other"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        )
        with as_user(control_plane, release.sa("fallback")) as api:
            fb = client.CoreV1Api(api)

            def relabel() -> list[dict[str, str]]:  # a new value each time: a no-op patch is never refused
                return [{"op": "add", "path": "/metadata/labels/pool", "value": uuid.uuid4().hex}]

            _until_active(lambda: _denied(lambda: fb.patch_node_status(node, relabel()), "may not change labels"),
                          "the fallback policy")  # fmt: skip
            result = FallbackScheduler(api, load_catalog()).run_once()
            assert [p.pod for p in result.bound] == [f"{ns}/fits"]
            assert f"{ns}/too-big" in result.unplaced
            assert core.read_node(node).status.capacity["migctl.io/vram"] == str(15360 * 2**20)
            bound = core.read_namespaced_pod("fits", ns)
            assert bound.spec.node_name == node
            assert bound.metadata.annotations["migctl.io/visible-devices"] == "0"
            big = core.read_namespaced_pod("too-big", ns)
            assert any(c.type == "PodScheduled" and c.status == "False" for c in big.status.conditions)

            status = core.read_node(node).status.to_dict()
            ready = {"type": "Ready", "status": "False", "reason": "Forged"}
            condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "x"}
            wrong = {
                "patch a pod": _denied(
                    lambda: fb.patch_namespaced_pod("other", ns, {"metadata": {"labels": {"a": "b"}}}), "forbidden"
                ),
                "relabel a node via status": _denied(lambda: fb.patch_node_status(node, relabel()), "may not change"),
                "forge a node condition": _denied(
                    lambda: fb.patch_node_status(node, {"status": {"conditions": [ready]}}), "may only change"
                ),
                "other capacity": _denied(
                    lambda: fb.patch_node_status(node, capacity_patch(status, "nvidia.com/gpu", 8)), "may only change"
                ),
                "pod IP": _denied(
                    lambda: fb.patch_namespaced_pod_status("too-big", ns, {"status": {"podIP": "10.9.9.9"}}),
                    "may only set the PodScheduled",
                ),
                "annotate via pod status": _denied(
                    lambda: fb.patch_namespaced_pod_status(
                        "too-big", ns, {"metadata": {"annotations": {"migctl.io/visible-devices": "1"}}}
                    ),
                    "may not change",
                ),
                "bind with another annotation": _denied(
                    lambda: fb.create_namespaced_pod_binding(
                        "too-big",
                        ns,
                        client.V1Binding(
                            metadata=client.V1ObjectMeta(name="too-big", annotations={"example.com/run-as": "root"}),
                            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
                        ),
                        _preload_content=False,
                    ),
                    "may carry only",
                ),
                "PodScheduled of another scheduler's pod": _denied(
                    lambda: fb.patch_namespaced_pod_status("other", ns, {"status": {"conditions": [condition]}}),
                    "may only set the PodScheduled",
                ),
            }
            assert not {k: v for k, v in wrong.items() if v}, wrong
            assert other.metadata.uid == core.read_namespaced_pod("other", ns).metadata.uid
    finally:
        core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
        core.delete_node(node)


CM_CONFIGURATION = "migctl-webhook-cm-test"


@pytest.mark.parametrize(
    "release",
    [
        ["--set", "webhook.enabled=true", "--set", "webhook.tls.mode=cert-manager",
         "--set", f"config.webhook.configuration_name={CM_CONFIGURATION}"],
        ["--set", "webhook.enabled=true", "--set", f"config.webhook.configuration_name={CM_CONFIGURATION}"],
    ],
    indirect=True,
    ids=["cert-manager", "self-signed"],
)  # fmt: skip
def test_webhook_updates_its_configuration_only_in_self_signed_mode(
    control_plane: ControlPlane, api: client.ApiClient, release: Release
) -> None:
    """Self-signed: the webhook may read and update its own MutatingWebhookConfiguration (the caBundle) and its TLS
    Secret. cert-manager issues the certificate and injects the caBundle: the same update of the same object is
    refused, no Secret right is granted, and the chart tells the process to leave the configuration alone."""
    self_signed = not find(release.objs, "Certificate")  # cert-manager mode renders a Certificate
    wh = release.sa("webhook")
    ADM = "admissionregistration.k8s.io"  # noqa: N806
    for verb in ("get", "update"):
        assert can(api, wh, verb, "mutatingwebhookconfigurations", "", CM_CONFIGURATION, ADM) == self_signed, verb
    assert can(api, wh, "create", "secrets", release.ns) == self_signed
    assert can(api, wh, "get", "secrets", release.ns, "migctl-webhook-tls") == self_signed
    assert can(api, wh, "list", "pods") and can(api, wh, "create", "events", "team-a")
    admission = client.AdmissionregistrationV1Api(api)
    admission.create_mutating_webhook_configuration({"metadata": {"name": CM_CONFIGURATION}, "webhooks": []})
    try:
        with as_user(control_plane, wh) as as_wh:
            hooks = client.AdmissionregistrationV1Api(as_wh)

            def replace() -> None:  # what migctl.webhook.certs does: read, then update with the resourceVersion
                cfg = admission.read_mutating_webhook_configuration(CM_CONFIGURATION)
                cfg.metadata.labels = {"caBundle-written": "yes"}
                hooks.replace_mutating_webhook_configuration(CM_CONFIGURATION, cfg)

            got = _denied(replace, "forbidden")
            assert got == ("allowed" if self_signed else ""), got
    finally:
        admission.delete_mutating_webhook_configuration(CM_CONFIGURATION)
    if self_signed:
        return
    env = {e["name"]: e.get("value") for e in one(release.objs, "Deployment", "-webhook")["spec"]["template"]["spec"]
           ["containers"][0]["env"]}  # fmt: skip
    assert env["MIGCTL_WEBHOOK__CONFIGURATION_NAME"] == ""
    assert env["MIGCTL_WEBHOOK__TLS__MODE"] == "files"


# -- Pod Security Admission, as docs/install.md states it ------------------------------------------------------


def pod_from(workload: Obj, namespace: str) -> Obj:
    """A Pod with the workload's pod template, as its controller would create it."""
    template = workload["spec"]["template"]
    name = f"psa-{workload['metadata']['name']}"[:63]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace,
            "labels": template["metadata"].get("labels", {})}, "spec": template["spec"]}  # fmt: skip


def test_pod_security_profiles_the_docs_claim(
    helm: Path, core: client.CoreV1Api, make_namespace: Callable[[], str]
) -> None:
    """install.md: every component's pods meet the `restricted` Pod Security profile except the in-place agent's,
    which needs `privileged`. The real API server's PodSecurity admission judges each rendered pod template (a Pod
    created with dryRun=All in a namespace enforcing each level): the in-place agent is refused under `baseline`
    (so the check can fail) and admitted under `privileged`, the rest are admitted under `restricted`."""
    levels = {}
    for level in ("restricted", "baseline", "privileged"):
        ns = make_namespace()
        core.patch_namespace(ns, {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": level}}})
        levels[level] = ns
    # no RuntimeClass `nvidia` here (the GPU Operator creates it); Pod Security does not look at it
    objs = render(helm, "--set", "agent.inPlace.enabled=true", "--set", "webhook.enabled=true",
                  "--set", "fallback.enabled=true", "--set", "agent.runtimeClassName=",
                  namespace=levels["restricted"])  # fmt: skip
    workloads = [*find(objs, "Deployment"), *find(objs, "DaemonSet")]
    assert len(workloads) == 5

    def admitted(workload: Obj, level: str) -> str:
        try:
            core.create_namespaced_pod(levels[level], pod_from(workload, levels[level]), dry_run="All")
        except client.ApiException as e:
            if e.status == 403 and "violates PodSecurity" in str(e.body):
                return str(e.body)
            raise
        return ""

    for w in workloads:
        name = w["metadata"]["name"]
        if name.endswith("-agent-in-place"):
            assert "privileged" in admitted(w, "baseline"), "the in-place agent must be refused under baseline"
            assert admitted(w, "privileged") == "", name
        else:
            assert admitted(w, "restricted") == "", name
