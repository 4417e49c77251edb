"""The chart README is generated from values.yaml and CHANGELOG.md (hack/gen-chart-readme.py): the committed file is
current, lists every value with its default and comment, and carries every release's upgrade notes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests.unit.deploy.helm_tool import CHART, ROOT

SCRIPT = ROOT / "hack" / "gen-chart-readme.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_chart_readme", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_chart_readme_is_current() -> None:
    res = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def test_every_value_has_a_row_with_its_default(gen: ModuleType) -> None:
    readme = (CHART / "README.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    for key, default in [("agent.extraTolerations", []), ("agent.priorityClassName", "system-node-critical"),
                         ("controller.serviceMonitor.metricRelabelings", []),
                         ("controller.prometheusRule.customRules", {}), ("webhook.podDisruptionBudget.minAvailable", 1),
                         ("config.controller.max_concurrent_nodes", 4)]:  # fmt: skip
        assert f"| `{key}` | `{json.dumps(default)}` |" in readme, key
    for entry in gen.parse((CHART / "values.yaml").read_text()):
        if not entry.section:
            assert f"| `{'.'.join(entry.path)}` |" in readme, entry.path
    assert values["agent"]["tolerations"], "the defaults the README shows"


def test_a_changed_comment_or_note_makes_the_check_fail(
    gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = tmp_path / "values.yaml"
    values.write_text((CHART / "values.yaml").read_text().replace("Tolerations added to the defaults", "Tolerations"))
    monkeypatch.setattr(gen, "VALUES", values)
    assert gen.main(["--check"]) == 1
    monkeypatch.setattr(gen, "VALUES", CHART / "values.yaml")
    changelog = tmp_path / "CHANGELOG.md"
    changelog.write_text(
        (ROOT / "CHANGELOG.md").read_text().replace("### Upgrade notes\n", "### Upgrade notes\n\n- new\n", 1)
    )
    monkeypatch.setattr(gen, "CHANGELOG", changelog)
    assert gen.main(["--check"]) == 1


def test_the_upgrade_notes_of_every_release_are_in_the_readme(gen: ModuleType) -> None:
    readme = (CHART / "README.md").read_text()
    notes = gen.upgrade_notes((ROOT / "CHANGELOG.md").read_text())
    assert "Metric renames" in notes and notes.strip() in readme
