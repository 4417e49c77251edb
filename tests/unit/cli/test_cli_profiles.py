"""`migctl profiles ...` end to end through click, including exit codes for bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from click.testing import CliRunner

from migctl.cli import cli
from migctl.core.hardware.catalog import default_profiles_dir
from tests.unit.core.hardware.test_geometry import brute_force


def run(*args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.stdout, res.stderr


def test_layouts_json_matches_brute_force() -> None:
    code, out, _ = run("profiles", "layouts", "a100-40gb", "--output", "json")
    assert code == 0
    data = json.loads(out)
    listed = {tuple(sorted(d["profiles"].items())) for d in data["layouts"]}
    assert listed == brute_force("a100-40gb")
    assert data["count"] == len(listed)
    for d in data["layouts"]:
        assert d["unusable_mib"] == data["full_gpu_mib"] - d["instance_mib"] or d["unusable_mib"] == 0


def test_validate_passes_on_shipped_catalog() -> None:
    code, out, _ = run("profiles", "validate")
    assert code == 0
    assert "valid" in out


def test_validate_fails_with_exit_2_and_a_precise_message(tmp_path: Path) -> None:
    target = tmp_path / "p"
    shutil.copytree(default_profiles_dir(), target)
    f = target / "a30-24gb.yaml"
    data = yaml.safe_load(f.read_text())
    data["model"]["profiles"][0]["max_instances"] = 5
    f.write_text(yaml.safe_dump(data))
    code, _, err = run("profiles", "validate", str(target))
    assert code == 2
    assert "a30-24gb.yaml" in err
    assert "model.profiles[0].max_instances" in err


def test_show_and_list() -> None:
    code, out, _ = run("profiles", "show", "h200-141gb")
    assert code == 0
    assert "nvidia.com/mig-1g.18gb" in out
    code, out, _ = run("profiles", "list", "-o", "json")
    assert code == 0
    assert "rtx-pro-6000-blackwell-96gb" in {m["id"] for m in json.loads(out)}


def test_unknown_model_exit_code() -> None:
    code, _, err = run("profiles", "show", "nope")
    assert code == 2
    assert "unknown GPU model 'nope'" in err


def test_version() -> None:
    code, out, _ = run("version")
    assert code == 0
    assert out.startswith("migctl ")


def test_version_flag_prints_the_same_as_the_subcommand() -> None:
    from migctl import __version__

    code, out, _ = run("--version")
    assert code == 0
    assert out.strip() == f"migctl {__version__}" == run("version")[1].strip()
