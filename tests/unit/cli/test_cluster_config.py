"""The CLI reads the settings the controller runs with, and `migctl run` meets the controller on one Lease.

SIMULATED: the API server, at `KubeApi`'s interface (`list_configmaps` with a label selector, `read_configmap`,
and the objects `read_objects` returns): `FakeApi` answers those calls from a list of ConfigMaps shaped as the
chart renders them (deploy/helm/migctl/templates/configmap.yaml). The label selector itself is the real API
server's in tests/cluster/test_cli_cluster_config.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from migctl.adapters.kube.errors import CredentialsError, ForbiddenError
from migctl.adapters.objects import load_objects
from migctl.cli import cli
from migctl.cli.cluster_config import live_config, run_lease
from migctl.cli.plan import example_path
from migctl.config import Config, load_config
from migctl.config.cluster import CONFIG_SELECTOR, in_pod_lease, own_namespace
from migctl.errors import InputError

Obj = dict[str, Any]


def chart_configmap(namespace: str, settings: Obj, name: str = "migctl-config") -> Obj:
    """A ConfigMap as the chart renders it: its labels, the config file under config.yaml."""
    labels = {"app.kubernetes.io/name": "migctl", "app.kubernetes.io/instance": name.removesuffix("-config"),
              "app.kubernetes.io/component": "config", "app.kubernetes.io/part-of": "migctl",
              "app.kubernetes.io/managed-by": "Helm"}  # fmt: skip
    return {"kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "data": {"config.yaml": yaml.safe_dump(settings)}}  # fmt: skip


class FakeApi:
    """KubeApi's two ConfigMap calls over `configmaps`; label selectors of `key=value` terms, as the API server."""

    def __init__(self, *configmaps: Obj, refuse: Exception | None = None) -> None:
        self.configmaps, self.refuse = list(configmaps), refuse
        self.selectors: list[str] = []

    def list_configmaps(self, label_selector: str) -> list[Obj]:
        self.selectors.append(label_selector)
        if self.refuse is not None:
            raise self.refuse
        terms = dict(t.split("=", 1) for t in label_selector.split(","))
        return [cm for cm in self.configmaps if terms.items() <= cm["metadata"]["labels"].items()]

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        found = [
            cm for cm in self.configmaps if (cm["metadata"]["namespace"], cm["metadata"]["name"]) == (namespace, name)
        ]
        return found[0] if found else None


# -- plan and status read the controller's config --------------------------------------------------------------


def test_the_one_labelled_configmap_is_the_config_and_stderr_says_so() -> None:
    api = FakeApi(chart_configmap("migctl", {"planner": {"evictions": "lower-priority"}}))
    cfg, which = live_config(api, None, None)
    assert cfg.planner.evictions == "lower-priority"
    assert which.startswith("configmap migctl/migctl-config (the controller's")
    assert api.selectors == [CONFIG_SELECTOR] == ["app.kubernetes.io/part-of=migctl,app.kubernetes.io/component=config"]


def test_config_file_and_named_configmap_win_and_bad_content_names_the_configmap_and_field(tmp_path: Path) -> None:
    ours = chart_configmap("migctl", {"planner": {"evictions": "lower-priority"}})
    other = chart_configmap("team-b", {"planner": {"allow_mig_mode_change": True}}, name="b-config")
    api = FakeApi(ours, other)
    file = tmp_path / "c.yaml"
    file.write_text("planner: {max_evictions: 3}\n")
    cfg, which = live_config(api, file, None)
    assert cfg.planner.max_evictions == 3 and which == f"{file} (--config)" and api.selectors == []
    cfg, which = live_config(api, None, ("team-b", "b-config"))
    assert cfg.planner.allow_mig_mode_change and which == "configmap team-b/b-config (--config-from-cluster)"
    with pytest.raises(InputError, match=r"2 migctl config ConfigMaps .*migctl/migctl-config, configmap team-b/b-"):
        live_config(api, None, None)  # two releases: which controller is meant cannot be guessed
    with pytest.raises(InputError, match="--config-from-cluster x/y: no such ConfigMap"):
        live_config(api, None, ("x", "y"))
    bad = FakeApi(chart_configmap("migctl", {"planner": {"evictionz": "none"}}))
    with pytest.raises(InputError, match=r"configmap migctl/migctl-config key config.yaml: planner.evictionz: unknown"):
        live_config(bad, None, None)
    no_key = chart_configmap("migctl", {})
    no_key["data"] = {}
    with pytest.raises(InputError, match=r"key config\.yaml: missing"):
        live_config(FakeApi(no_key), None, None)


def test_without_a_configmap_or_the_right_to_list_them_the_defaults_say_why() -> None:
    cfg, which = live_config(FakeApi(), None, None)
    assert cfg == load_config(None) and which.startswith("built-in defaults: no ConfigMap labelled")
    refused = FakeApi(refuse=ForbiddenError("list configmaps", 403, "Forbidden"))
    cfg, which = live_config(refused, None, None)
    assert cfg == load_config(None)
    assert "cannot look for the controller's config" in which and "--config-from-cluster NAMESPACE/NAME" in which


