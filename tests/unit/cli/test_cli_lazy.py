"""The command group loads each subcommand's module when it runs: every subcommand is still reachable and
listed by --help, and `migctl plan` imports no other subcommand's module."""

from __future__ import annotations

import subprocess
import sys

import click
from click.testing import CliRunner

from migctl import __version__
from migctl.cli import SUBCOMMANDS, cli


def test_every_subcommand_is_reachable_by_its_name() -> None:
    runner = CliRunner()
    ctx = click.Context(cli)
    for name in SUBCOMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
        result = runner.invoke(cli, [name, "--help"], prog_name="migctl")
        assert result.exit_code == 0, result.output
        assert f"Usage: migctl {name}" in result.output


def _migctl(*args: str) -> str:
    """A fresh process: no subcommand loaded yet (this process's tests load them into the one group)."""
    code = "from migctl.cli import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout


def test_help_lists_every_subcommand_and_the_version_works() -> None:
    output = _migctl("--help")
    listed = [line.split()[0] for line in output.split("Commands:")[1].splitlines() if line.strip()]
    assert listed == sorted([*SUBCOMMANDS, "version"])
    assert _migctl("--version") == f"migctl {__version__}\n"
    runner = CliRunner()
    for args in (["--version"], ["version"]):
        result = runner.invoke(cli, args)
        assert result.exit_code == 0 and result.output == f"migctl {__version__}\n"


def test_an_unknown_subcommand_is_still_a_usage_error() -> None:
    result = CliRunner().invoke(cli, ["planx"])
    assert result.exit_code == 2 and "No such command 'planx'" in result.output


def test_plan_imports_only_its_own_subcommand_module() -> None:
    code = (
        "import sys\n"
        "from migctl.cli import main\n"
        "before = sorted(m for m in sys.modules if m.startswith('migctl.cli.'))\n"
        "sys.argv = ['migctl', 'plan', '--example', '-o', 'json']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "after = sorted(m for m in sys.modules if m.startswith('migctl.cli.'))\n"
        "print(before, after, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = done.stderr.strip().split("] [")
    assert before == "['migctl.cli.output'"
    # plan reads its input through inputs.py and uses --profiles-dir
    assert after == "'migctl.cli.inputs', 'migctl.cli.output', 'migctl.cli.plan', 'migctl.cli.profiles']"
