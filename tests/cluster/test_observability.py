"""The chart's dashboard and alert rules with the real tools, and `migctl status` against a real cluster.

Real: helm and promtool (both built by hack/testbin.sh), the kube-apiserver's validation of the rendered objects
(with a minimal PrometheusRule CRD, tests/fixtures/observability/prometheusrule-crd.yaml), the live /metrics, probes
and logs of every component as a real `migctl` process (component_processes.py: controller, agent, in-place agent,
webhook, fallback), and the `migctl status` / `kubectl-migctl status` processes reading the API server. SIMULATED:
the GPU Operator's mig-manager, device plugin and GFD (sim_gpu_operator.py, at their real interface: labels,
allocatable, the mig-parted ConfigMap). Absent: a GPU and NVML, so both agents run not ready (what they must say).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from prometheus_client.parser import text_string_to_metric_families

from .component_processes import Component, http_get, start_all, stop_all
from .controlplane import ControlPlane, find_bin_dir
from .test_actuator_faults import T3G, big_pods, untainted_with_error
from .test_controller_e2e import config_for, gpu_node, running, seed_configmap, sim_for
from .test_deploy import CHART, render
from .waiting import wait_for

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "observability"
BOTH_ON = ["--set", "controller.prometheusRule.enabled=true", "--set", "controller.grafanaDashboard.enabled=true"]
# Grafana's variables, as Grafana substitutes them before a query reaches Prometheus.
GRAFANA_VARIABLES = {"$namespace": "migctl", "$__rate_interval": "5m"}
Obj = dict[str, Any]


@pytest.fixture(scope="module")
def helm() -> Path:
    bin_dir, why = find_bin_dir(REPO)
    if bin_dir is None or not (bin_dir / "helm").exists():
        pytest.skip(f"no helm: {why}")
    return bin_dir / "helm"


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool from hack/testbin.sh; missing: skipped, or failed where the cluster tier is required (CI)."""
    res = subprocess.run([str(REPO / "hack" / "testbin.sh"), "--promtool"], check=False, capture_output=True, text=True)
    if res.returncode != 0:
        why = "promtool is not built: run hack/testbin.sh"
        if os.environ.get("MIGCTL_REQUIRE_CLUSTER", "") not in ("", "0", "false"):
            pytest.fail(f"{why} (MIGCTL_REQUIRE_CLUSTER=1)")
        pytest.skip(why)
    return Path(res.stdout.strip())


@pytest.fixture(scope="module")
def rendered(helm: Path) -> list[Obj]:
    return render(helm, *BOTH_ON)


def the(objs: list[Obj], kind: str) -> Obj:
    (found,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"].endswith(("-alerts", "-dashboard"))]
    return found


def rule_groups(objs: list[Obj]) -> list[Obj]:
    groups: list[Obj] = the(objs, "PrometheusRule")["spec"]["groups"]
    return groups


def dashboard(objs: list[Obj]) -> Obj:
    data: Obj = json.loads(the(objs, "ConfigMap")["data"]["migctl.json"])
    return data


def dashboard_queries(dash: Obj) -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", []):
            out.append((f"panel {p['id']} ({p['title']}) target {t['refId']}", t["expr"]))
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            out.append((f"variable {v['name']}", v["definition"]))
    return out


def promtool_run(promtool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], cwd=cwd, check=False, capture_output=True, text=True, timeout=120)


# -- the rules, as the chart renders them ----------------------------------------------------------------------