def _live(monkeypatch: pytest.MonkeyPatch, api: FakeApi) -> None:
    """`migctl plan`/`status` without --snapshot, against `api` and the example cluster's objects."""
    from migctl.adapters import kube

    monkeypatch.setattr(kube, "api_client", lambda kubeconfig=None, context=None: object())
    monkeypatch.setattr(kube, "KubeApi", lambda client, attempts=6: api)
    monkeypatch.setattr(kube, "read_objects", lambda client, operator: load_objects(example_path()))


def test_plan_and_status_on_the_live_cluster_use_the_controllers_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's research/whole-gpu pod is placed only where MIG mode may change: the controller's
    ConfigMap allows it, the defaults do not. `plan` with no --config plans as the controller would."""
    _live(monkeypatch, FakeApi(chart_configmap("migctl", {"planner": {"allow_mig_mode_change": True}})))
    res = CliRunner().invoke(cli, ["plan", "-o", "json"])
    assert res.exit_code == 0, res.stderr
    assert "research/whole-gpu" in {a["pod"] for a in json.loads(res.stdout)["assignments"]}
    assert "config: configmap migctl/migctl-config (the controller's" in res.stderr
    res = CliRunner().invoke(cli, ["status", "-o", "json"])
    assert res.exit_code == 0 and "config: configmap migctl/migctl-config" in res.stderr
    _live(monkeypatch, FakeApi())
    res = CliRunner().invoke(cli, ["plan", "-o", "json"])
    assert res.exit_code == 0
    assert "research/whole-gpu" not in {a["pod"] for a in json.loads(res.stdout)["assignments"]}
    assert "config: built-in defaults: no ConfigMap labelled" in res.stderr


def test_a_snapshot_stays_offline(monkeypatch: pytest.MonkeyPatch) -> None:
    from migctl.adapters import kube

    monkeypatch.setattr(kube, "api_client", lambda *a, **k: pytest.fail("a snapshot must not reach a cluster"))
    res = CliRunner().invoke(cli, ["plan", "--example", "-o", "json"])
    assert res.exit_code == 0 and "config:" not in res.stderr
    for command in ("plan", "status"):
        res = CliRunner().invoke(cli, [command, "--snapshot", str(example_path()), "--config-from-cluster", "a/b"])
        assert res.exit_code == 2 and "error: --config-from-cluster reads the live cluster" in res.stderr
    res = CliRunner().invoke(cli, ["plan", "--config-from-cluster", "not-a-ref"])
    assert res.exit_code == 2 and "expected NAMESPACE/NAME of a ConfigMap" in res.stderr


# -- one Lease ------------------------------------------------------------------------------------------------


def test_an_empty_lease_namespace_is_the_namespace_migctl_runs_in(tmp_path: Path) -> None:
    assert Config().controller.leader_election.lease_namespace == ""  # the default: no fixed namespace
    sa = tmp_path / "namespace"
    sa.write_text("migctl\n")
    assert own_namespace({}, sa) == "migctl"
    assert own_namespace({"POD_NAMESPACE": "ops"}, sa) == "ops"
    assert own_namespace({}, tmp_path / "absent") is None
    assert in_pod_lease(Config(), {}, sa).controller.leader_election.lease_namespace == "migctl"
    explicit = Config.model_validate({"controller": {"leader_election": {"lease_namespace": "x"}}})
    assert in_pod_lease(explicit, {}, sa).controller.leader_election.lease_namespace == "x"
    assert in_pod_lease(Config(), {}, tmp_path / "absent").controller.leader_election.lease_namespace == ""


def test_the_chart_and_the_default_agree_on_the_lease() -> None:
    """The chart renders lease_namespace as the release namespace, where its controller pods run: the default's
    rule (the pod's namespace) gives the same Lease."""
    helpers = (Path(__file__).resolve().parents[3] / "deploy/helm/migctl/templates/_helpers.tpl").read_text()
    assert '"leader_election" (dict "lease_namespace" .Release.Namespace)' in helpers


def test_a_workstation_run_takes_the_controllers_lease_or_refuses() -> None:
    """Out of a pod, `migctl run` with the default config contends on the in-cluster controller's Lease (the
    chart's, migctl/migctl), not on one of its own (it used to elect on gpu-operator/migctl: a second leader)."""
    chart = chart_configmap("migctl", {"controller": {"leader_election": {"lease_namespace": "migctl"}}})
    cfg, why = run_lease(FakeApi(chart), Config())
    le = cfg.controller.leader_election
    assert (le.lease_namespace, le.lease_name) == ("migctl", "migctl")
    assert "the controller's of configmap migctl/migctl-config" in why
    renamed = chart_configmap("ops", {"controller": {"leader_election": {"lease_name": "migctl-b"}}})
    le = run_lease(FakeApi(renamed), Config())[0].controller.leader_election
    assert (le.lease_namespace, le.lease_name) == ("ops", "migctl-b")  # empty there: the ConfigMap's namespace
    with pytest.raises(InputError, match=r"no ConfigMap labelled .* set controller\.leader_election\.lease_namespace"):
        run_lease(FakeApi(), Config())
    with pytest.raises(InputError, match=r"2 \(configmap migctl/migctl-config, configmap ops/migctl-config\)"):
        run_lease(FakeApi(chart, renamed), Config())
    with pytest.raises(InputError, match="cannot find the controller's Lease"):
        run_lease(FakeApi(refuse=ForbiddenError("list configmaps", 403, "Forbidden")), Config())


def test_run_resolves_the_lease_before_the_controller_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`migctl run` end to end up to the controller: out of a pod with no ConfigMap it stops with exit 2 and
    starts nothing; with the chart's ConfigMap the controller gets that Lease; in a pod, the pod's namespace."""
    from migctl.adapters import kube
    from migctl.config import cluster
    from migctl.controller import loop

    started: list[Config] = []

    class Stub:
        def __init__(self, cfg: Config, api: object, hook: object = None) -> None:
            started.append(cfg)

        def start(self) -> None:
            raise SystemExit(0)  # stop here: the Lease is what this test is about

    monkeypatch.setattr(loop, "Controller", Stub)
    monkeypatch.setattr("migctl.cli.run.stop_on_signals", threading.Event)  # leave this process's handlers alone
    monkeypatch.setattr(kube, "api_client", lambda kubeconfig=None, context=None: object())
    monkeypatch.setattr(cluster, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    monkeypatch.setattr(kube, "KubeApi", lambda client, attempts=6: FakeApi())
    res = CliRunner().invoke(cli, ["run", "--metrics-port", "0"])
    assert res.exit_code == 2 and started == []
    assert res.stderr.startswith("error: leader election: out of a cluster the Lease namespace is unknown")
    chart = chart_configmap("migctl", {"controller": {"leader_election": {"lease_namespace": "migctl"}}})
    monkeypatch.setattr(kube, "KubeApi", lambda client, attempts=6: FakeApi(chart))
    res = CliRunner().invoke(cli, ["run", "--metrics-port", "0"])
    assert res.exit_code == 0, res.output
    assert started[-1].controller.leader_election.lease_namespace == "migctl"
    monkeypatch.setenv("POD_NAMESPACE", "in-pod")
    res = CliRunner().invoke(cli, ["run", "--metrics-port", "0"])
    assert res.exit_code == 0 and started[-1].controller.leader_election.lease_namespace == "in-pod"


def test_the_webhook_watches_the_same_lease(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from migctl.cli.webhook import load_webhook_config
    from migctl.config import cluster

    monkeypatch.setattr(cluster, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    monkeypatch.setenv("POD_NAMESPACE", "migctl")
    assert load_webhook_config(None)[0].controller.leader_election.lease_namespace == "migctl"
    monkeypatch.delenv("POD_NAMESPACE")
    cfg, webhook = load_webhook_config(None)
    assert cfg.controller.leader_election.lease_namespace == webhook.namespace  # out of a pod: its own setting


# -- one exit-code rule ---------------------------------------------------------------------------------------


def test_no_credentials_is_the_same_error_for_plan_status_and_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """README "Commands": 2 for what the person fixes (usage, input, credentials), 1 for runtime failures;
    `error: ` first. `run` used to say `Error: ` with exit 1."""
    from migctl.adapters import kube

    def no_credentials(kubeconfig: object = None, context: object = None) -> object:
        raise CredentialsError("Invalid kube-config file. No configuration found.")

    monkeypatch.setattr(kube, "api_client", no_credentials)
    for command in (["plan"], ["status"], ["run"]):
        res = CliRunner().invoke(cli, command)
        assert res.exit_code == 2, (command, res.output)
        assert res.stderr.startswith("error: no usable Kubernetes credentials"), (command, res.stderr)


def test_a_cluster_that_fails_while_reading_is_a_runtime_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from migctl.adapters import kube
    from migctl.adapters.kube.errors import KubeError

    def down(client: object, operator: object) -> list[Obj]:
        raise KubeError("reading the cluster failed: list nodes", None, "connection refused")

    _live(monkeypatch, FakeApi())
    monkeypatch.setattr(kube, "read_objects", down)
    for command in (["plan"], ["status"]):
        res = CliRunner().invoke(cli, command)
        assert res.exit_code == 1, res.output
        assert "error: reading the cluster failed" in res.stderr


def test_usage_errors_say_error_in_lower_case_on_every_command() -> None:
    for command in (["plan", "--bogus"], ["status", "-o", "xml"], ["simulate", "--batch", "0"],
                    ["profiles", "list", "--bogus"], ["run", "--bogus"], ["agent", "apply"]):  # fmt: skip
        res = CliRunner().invoke(cli, command)
        assert res.exit_code == 2, (command, res.output)
        assert "\nerror: " in res.stderr and "Error: " not in res.stderr, (command, res.stderr)
        assert res.stderr.startswith("Usage: ")  # the usage line and the --help hint stay
