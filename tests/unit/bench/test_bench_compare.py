"""bench.compare: the same revision on both sides must give identical plans, although each side is its own process
with its own hash seed (so a plan that depended on set or dict order of strings would show up here)."""

from __future__ import annotations

import os
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


# Appended to the planner's package in a commit made for the test: every plan loses its first assignment.
_DROP_ONE = """

import dataclasses as _dataclasses

_real_plan = plan


def plan(*args, **kwargs):  # injected by tests/unit/bench/test_bench_compare.py
    result = _real_plan(*args, **kwargs)
    return _dataclasses.replace(result, assignments=result.assignments[1:])
"""


def _commit_with_a_different_planner(root: Path, tmp: Path) -> str:
    """A commit (on no branch: only its id is returned) of HEAD with `_DROP_ONE` added to the planner, made
    with git's plumbing through a private index, so the checkout, its index and its branches stay as they were."""
    env = {**os.environ, "GIT_INDEX_FILE": str(tmp / "index")}

    def git(*args: str, stdin: str | None = None) -> str:
        out = subprocess.run(["git", *args], cwd=root, env=env, input=stdin, capture_output=True, text=True, check=True)
        return out.stdout.strip()

    path = "migctl/core/planner/__init__.py"
    git("read-tree", "HEAD")
    blob = git("hash-object", "-w", "--stdin", stdin=git("show", f"HEAD:{path}") + "\n" + _DROP_ONE)
    git("update-index", "--cacheinfo", f"100644,{blob},{path}")
    tree = git("write-tree")
    return git("commit-tree", tree, "-p", "HEAD", "-m", "test: a planner whose plans differ", stdin="")


def test_a_revision_whose_plans_differ_is_reported_different(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The comparison must see a real difference: against a planner that drops one assignment from every plan,
    no plan is identical and the exit status says so (a comparison that always said "same" would pass HEAD)."""
    rev = _commit_with_a_different_planner(Path(__file__).resolve().parents[3], tmp_path)
    assert compare.main([rev, "--random", "2", "--trace", "0", "--no-scale"]) == 1
    out = capsys.readouterr().out
    assert "0/2 plans identical; different: " in out
    assert out.count(" DIFFERENT ") == 2


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
