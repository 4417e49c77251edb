"""The `migctl` command line: one entry point, subcommands per area (profiles, plan, ...)."""

from __future__ import annotations

from typing import Any

import click

from migctl import __version__
from migctl.cli.agent import agent_command
from migctl.cli.fallback import fallback_command
from migctl.cli.output import fail
from migctl.cli.plan import plan_command
from migctl.cli.profiles import profiles
from migctl.cli.run import run_command
from migctl.cli.simulate import simulate_command
from migctl.cli.webhook import webhook_command
from migctl.errors import InputError, LayoutError


class _Group(click.Group):
    """Turns migctl's own errors into one clear paragraph on stderr and exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (InputError, LayoutError) as e:
            fail(str(e))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="migctl", message="%(prog)s %(version)s")
def cli() -> None:
    """migctl: plans and applies MIG layouts so pending GPU pods fit and no memory is stranded."""


@cli.command()
def version() -> None:
    """Print the migctl version."""
    click.echo(f"migctl {__version__}")


cli.add_command(profiles)
cli.add_command(plan_command)
cli.add_command(simulate_command)
cli.add_command(run_command)
cli.add_command(agent_command)
cli.add_command(fallback_command)
cli.add_command(webhook_command)


def main() -> None:
    cli(prog_name="migctl")


if __name__ == "__main__":  # pragma: no cover
    main()