def test_rendered_rules_pass_promtool_check_and_unit_tests(rendered: list[Obj], promtool: Path, tmp_path: Path) -> None:
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rule_groups(rendered)}))
    shutil.copy(FIXTURES / "alerts-test.yaml", tmp_path / "alerts-test.yaml")
    check = promtool_run(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "SUCCESS: 11 rules found" in check.stdout
    test = promtool_run(promtool, "test", "rules", "alerts-test.yaml", cwd=tmp_path)
    assert test.returncode == 0, test.stdout + test.stderr


def test_each_alert_has_a_case_that_fires_it_and_one_that_keeps_it_quiet(rendered: list[Obj]) -> None:
    alerts = {r["alert"] for g in rule_groups(rendered) for r in g["rules"] if "alert" in r}
    cases = yaml.safe_load((FIXTURES / "alerts-test.yaml").read_text())["tests"]
    fires, quiet = set(), set()
    for case in cases:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert alerts == fires == quiet, (alerts, fires, quiet)


@pytest.mark.parametrize(
    ("alert", "old", "new"),
    [
        ("MigctlReconcilesFailing", ">= 3", ">= 4"),
        ("MigctlInPlaceChangesFailing", ">= 3", ">= 2"),
        ("MigctlInPlaceChangesFailing", 'result=~"failed|timeout"', 'result=~"failed|timeout|blocked"'),
        ("MigctlInPlaceChangesFailing", "sum(increase(", "sum by (result) (increase("),
        ("MigctlAgentNotReady", "max by (node) (", "max("),
        ("MigctlAgentNotReady", "== 0", "< 1.5"),
        ("MigctlUnplacedDemand", "> 0", "> 21474836480"),  # 20 GiB in bytes: the unit matters
    ],
)
def test_promtool_unit_tests_catch_a_wrong_rule(
    rendered: list[Obj], promtool: Path, tmp_path: Path, alert: str, old: str, new: str
) -> None:
    """The unit tests can fail: the same rules with one threshold, label filter or grouping changed are refused."""
    groups = rule_groups(rendered)
    (rule,) = [r for r in groups[0]["rules"] if r.get("alert") == alert]
    assert old in rule["expr"], rule["expr"]
    rule["expr"] = rule["expr"].replace(old, new)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    shutil.copy(FIXTURES / "alerts-test.yaml", tmp_path / "alerts-test.yaml")
    test = promtool_run(promtool, "test", "rules", "alerts-test.yaml", cwd=tmp_path)
    assert test.returncode != 0 and alert in test.stdout + test.stderr


def test_helm_lint_with_both_on_and_the_schema_refuses_bad_values(helm: Path) -> None:
    lint = subprocess.run([str(helm), "lint", str(CHART), *BOTH_ON], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    for bad, field in (("controller.prometheusRule.runbookUrl=docs/troubleshooting.md", "runbookUrl"),
                       ("controller.grafanaDashboard.sidecarLabel=has space", "sidecarLabel"),
                       ("controller.prometheusRule.enable=true", "enable")):  # fmt: skip
        res = subprocess.run([str(helm), "template", "x", str(CHART), "--set", bad], capture_output=True, text=True,
                             check=False)  # fmt: skip
        assert res.returncode != 0 and field in res.stderr, (bad, res.stderr)


def test_runbook_urls_use_the_configured_page(helm: Path) -> None:
    objs = render(helm, *BOTH_ON, "--set", "controller.prometheusRule.runbookUrl=https://wiki.example/migctl/")
    urls = [r["annotations"]["runbook_url"] for g in rule_groups(objs) for r in g["rules"]]
    assert urls and all(re.fullmatch(r"https://wiki\.example/migctl#[a-z0-9-_]+", u) for u in urls), urls


# -- the dashboard ---------------------------------------------------------------------------------------------


def test_the_configmap_carries_the_dashboard_file_unchanged_with_the_sidecar_label(rendered: list[Obj]) -> None:
    cm = the(rendered, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["migctl.json"] == (CHART / "dashboards" / "migctl.json").read_text().rstrip("\n")


def test_every_dashboard_expression_parses(rendered: list[Obj], promtool: Path, tmp_path: Path) -> None:
    """promtool parses each query (Grafana's variables substituted as Grafana does) as a recording rule."""
    rules = []
    for i, (where, query) in enumerate(dashboard_queries(dashboard(rendered))):
        expr = query
        for var, value in GRAFANA_VARIABLES.items():
            expr = expr.replace(var, value)
        if expr.startswith("label_values("):  # Grafana's own function: its first argument is the PromQL
            expr = expr[len("label_values(") :].rsplit(",", 1)[0]
        assert "$" not in expr, f"{where}: an unknown variable in {expr!r}"
        rules.append({"record": f"dashboard:query_{i}:parse", "expr": expr, "labels": {"where": where}})
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    check = promtool_run(promtool, "check", "rules", "dashboard-rules.yaml", cwd=tmp_path)
    assert check.returncode == 0, check.stdout + check.stderr
    # ... and a broken one is refused (the check can fail)
    rules[0]["expr"] = "sum(rate(migctl_plans_total[5m])"
    (tmp_path / "dashboard-rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": rules}]}))
    assert promtool_run(promtool, "check", "rules", "dashboard-rules.yaml", cwd=tmp_path).returncode != 0


