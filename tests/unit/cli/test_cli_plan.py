"""`migctl plan` end to end on snapshots: text and JSON output, flags, bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from migctl.cli import cli
from migctl.cli.plan import example_path


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_example_json_has_the_documented_schema() -> None:
    code, out, _ = run("plan", "--example", "--output", "json")
    assert code == 0
    data = json.loads(out)
    assert set(data["summary"]) == {
        "pending_pods", "pods_placed", "stranded_mib_before", "stranded_mib_after", "internal_waste_mib",
        "unusable_mib", "evictions", "gpus_reconfigured", "nodes_reconfigured",
    }  # fmt: skip
    node = data["nodes"][0]
    assert {"name", "gpus"} <= set(node)
    assert {"index", "model", "current", "target", "changed"} <= set(node["gpus"][0])
    assert all({"pod", "node", "gpu", "profile"} <= set(a) for a in data["assignments"])
    assert all({"pod", "reason"} <= set(u) for u in data["unplaced"])
    assert data["summary"]["pods_placed"] == len({a["pod"] for a in data["assignments"]})


def test_example_text_explains_unplaced_pods() -> None:
    code, out, _ = run("plan", "--example", "--explain")
    assert code == 0
    assert "batch/giant: asks for 204800 MiB" in out
    assert "summary: placed" in out
    assert "demand forecast from" in out  # the forecast the spare instances were chosen for
    code, out, _ = run("plan", "--example")
    assert "(add --explain for the reasons)" in out
    assert "demand forecast" not in out


def test_example_is_deterministic() -> None:
    assert run("plan", "--example", "-o", "json") == run("plan", "--example", "-o", "json")


def test_mode_change_flag_places_the_whole_gpu_pod() -> None:
    _, out, _ = run("plan", "--example", "-o", "json")
    before = {u["pod"] for u in json.loads(out)["unplaced"]}
    _, out, _ = run("plan", "--example", "-o", "json", "--allow-mig-mode-change")
    after = json.loads(out)
    assert "research/whole-gpu" in before
    assert "research/whole-gpu" in {a["pod"] for a in after["assignments"]}


def test_snapshot_file_and_config(tmp_path: Path) -> None:
    cfg = tmp_path / "migctl.yaml"
    cfg.write_text(yaml.safe_dump({"planner": {"evictions": "lower-priority", "max_evictions": 0}}))
    code, out, _ = run("plan", "--snapshot", str(example_path()), "--config", str(cfg), "-o", "json")
    assert code == 0
    assert json.loads(out)["evictions"] == []


def test_bad_config_field_names_file_and_path(tmp_path: Path) -> None:
    cfg = tmp_path / "migctl.yaml"
    cfg.write_text(yaml.safe_dump({"planner": {"evictionz": "none"}}))
    code, _, err = run("plan", "--example", "--config", str(cfg))
    assert code == 2
    assert "migctl.yaml" in err
    assert "planner.evictionz: unknown field" in err


def test_missing_snapshot_file_exit_2(tmp_path: Path) -> None:
    code, _, err = run("plan", "--snapshot", str(tmp_path / "nope.yaml"))
    assert code == 2
    assert "nope.yaml" in err


def test_live_mode_without_credentials_fails_clearly(tmp_path: Path, monkeypatch: object) -> None:
    empty = tmp_path / "kubeconfig"
    empty.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    code, _, err = run("plan", "--kubeconfig", str(empty))
    assert code == 2
    assert "credentials" in err or "kubeconfig" in err.lower()


def test_the_objects_are_read_once_for_plan_fallback_and_vram_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    """One snapshot feeds the plan, the fallback section and the VRAM section (the adapter ran twice before)."""
    import migctl.cli.plan as plan_cli
    from migctl.adapters import objects
    from migctl.fallback import capacity

    calls: list[str] = []
    real, real_cluster = objects.snapshot_from_objects, objects.read_cluster

    def counting(*a: Any, **kw: Any) -> Any:
        calls.append("snapshot")
        return real(*a, **kw)

    def counting_cluster(*a: Any, **kw: Any) -> Any:
        calls.append("snapshot")
        return real_cluster(*a, **kw)

    monkeypatch.setattr(objects, "snapshot_from_objects", counting)
    monkeypatch.setattr(capacity, "snapshot_from_objects", counting)
    monkeypatch.setattr(plan_cli, "read_cluster", counting_cluster)
    code, out, _ = run("plan", "--example", "-o", "json")
    assert code == 0
    data = json.loads(out)
    assert data["vram_requests"] and "fallback" in data
    assert calls == ["snapshot"]


def test_vram_section_rows_show_the_instances_each_pod_holds() -> None:
    code, out, _ = run("plan", "--example", "-o", "json")
    assert code == 0
    rows = {r["pod"]: r for r in json.loads(out)["vram_requests"]}
    rewritten = [r for r in rows.values() if r["action"] == "rewrite"]
    assert rewritten
    for r in rewritten:
        assert sum(r["instances"].values()) >= 1
        assert set(r["instances"]) == {c["profile"] for c in r["containers"]}


def test_thorough_gives_the_exact_solver_a_larger_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--thorough` reaches the planner as `ExactSettings.thorough()` of the configured budget; without it the
    configured budget plans."""
    import migctl.cli.plan as plan_cli
    from migctl.core.model.settings import ExactSettings

    seen: list[ExactSettings] = []
    real = plan_cli.make_plan

    def spy(snapshot: Any, settings: Any) -> Any:
        seen.append(settings.exact)
        return real(snapshot, settings)

    monkeypatch.setattr(plan_cli, "make_plan", spy)
    assert run("plan", "--example", "--thorough", "--output", "json")[0] == 0
    assert run("plan", "--example", "--output", "json")[0] == 0
    assert seen == [ExactSettings().thorough(), ExactSettings()]


