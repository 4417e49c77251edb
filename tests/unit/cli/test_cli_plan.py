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
    real = objects.snapshot_from_objects

    def counting(*a: Any, **kw: Any) -> Any:
        calls.append("snapshot")
        return real(*a, **kw)

    for module in (objects, plan_cli, capacity):
        monkeypatch.setattr(module, "snapshot_from_objects", counting)
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


def test_an_empty_file_or_one_without_nodes_warns_and_says_what_it_found(tmp_path: Path) -> None:
    """An empty export, or pods only, plans nothing: the command says so and counts what the file holds."""
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    code, _, err = run("plan", "--snapshot", str(empty))
    assert code == 0
    assert "warning:" in err and "no Kubernetes objects found" in err
    pods = [{"kind": "Pod", "metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {}} for i in range(12)]
    only_pods = tmp_path / "pods.yaml"
    only_pods.write_text(yaml.safe_dump({"kind": "List", "items": [*pods, {"kind": "ConfigMap", "metadata": {}}]}))
    code, _, err = run("plan", "--snapshot", str(only_pods), "-o", "json")
    assert code == 0
    assert "the input has 13 objects: 12 Pods, 1 ConfigMap, no Node" in err
    code, _, err = run("plan", "--example")
    assert "warning:" not in err  # a file with nodes plans without this warning
