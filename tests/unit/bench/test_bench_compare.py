"""bench.compare: the same revision on both sides must give identical plans, although each side is its own process
with its own hash seed (so a plan that depended on set or dict order of strings would show up here)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import compare


def test_head_against_itself_plans_identically(capsys: pytest.CaptureFixture[str]) -> None:
    assert compare.main(["HEAD", "--random", "2", "--trace", "0", "--no-scale"]) == 0
    out = capsys.readouterr().out
    assert "2/2 plans identical" in out
    assert out.count(" same ") == 2


def test_a_stopped_comparison_removes_its_worktree() -> None:
    """SIGTERM (a timeout, a Ctrl-C from a supervisor) must not leave the other revision's worktree behind."""
    root = Path(__file__).resolve().parents[3]

    def worktrees() -> int:
        out = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True, check=True)
        return len(out.stdout.splitlines())

    before = worktrees()
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.compare", "HEAD", "--random", "50", "--trace", "0", "--no-scale"],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    proc.stdout.readline()  # one plan compared: both sides run, the worktree exists
    assert worktrees() == before + 1
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert worktrees() == before