def test_an_empty_file_is_an_input_error_for_plan_and_status(tmp_path: Path) -> None:
    """Nothing to plan or show from a file without a single object (an empty export, `items: []`): exit 2 with
    `error:`, as for a file that is not YAML, never an empty plan that looks like success."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    empty_list = tmp_path / "list.yaml"
    empty_list.write_text("apiVersion: v1\nkind: List\nitems: []\n")
    for path in (empty, empty_list):
        for command in (["plan"], ["plan", "-o", "json"], ["status"]):
            code, out, err = run(*command, "--snapshot", str(path))
            assert code == 2, (command, err)
            assert err.startswith("error: ") and "no Kubernetes objects found" in err and str(path) in err
            assert out == ""


def test_a_file_without_nodes_warns_in_the_text_and_in_the_json_alike(tmp_path: Path) -> None:
    """One list of warnings for both renderings: what the text prints as `warning:` lines, JSON and YAML carry
    in `warnings` (it used to reach stderr only, and `-o json` said `"warnings": []`)."""
    pods = [{"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {}} for i in range(12)]
    only_pods = tmp_path / "pods.yaml"
    only_pods.write_text(yaml.safe_dump({"kind": "List", "items": [*pods, {"kind": "ConfigMap", "metadata": {}}]}))
    said = "the input has 13 objects: 12 Pods, 1 ConfigMap, no Node"
    code, out, _ = run("plan", "--snapshot", str(only_pods), "-o", "json")
    assert code == 0
    warnings = json.loads(out)["warnings"]
    assert warnings == [f"{only_pods}: {said}; nothing to plan (expected Nodes and Pods, e.g. kubectl get "
                        "nodes,pods,configmaps -A -o yaml)"]  # fmt: skip
    code, out, _ = run("plan", "--snapshot", str(only_pods), "-o", "yaml")
    assert code == 0 and yaml.safe_load(out)["warnings"] == warnings
    code, out, _ = run("plan", "--snapshot", str(only_pods))
    assert code == 0
    assert [line.removeprefix("warning: ") for line in out.splitlines() if line.startswith("warning: ")] == warnings
    code, out, _ = run("plan", "--example", "-o", "json")
    assert json.loads(out)["warnings"] == []  # a file with nodes plans without this warning


def test_the_snapshots_own_warnings_are_in_both_renderings_too(tmp_path: Path) -> None:
    """A node whose GPU product the catalog does not know: the adapter's warning, in the text and the JSON."""
    snapshot = yaml.safe_load(example_path().read_text())
    node = next(o for o in snapshot["items"] if o["kind"] == "Node")
    node["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Unknown-9000"
    path = tmp_path / "odd.yaml"
    path.write_text(yaml.safe_dump(snapshot))
    _, out, _ = run("plan", "--snapshot", str(path), "-o", "json")
    warnings = json.loads(out)["warnings"]
    assert any("NVIDIA-Unknown-9000" in w for w in warnings)
    _, out, _ = run("plan", "--snapshot", str(path))
    assert [line.removeprefix("warning: ") for line in out.splitlines() if line.startswith("warning: ")] == warnings


def test_output_yaml_is_the_json_document_and_wide_adds_sizes_and_reasons() -> None:
    _, out_json, _ = run("plan", "--example", "-o", "json")
    code, out_yaml, _ = run("plan", "--example", "-o", "yaml")
    assert code == 0 and out_yaml.startswith("version: v1\n")
    assert yaml.safe_load(out_yaml) == json.loads(out_json)
    code, wide, _ = run("plan", "--example", "-o", "wide")
    assert code == 0
    _, text, _ = run("plan", "--example")
    assert "instance 9984 MiB, need 7168 MiB" in wide and "instance 9984 MiB" not in text
    assert "batch/giant: asks for 204800 MiB" in wide and "(add --explain for the reasons)" not in wide


def test_a_dry_run_on_a_dynamic_mig_node_shows_the_fences_migctl_would_set(tmp_path: Path) -> None:
    """3g, 4g, 3g, 4g claims on a two-A100 DynamicMIG node (tests/unit/adapters/dra/test_dra_snapshot.py): the plan
    JSON names the DRA node and the fences `migctl run` would set, the controller's own rule; the text says so."""
    import yaml

    from tests.unit.adapters.dra.test_dra_snapshot import claim_pod, cluster, profile, template

    pods = [claim_pod(f"p{i}", t, f"2026-12-07T10:00:0{i}Z") for i, t in enumerate(["mid", "large", "mid", "large"])]
    objs = [*cluster("dynamic", *pods), template("mid", profile("3g.20gb")), template("large", profile("4g.20gb"))]
    f = tmp_path / "dra.yaml"
    f.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    code, out, _ = run("plan", "--snapshot", str(f), "-o", "json")
    assert code == 0
    dra = json.loads(out)["dra"]
    assert dra["nodes"] == {"n1": "dynamic"}
    assert sorted(dra["fences"]["n1"]["add"]) == ["gpu-0-mig-3g20gb-9-0", "gpu-1-mig-3g20gb-9-0"]
    code, text, _ = run("plan", "--snapshot", str(f))
    assert code == 0 and "made by DynamicMIG at allocation" in text and "would fence 2 device(s)" in text
