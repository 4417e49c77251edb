"""The chart's monitoring, alert, scheduling and probe values, rendered by the real helm (no API server: what the API
server accepts is tests/cluster/test_deploy.py). Also: values.schema.json knows every value values.yaml has, and
install.md's sample values keep the agent's default tolerations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.deploy.helm_tool import CHART, ROOT, helm_binary, render, run_helm

Obj = dict[str, Any]
INSTALL_MD = ROOT / "docs" / "install.md"
ALL_ON = ["--set", "agent.inPlace.enabled=true", "--set", "webhook.enabled=true", "--set", "fallback.enabled=true"]
RULES = ["--set", "controller.prometheusRule.enabled=true"]
DEFAULT_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "migctl.io/reconfiguring", "operator": "Exists"},
]


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


def of(objs: list[Obj], kind: str, name: str = "") -> list[Obj]:
    return [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(name)]


def one(objs: list[Obj], kind: str, name: str = "") -> Obj:
    (found,) = of(objs, kind, name)
    return found


def alerts(objs: list[Obj]) -> dict[str, Obj]:
    return {r["alert"]: r for g in one(objs, "PrometheusRule")["spec"]["groups"] for r in g["rules"]}


def pod_spec(obj: Obj) -> Obj:
    spec: Obj = obj["spec"]["template"]["spec"]
    return spec


# -- every component has a metrics Service the one ServiceMonitor selects ----------------------------------------


def test_the_service_monitor_scrapes_a_metrics_port_of_every_component(helm: Path) -> None:
    objs = render(helm, *ALL_ON, "--set", "controller.serviceMonitor.enabled=true")
    sm = one(objs, "ServiceMonitor")
    wanted = sm["spec"]["selector"]["matchLabels"]
    selected = [s for s in of(objs, "Service") if wanted.items() <= s["metadata"]["labels"].items()]
    workloads = [*of(objs, "Deployment"), *of(objs, "DaemonSet")]
    assert len(workloads) == 5  # controller, agent, in-place agent, webhook, fallback
    for w in workloads:
        labels = w["spec"]["template"]["metadata"]["labels"]
        (svc,) = [s for s in selected if s["spec"]["selector"].items() <= labels.items()]
        (port,) = [p for p in svc["spec"]["ports"] if p["name"] == sm["spec"]["endpoints"][0]["port"]]
        container = pod_spec(w)["containers"][0]
        target = {p["name"]: p["containerPort"] for p in container["ports"]}[port["targetPort"]]
        assert target == port["port"], w["metadata"]["name"]
    assert not [s for s in selected if s["metadata"]["name"].endswith("-webhook")], "the HTTPS Service is not scraped"


def test_service_monitor_values_of_the_ecosystem(helm: Path) -> None:
    relabel = [{"targetLabel": "cluster", "replacement": "gpu-east"}]
    drop = [{"sourceLabels": ["__name__"], "regex": "python_.*", "action": "drop"}]
    objs = render(
        helm, "--set", "controller.serviceMonitor.enabled=true",
        "--set", "controller.serviceMonitor.additionalLabels.release=kps",
        "--set", "controller.serviceMonitor.labels.team=gpu",  # the deprecated alias still arrives
        "--set", "controller.serviceMonitor.honorLabels=true",
        "--set-json", f"controller.serviceMonitor.relabelings={json.dumps(relabel)}",
        "--set-json", f"controller.serviceMonitor.metricRelabelings={json.dumps(drop)}",
    )  # fmt: skip
    sm = one(objs, "ServiceMonitor")
    assert sm["metadata"]["labels"]["release"] == "kps" and sm["metadata"]["labels"]["team"] == "gpu"
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    assert endpoint["relabelings"] == relabel and endpoint["metricRelabelings"] == drop
    both = render(helm, "--set", "controller.serviceMonitor.enabled=true",
                  "--set", "controller.serviceMonitor.additionalLabels.release=new",
                  "--set", "controller.serviceMonitor.labels.release=old")  # fmt: skip
    assert one(both, "ServiceMonitor")["metadata"]["labels"]["release"] == "new"


# -- alerts one by one -------------------------------------------------------------------------------------------


def test_each_alert_can_be_disabled_or_tuned_on_its_own(helm: Path) -> None:
    default = alerts(render(helm, *RULES))
    assert len(default) == 11
    custom = {"MigctlUnplacedDemand": {"for": "1h", "severity": "info", "labels": {"team": "ml"}},
              "MigctlReconfigurationFailed": {"for": "5m"}}  # fmt: skip
    rule = "controller.prometheusRule"
    tuned = alerts(render(helm, *RULES, "--set", f"{rule}.disabled.MigctlPausedForLong=true",
                          "--set-json", f"{rule}.customRules={json.dumps(custom)}",
                          "--set", f"{rule}.additionalRuleLabels.cluster=east",
                          "--set", f"{rule}.additionalRuleAnnotations.dashboard=https://g/x"))  # fmt: skip
    assert set(default) - set(tuned) == {"MigctlPausedForLong"}
    unplaced = tuned["MigctlUnplacedDemand"]
    assert unplaced["for"] == "1h" and unplaced["labels"] == {"severity": "info", "team": "ml", "cluster": "east"}
    assert tuned["MigctlReconfigurationFailed"]["for"] == "5m" and "for" not in default["MigctlReconfigurationFailed"]
    for name, rule in tuned.items():
        assert rule["labels"]["cluster"] == "east" and rule["annotations"]["dashboard"] == "https://g/x", name
        if name != "MigctlUnplacedDemand":
            assert rule["labels"]["severity"] == default[name]["labels"]["severity"], name
            assert rule.get("for") == (default[name].get("for") if name != "MigctlReconfigurationFailed" else "5m")
    assert "cluster" not in default["MigctlLeaderNotOne"]["labels"]


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "controller.replicas=0", "--set", "fallback.enabled=true"],  # fallback only (install.md)
        ["--set", "config.controller.dry_run=true"],  # takes no Lease
    ],
    ids=["fallback-only", "dry-run"],
)
def test_leader_not_one_is_not_rendered_where_no_replica_can_lead(helm: Path, values: list[str]) -> None:
    rules = alerts(render(helm, *RULES, *values))
    assert "MigctlLeaderNotOne" not in rules and "MigctlNotPlanning" in rules
    assert "MigctlLeaderNotOne" in alerts(render(helm, *RULES))
    assert "MigctlAgentNotReady" not in alerts(render(helm, *RULES, "--set", "agent.enabled=false"))


def test_the_schema_refuses_an_unknown_alert_name(helm: Path) -> None:
    for bad in ("controller.prometheusRule.disabled.MigctlLeaderNotOn=true",
                "controller.prometheusRule.customRules.MigctlTypo.for=1m",
                "controller.prometheusRule.customRules.MigctlPausedForLong.for=a-day"):  # fmt: skip
        res = run_helm(helm, "template", "m", str(CHART), "--set", bad)
        assert res.returncode != 0 and "/controller/prometheusRule" in res.stderr, (bad, res.stderr)


# -- scheduling, disruption, probes ------------------------------------------------------------------------------


def test_both_agents_are_node_critical_and_extra_tolerations_add_to_the_defaults(helm: Path) -> None:
    extra = [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    objs = render(helm, *ALL_ON, "--set-json", f"agent.extraTolerations={json.dumps(extra)}")
    daemonsets = of(objs, "DaemonSet")
    assert len(daemonsets) == 2
    for ds in daemonsets:
        spec = pod_spec(ds)
        assert spec["priorityClassName"] == "system-node-critical", ds["metadata"]["name"]
        assert spec["tolerations"] == [*DEFAULT_TOLERATIONS, *extra], ds["metadata"]["name"]
    plain = pod_spec(one(render(helm, "--set", "agent.priorityClassName="), "DaemonSet", "-agent"))
    assert "priorityClassName" not in plain


def sample_values(doc: Path) -> list[Obj]:
    """Every `# my-values.yaml` block of the install guide, parsed."""
    blocks = re.findall(r"```yaml\n# my-values\.yaml\n(.*?)```", doc.read_text(), re.S)
    return [yaml.safe_load(b) for b in blocks]


def test_install_mds_sample_values_keep_the_agents_default_tolerations(helm: Path, tmp_path: Path) -> None:
    samples = sample_values(INSTALL_MD)
    assert len(samples) >= 2
    for i, sample in enumerate(samples):
        path = tmp_path / f"my-values-{i}.yaml"
        path.write_text(yaml.safe_dump(sample))
        objs = render(helm, "-f", str(path))
        tolerations = pod_spec(one(objs, "DaemonSet", "-agent"))["tolerations"]
        assert all(t in tolerations for t in DEFAULT_TOLERATIONS), (i, tolerations)
    # the check can fail: the old sample, which set agent.tolerations, lost them
    old = {
        "agent": {"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}
    }
    (tmp_path / "old.yaml").write_text(yaml.safe_dump(old))
    lost = pod_spec(one(render(helm, "-f", str(tmp_path / "old.yaml")), "DaemonSet", "-agent"))["tolerations"]
    assert DEFAULT_TOLERATIONS[0] not in lost


def test_disruption_budgets_only_where_they_keep_a_replica(helm: Path) -> None:
    objs = render(helm, "--set", "webhook.enabled=true")
    assert {p["metadata"]["name"] for p in of(objs, "PodDisruptionBudget")} == {"migctl-controller", "migctl-webhook"}
    webhook_pdb = one(objs, "PodDisruptionBudget", "-webhook")["spec"]
    labels = one(objs, "Deployment", "-webhook")["spec"]["template"]["metadata"]["labels"]
    assert webhook_pdb["minAvailable"] == 1 and webhook_pdb["selector"]["matchLabels"].items() <= labels.items()
    single = render(
        helm, "--set", "webhook.enabled=true", "--set", "webhook.replicas=1", "--set", "controller.replicas=1"
    )
    assert not of(single, "PodDisruptionBudget"), "one replica with minAvailable 1 would block every drain"
    assert not of(render(helm, "--set", "controller.replicas=0"), "PodDisruptionBudget")


def test_the_fallback_has_probes_on_its_metrics_port(helm: Path) -> None:
    objs = render(helm, "--set", "fallback.enabled=true", "--set", "config.fallback.metrics_port=9095")
    c = pod_spec(one(objs, "Deployment", "-fallback"))["containers"][0]
    assert c["ports"] == [{"name": "metrics", "containerPort": 9095, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert one(objs, "Service", "-fallback-metrics")["spec"]["ports"][0]["port"] == 9095
    res = run_helm(helm, "template", "m", str(CHART), "--set", "fallback.enabled=true",
                   "--set", "config.fallback.metrics_port=0")  # fmt: skip
    assert res.returncode != 0 and "config.fallback.metrics_port must be a fixed port" in res.stderr


# -- the schema follows values.yaml ------------------------------------------------------------------------------


def _resolve(schema: Obj, node: Obj) -> Obj:
    while "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    return node


def leaf_paths(values: Any, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(values, dict) and values:
        return [p for k, v in values.items() for p in leaf_paths(v, (*path, k))]
    return [path]


def test_values_schema_knows_every_value() -> None:
    """Every key values.yaml sets is a property of values.schema.json (following $ref), with a type that accepts
    its default: a new value cannot ship without its schema. Below a free-form object (a Kubernetes field the chart
    passes through) the schema declares nothing more, and neither does this test."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    types = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int, "number": (int, float)}
    missing = []
    for path in leaf_paths(values):
        node: Obj = schema
        for key in path:
            node = _resolve(schema, node)
            if "properties" not in node:
                break  # a free-form object (a Kubernetes field passed through: resources, securityContext, ...)
            if key not in node["properties"]:
                missing.append(".".join(path))
                break
            node = node["properties"][key]
        else:
            node = _resolve(schema, node)
            declared = node.get("type")
            default = values
            for key in path:
                default = default[key]
            if declared and default is not None:
                allowed = declared if isinstance(declared, list) else [declared]
                assert any(isinstance(default, types[t]) for t in allowed), (".".join(path), declared, default)
    assert not missing, f"values.yaml keys the schema does not declare: {missing}"
