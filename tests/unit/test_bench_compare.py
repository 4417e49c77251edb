"""bench.compare: the same revision on both sides must give identical plans, although each side is its own process
with its own hash seed (so a plan that depended on set or dict order of strings would show up here)."""

from __future__ import annotations

import pytest

from bench import compare


def test_head_against_itself_plans_identically(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["HEAD", "--random", "2", "--trace", "0", "--no-scale"]) == 0
    out = capsys.readouterr().out
    assert "2/2 plans identical" in out
    assert out.count(" same ") == 2
