"""The `migctl` command line: one entry point, subcommands per area (profiles, plan, ...).

A subcommand's module is imported when that subcommand runs (or `--help` lists it), not at every start: each
pulls in its own component (the controller, the webhook, the simulator, ...), and `migctl plan` on a snapshot
should not pay for the others' imports.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from migctl import __version__
from migctl.cli.output import fail
from migctl.errors import InputError, LayoutError
from migctl.logsetup import FORMATS, LEVELS, Format, set_overrides, setup_logging

# name -> (module, attribute): where each subcommand lives.
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "agent": ("migctl.cli.agent", "agent_command"),
    "fallback": ("migctl.cli.fallback", "fallback_command"),
    "plan": ("migctl.cli.plan", "plan_command"),
    "profiles": ("migctl.cli.profiles", "profiles"),
    "run": ("migctl.cli.run", "run_command"),
    "simulate": ("migctl.cli.simulate", "simulate_command"),
    "status": ("migctl.cli.status", "status_command"),
    "webhook": ("migctl.cli.webhook", "webhook_command"),
}


class _Group(click.Group):
    """Loads subcommands on demand (`SUBCOMMANDS`), and turns migctl's own errors into one clear paragraph on
    stderr and exit code 2."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *SUBCOMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in SUBCOMMANDS:
            module, attribute = SUBCOMMANDS[cmd_name]
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command) or command.name != cmd_name:
                raise RuntimeError(f"{module}.{attribute} is not the click command {cmd_name!r}")
            self.add_command(command)
        return super().get_command(ctx, cmd_name)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (InputError, LayoutError) as e:
            fail(str(e))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="migctl", message="%(prog)s %(version)s")
@click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default=None,
    help="Log line format of any command (default: controller.log_format of the config, else text).",
)
@click.option(
    "--log-level",
    type=click.Choice(LEVELS, case_sensitive=False),
    default=None,
    help="Root log level of any command (default: controller.log_level of the config, else INFO).",
)
def cli(log_format: Format | None, log_level: str | None) -> None:
    """migctl: plans and applies MIG layouts so pending GPU pods fit and no memory is stranded.

    --log-format and --log-level go before the command (`migctl --log-level DEBUG agent`) and win over the
    config file, for the daemons (run, agent, webhook, fallback) and the one-shot commands alike.
    """
    set_overrides(log_format, log_level.upper() if log_level else None)
    if log_format or log_level:
        setup_logging()


@cli.command()
def version() -> None:
    """Print the migctl version."""
    click.echo(f"migctl {__version__}")


def main() -> None:
    cli(prog_name="migctl")


def kubectl_main() -> None:
    """The `kubectl-migctl` entry point: kubectl runs it for `kubectl migctl ...` (a kubectl plugin is any
    executable named kubectl-<name> on PATH). The same commands; usage and errors say `kubectl migctl`."""
    cli(prog_name="kubectl migctl")


if __name__ == "__main__":  # pragma: no cover
    main()