# -- every component's live /metrics --------------------------------------------------------------------------


def exposed_names(text: str) -> set[str]:
    """Every series name the exposition offers, also for a labelled family with no child yet (its HELP/TYPE lines
    are there, its samples not): the names its type gives it."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
                "summary": ("", "_sum", "_count")}  # fmt: skip
    names = set()
    for family in text_string_to_metric_families(text):
        names.update(s.name for s in family.samples)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ("",)))
    return names


@pytest.fixture
def components(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> Iterator[dict[str, Component]]:
    """Every component as a real process, each once its /metrics answers (their logs are shown on a failure)."""
    base = config_for(namespace).model_dump(mode="json", exclude_defaults=True)
    started = start_all(control_plane, namespace, tmp_path / "components", base)
    try:
        for c in started:
            # the webhook's /metrics is empty until its HTTPS server (and its registry) exists: wait for content
            body = lambda c=c: (http_get(c.url("/metrics")) or (0, ""))[1]  # noqa: E731
            wait_for(f"{c.name} /metrics", lambda body=body: "migctl_build_info" in body(), timeout=90)
        yield {c.name: c for c in started}
    except BaseException:
        for c in started:
            print(f"--- {c.name} (exit {c.proc.poll()}):\n{c.output()}")
        raise
    finally:
        stop_all(started)


def scrape(c: Component) -> str:
    got = http_get(c.url("/metrics"))
    assert got is not None and got[0] == 200, f"{c.name}: /metrics {got}\n{c.output()}"
    return got[1]


def test_every_component_serves_metrics_probes_and_json_logs(
    components: dict[str, Component], promtool: Path, core: client.CoreV1Api, namespace: str, tmp_path: Path
) -> None:
    """Each /metrics passes `promtool check metrics` (base units, `_total` counters, HELP on every family), carries
    `migctl_build_info` for its component and the process and Python collectors, and no `_created` series; /healthz
    answers; /readyz says what a cluster without GPUs means for each; every log line is JSON
    (controller.log_format: json)."""
    # a pod the fallback cannot place (no node advertises migctl.io/vram here): its pass logs why
    core.create_namespaced_pod(namespace, {
        "metadata": {"name": "vram-pod"},
        "spec": {"schedulerName": "migctl", "containers": [{"name": "c", "image": "x",
                 "resources": {"limits": {"migctl.io/vram": "8Gi"}}}]},
    })  # fmt: skip
    expected_ready = {"controller": 200, "agent": 503, "agent-in-place": 503, "webhook": 200, "fallback": 200}
    for name, c in components.items():
        text = scrape(c)
        (tmp_path / f"{name}.prom").write_text(text)
        with (tmp_path / f"{name}.prom").open() as f:
            lint = subprocess.run([str(promtool), "check", "metrics"], stdin=f, capture_output=True, text=True,
                                  check=False)  # fmt: skip
        assert lint.returncode == 0, f"{name}: {lint.stdout}{lint.stderr}"
        families = {f.name: f for f in text_string_to_metric_families(text)}
        component = "agent" if name.startswith("agent") else name
        assert [s.labels["component"] for s in families["migctl_build_info"].samples] == [component], name
        names = exposed_names(text)
        assert {"process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"} <= names, name
        assert not [n for n in names if n.endswith("_created")], name
        assert http_get(c.url("/healthz")) == (200, "ok\n"), name
        wait_for(f"{name} /readyz {expected_ready[name]}",
                 lambda c=c, want=expected_ready[name]: (http_get(c.url("/readyz")) or (0, ""))[0] == want,
                 timeout=60)  # fmt: skip
    agent_ready = http_get(components["agent"].url("/readyz"))
    assert agent_ready is not None and "NVML" in agent_ready[1], agent_ready
    agent = {f.name: f for f in text_string_to_metric_families(scrape(components["agent"]))}
    assert [s.value for s in agent["migctl_agent_ready"].samples] == [0]
    wait_for("the fallback's unschedulable line", lambda: "unschedulable" in components["fallback"].output(),
             timeout=30)
    wait_for("the in-place step counted",
             lambda: "migctl_agent_in_place_answers_total{" in scrape(components["agent-in-place"]), timeout=30)
    for name, c in components.items():
        lines = [ln for ln in c.output(200_000).splitlines() if ln.strip()]
        assert lines, f"{name} logged nothing"
        bad = [ln for ln in lines if not ln.startswith("{")]
        assert not bad, f"{name}: not JSON: {bad[:3]}"
        assert all({"ts", "level", "logger", "msg"} <= json.loads(ln).keys() for ln in lines), name


def test_every_metric_a_panel_or_a_rule_names_is_exported(
    components: dict[str, Component], rendered: list[Obj]
) -> None:
    """Every metric a dashboard panel or an alert rule names appears on the live /metrics of some component; and
    every component has a panel or a rule that uses one of its own metrics."""
    by_component = {name: exposed_names(scrape(c)) for name, c in components.items()}
    exported = set().union(*by_component.values())
    assert "migctl_leader" in exported and "migctl_reconfigurations_failed_total" in exported
    named: dict[str, list[str]] = {}
    for where, expr in dashboard_queries(dashboard(rendered)):
        for metric in re.findall(r"\bmigctl_[A-Za-z0-9_]+", expr):
            named.setdefault(metric, []).append(where)
    for rule in (r for g in rule_groups(rendered) for r in g["rules"]):
        for metric in re.findall(r"\bmigctl_[A-Za-z0-9_]+", rule["expr"]):
            named.setdefault(metric, []).append(f"alert {rule['alert']}")
    assert len(named) >= 20
    missing = {m: where for m, where in named.items() if m not in exported}
    assert not missing, f"named but exported by no component: {missing}"
    for name, names in by_component.items():
        own = {n for n in names if n.startswith("migctl_") and n != "migctl_build_info"}
        assert own & named.keys(), f"no panel or rule shows a metric of the {name}"
    # the check can fail: names a component does not export are caught
    assert "migctl_in_place_windows_seconds_bucket" not in exported and "migctl_stranded_mib" not in exported


# -- the API server accepts what the chart renders -------------------------------------------------------------


@pytest.fixture
def prometheusrule_crd(api: client.ApiClient) -> Iterator[None]:
    ext = client.ApiextensionsV1Api(api)
    crd = yaml.safe_load((FIXTURES / "prometheusrule-crd.yaml").read_text())
    name = crd["metadata"]["name"]
    try:
        ext.create_custom_resource_definition(crd)
    except client.ApiException as e:
        if e.status != 409:
            raise

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for("the PrometheusRule CRD", established, timeout=30)
    yield
    ext.delete_custom_resource_definition(name)


def test_the_api_server_accepts_the_dashboard_and_the_rules(
    helm: Path, api: client.ApiClient, prometheusrule_crd: None, namespace: str
) -> None:
    """Server-side apply, dry run: the ConfigMap, and the PrometheusRule validated against the CRD's schema;
    a rule the schema refuses is refused (the check can fail)."""
    dynamic = DynamicClient(api)
    objs = render(helm, *BOTH_ON, release="obs", namespace=namespace)
    ours = [o for o in objs if o["metadata"]["name"].endswith(("-alerts", "-dashboard"))]
    assert sorted(o["kind"] for o in ours) == ["ConfigMap", "PrometheusRule"]
    for obj in ours:
        res = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        dynamic.server_side_apply(res, body=obj, namespace=namespace, field_manager="migctl-test", dry_run="All")
    rule = next(o for o in ours if o["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["rules"][0]["for"] = "one minute"
    res = dynamic.resources.get(api_version=rule["apiVersion"], kind=rule["kind"])
    with pytest.raises(Exception, match="for"):
        dynamic.server_side_apply(res, body=rule, namespace=namespace, field_manager="migctl-test", dry_run="All")


# -- migctl status and kubectl migctl status during a reconfiguration and after a rollback --------------------------


def kubectl_migctl(tmp_path: Path) -> str:
    """The installed `kubectl-migctl` (pip's console script for `migctl.cli:kubectl_main`), or, where this venv
    was installed before the entry point existed, the same two lines pip writes into one."""
    installed = shutil.which("kubectl-migctl", path=str(Path(sys.executable).parent))
    if installed:
        return installed
    shim = tmp_path / "kubectl-migctl"
    shim.write_text(f"#!{sys.executable}\nimport sys\nfrom migctl.cli import kubectl_main\nsys.exit(kubectl_main())\n")
    shim.chmod(0o755)
    return str(shim)


def status_of(exe: str, control_plane: ControlPlane, config: Path, node: str) -> Obj | None:
    res = subprocess.run([exe, "status", "-o", "json", "--kubeconfig", str(control_plane.kubeconfig), "--config",
                          str(config)], check=False, capture_output=True, text=True, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout)["nodes"] if r["node"] == node]
    return rows[0] if rows else None


def test_status_shows_the_phase_during_a_reconfiguration_and_the_error_after_a_rollback(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str],
    control_plane: ControlPlane, tmp_path: Path,
) -> None:  # fmt: skip
    """The SIMULATED mig-manager never answers for the new config: the controller waits in `applying` until
    mig_manager_timeout_s, then rolls back and writes migctl.io/last-error. `migctl status` (the real command, a
    separate process, with the controller's config file: where the GPU Operator's mig-parted ConfigMap is) shows
    each, and so does `kubectl-migctl status`."""
    from migctl.controller.loop import Controller

    migctl = shutil.which("migctl", path=str(Path(sys.executable).parent)) or "migctl"
    kubectl_plugin = kubectl_migctl(tmp_path)
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl_config = config_for(namespace, mig_manager_timeout_s=25.0, verify_timeout_s=5.0)
    config = tmp_path / "migctl.yaml"
    config.write_text(yaml.safe_dump(ctl_config.model_dump(mode="json", exclude_defaults=True)))
    product = core.read_node(node).metadata.labels["nvidia.com/gpu.product"]
    before = status_of(migctl, control_plane, config, node)
    assert before is not None and before["phase"] is None and before["last_error"] is None
    all_1g = [{"index": 0, "mig_enabled": True, "instances": {"1g.10gb": 7}}]  # machine values (profile counts)
    assert before["gpus"] == all_1g and before["models"] == [product]
    assert before["actuation"] == "mig-manager"

    ctl = Controller(ctl_config, api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2) as sim:
        wait_for("sim saw the node", lambda: sim.outcomes(node))
        sim.hang_configs = {T3G}
        big_pods(core, namespace)

        def applying(exe: str) -> Obj | None:
            row = status_of(exe, control_plane, config, node)
            return row if row and row["phase"] == "applying" else None

        row = wait_for("status shows applying", lambda: applying(migctl), timeout=20, interval=0.5)
        since = datetime.strptime(row["phase_since"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)  # RFC 3339
        assert since.timestamp() <= time.time()
        assert row["target"] == [{"index": 0, "mig_enabled": True, "instances": {"3g.40gb": 2}}]
        assert row["last_error"] is None
        assert wait_for("kubectl migctl shows applying", lambda: applying(kubectl_plugin), timeout=15)
        args = [migctl, "status", "--kubeconfig", str(control_plane.kubeconfig), "--config", str(config)]
        table = subprocess.run(args, check=False, capture_output=True, text=True, timeout=60).stdout
        line = next((ln for ln in table.splitlines() if ln.startswith(node + " ")), "")
        assert line.split()[4] == "applying", table  # NODE MODELS ACTUATION LAYOUT PHASE ...

        wait_for("rolled back", lambda: untainted_with_error(core, node), timeout=60)
        error = core.read_node(node).metadata.annotations["migctl.io/last-error"]
        for exe in (migctl, kubectl_plugin):
            after = status_of(exe, control_plane, config, node)
            assert after is not None and after["phase"] is None and after["target"] is None
            assert after["last_error"] == error and "mig-manager" in error
            assert after["gpus"] == all_1g  # rolled back to the previous layout
