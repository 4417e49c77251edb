"""docs/configuration.md and the chart's config schema are generated from `migctl.config.Config` and cannot drift."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

from migctl.config import Config

REPO = Path(__file__).resolve().parents[3]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_config_docs", REPO / "hack" / "gen-config-docs.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_committed_configuration_md_is_generated_output() -> None:
    gen = _generator()
    committed = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    assert committed == gen.render_markdown(), "docs/configuration.md is stale: run hack/gen-config-docs.py"


def test_committed_values_schema_carries_the_model() -> None:
    gen = _generator()
    path = REPO / "deploy" / "helm" / "migctl" / "values.schema.json"
    current = path.read_text(encoding="utf-8")
    assert current == gen.render_schema(current), "values.schema.json is stale: run hack/gen-config-docs.py"


def _leaves(schema: dict, prefix: str = "") -> set[str]:
    out = set()
    for key, prop in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        out |= _leaves(prop, path + ".") if "properties" in prop else {path}
    return out


def test_every_field_is_documented_with_its_default() -> None:
    gen = _generator()
    text = gen.render_markdown()
    schema = gen.model_schema(Config)
    leaves = _leaves(schema)
    assert "controller.leader_election.lease_duration_s" in leaves and "agent.health_port" in leaves
    for path in leaves:
        section, _, key = path.rpartition(".")
        assert f"| `{key}` |" in text or f"### `{key}`" in text, path
    for section in ("planner", "gpu_operator", "controller", "controller.leader_election", "agent", "fallback"):
        assert f"### `{section}`" in text
    assert "| `max_concurrent_nodes` | int | `4` | ≥ 1 |" in text


def test_schema_rejects_what_the_model_rejects() -> None:
    """The generated JSON Schema is strict where the model is (unknown keys, enums) and Helm-friendly (no refs)."""
    schema = _generator().model_schema(Config)
    controller = schema["properties"]["controller"]
    assert controller["additionalProperties"] is False
    assert schema["properties"]["planner"]["properties"]["evictions"]["enum"] == ["none", "lower-priority"]
    assert "$ref" not in json.dumps(schema), "refs must be inlined for Helm"
