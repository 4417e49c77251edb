"""Small output helpers shared by the subcommands (tables, JSON, errors)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

import click

OUTPUT_OPTION = click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)


def fail(message: str) -> NoReturn:
    """Print one paragraph and exit with the usage-error code."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(2)


def emit_json(data: Any) -> None:
    """Indented on a terminal; compact into a pipe or file, where C's encoder writes it (a 1,000-node plan is
    11 MB: indenting it in Python took longer than reading the snapshot)."""
    tty = sys.stdout.isatty()
    click.echo(json.dumps(data, indent=2 if tty else None, sort_keys=False))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain aligned text table (no third-party dependency needed for this much)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in r] for r in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(lines)


def stop_on_signals() -> threading.Event:
    """An event that SIGTERM (the kubelet stopping the pod) and SIGINT set: long-running commands stop cleanly."""
    stop = threading.Event()

    def _set(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _set)
    signal.signal(signal.SIGINT, _set)
    return stop
