"""The agent's journal and layout record: versioned by the one rule of `wire/versions.py`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migctl.agent.journal import Journal, JournalError, LayoutRecord, Spot
from migctl.core.inplace.steps import Found

BEFORE = Found("1g.10gb", 19, 0, 1, 3, 0, "MIG-a")


def test_round_trip_writes_v1(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.begin("GPU-0", 0, [BEFORE])
    j.step("GPU-0", "destroy", Spot.of(BEFORE))
    (entry,) = j.entries()
    assert entry.before == (Spot.of(BEFORE),) and entry.steps == (("destroy", Spot.of(BEFORE)),)
    assert json.loads(j.path.read_text())["version"] == "v1"
    LayoutRecord(tmp_path).write("GPU-0", [BEFORE])
    assert LayoutRecord(tmp_path).read() == {"GPU-0": (Spot.of(BEFORE),)}


def test_an_unversioned_file_reads_as_v1(tmp_path: Path) -> None:
    rec = LayoutRecord(tmp_path)
    rec.write("GPU-0", [BEFORE])
    data = json.loads(rec.path.read_text())
    del data["version"]
    rec.path.write_text(json.dumps(data))
    assert rec.read() == {"GPU-0": (Spot.of(BEFORE),)}


@pytest.mark.parametrize("version", ["v2", 1, None])
def test_another_versions_journal_stops_the_agent_and_says_why(tmp_path: Path, version: object) -> None:
    j = Journal(tmp_path)
    j.begin("GPU-0", 0, [BEFORE])
    j.path.write_text(json.dumps({**json.loads(j.path.read_text()), "version": version}))
    with pytest.raises(JournalError, match="was written by another migctl version"):
        j.entries()


def test_not_an_object(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.path.write_text("[1]")
    with pytest.raises(JournalError, match="expected a JSON object, got list"):
        j.entries()
