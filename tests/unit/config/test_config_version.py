"""The config file's `version` (issue 33): absent reads as v1, v1 is accepted, another version is refused with an
error that names the field and what this migctl reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from migctl.config import load_config
from migctl.errors import InputError


def test_a_config_of_another_version_is_refused_and_v1_or_none_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("planner:\n  evictions: lower-priority\n")
    legacy = load_config(path, {})
    path.write_text("version: v1\nplanner:\n  evictions: lower-priority\n")
    assert load_config(path, {}) == legacy and legacy.version == "v1"
    path.write_text("version: v2\nplanner:\n  evictions: lower-priority\n")
    with pytest.raises(InputError, match=r"version.*'v1'"):
        load_config(path, {})
