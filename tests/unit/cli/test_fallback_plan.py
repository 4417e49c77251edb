"""`migctl plan` shows fallback nodes: per-GPU free VRAM, where pending migctl pods go, stranded leftovers."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from migctl.cli import cli
from tests.unit.fallback.test_fallback_capacity import pod, t4_node


def _snapshot(tmp_path: Path) -> Path:
    objs = [t4_node(), pod("running", "12Gi", "t4-1", gpu=0), pod("fits", "6Gi"), pod("giant", "20Gi")]
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": objs}))
    return path


def test_plan_json_has_a_fallback_section(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", "--snapshot", str(_snapshot(tmp_path)), "-o", "json"])
    assert result.exit_code == 0, result.output
    fb = json.loads(result.output)["fallback"]
    assert fb["resource"] == "migctl.io/vram" and fb["pending_pods"] == 2 and fb["pods_placed"] == 1
    assert fb["placements"] == [
        {"pod": "ns/fits", "node": "t4-1", "gpu": 1, "uuid": None, "request_mib": 6144, "free_after_mib": 9216}
    ]
    gpus = fb["nodes"][0]["gpus"]
    assert [(g["free_mib"], g["free_after_mib"]) for g in gpus] == [(3072, 3072), (15360, 9216)]
    assert [g["stranded_mib"] for g in gpus] == [3072, 0]  # 3 GiB on GPU 0 fits no pending pod (smallest: 6 GiB)
    assert fb["unplaced"][0]["pod"] == "ns/giant" and "no single GPU has 20 GiB" in fb["unplaced"][0]["reason"]


def test_plan_text_has_a_fallback_section(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["plan", "--snapshot", str(_snapshot(tmp_path)), "--explain"])
    assert result.exit_code == 0, result.output
    text = result.output
    assert "fallback (migctl.io/vram, GPUs without MIG): 1 nodes, 2 pending schedulerName: migctl pods" in text
    assert "gpu 0: 3072/15360 MiB free -> 3072 MiB, 3072 MiB stranded" in text
    assert "ns/fits" in text and "ns/giant: " in text
    assert "fallback summary: placed 1/2 pods; stranded 3072 MiB" in text
