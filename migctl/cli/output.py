"""Small output helpers shared by the subcommands (tables, JSON and YAML, errors and exit codes).

Every command ends an error the same way (README "Commands"): one paragraph on stderr that starts with `error: `,
and exit code 2 for a usage or input problem a person fixes in the command line, a file or the credentials
(`EXIT_USAGE`), 1 for a failure while running: the API server refused or could not be reached, NVML failed
(`EXIT_RUNTIME`). `migctl agent apply` adds 3 (blocked by an instance in use).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _quote  # json.dumps of a str
from types import FrameType
from typing import IO, Any, NoReturn

import click

from migctl.errors import InputError, LayoutError, MigctlError

EXIT_RUNTIME, EXIT_USAGE = 1, 2

OUTPUT_OPTION = click.option(
    "--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True, help="Output format."
)
# plan and status, shaped like kubectl get: yaml is the JSON document as YAML, wide the text with more columns.
FORMATS = ("text", "json", "yaml", "wide")
FORMAT_OPTION = click.option(
    "--output",
    "-o",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="Output format: text, json (stable schema), yaml (the same document), wide (text with more columns).",
)


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print one paragraph and exit (the usage-error code unless told otherwise)."""
    click.echo(f"error: {message}", err=True)
    raise SystemExit(code)


def exit_code(e: MigctlError) -> int:
    """EXIT_USAGE for what the person running the command fixes (bad input, a layout that cannot exist, no usable
    credentials), EXIT_RUNTIME for the rest (the API server, NVML, the journal)."""
    if isinstance(e, InputError | LayoutError):
        return EXIT_USAGE
    # CredentialsError lives in the Kubernetes adapter, which imports the client: an error can only be one once
    # that module is loaded, so a command that never talks to a cluster never imports it here.
    kube = sys.modules.get("migctl.adapters.kube.errors")
    if kube is not None and isinstance(e, kube.CredentialsError):
        return EXIT_USAGE
    return EXIT_RUNTIME


def fail_on(e: MigctlError) -> NoReturn:
    fail(str(e), exit_code(e))


class UsageError(click.UsageError):
    """click's usage error, shown with migctl's `error: ` prefix (click writes `Error: `); the usage line and the
    --help hint stay."""

    def show(self, file: IO[Any] | None = None) -> None:
        if self.ctx is not None:
            helps = self.ctx.command.get_help_option(self.ctx) is not None
            hint = f"Try '{self.ctx.command_path} --help' for help.\n" if helps else ""
            click.echo(f"{self.ctx.get_usage()}\n{hint}", file=file, err=True)
        click.echo(f"error: {self.format_message()}", file=file, err=True)


def _usage(e: click.UsageError, ctx: click.Context) -> click.UsageError:
    if isinstance(e, UsageError | click.exceptions.NoArgsIsHelpError):
        return e
    return UsageError(e.format_message(), e.ctx or ctx)


class _Ends:
    """Bad options and migctl's own errors end as described at the top of this module (click's `Error: ` usage
    errors included)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)  # type: ignore[misc, no-any-return]
        except click.UsageError as e:
            raise _usage(e, ctx) from e

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except click.UsageError as e:
            raise _usage(e, ctx) from e
        except MigctlError as e:
            fail_on(e)


class Command(_Ends, click.Command):
    """A migctl command (`@click.command(cls=Command)`)."""


class Group(_Ends, click.Group):
    """A migctl command group; its subcommands are `Command`s."""

    command_class = Command


# A row of a long list whose rows share most of their keys: the object {**own, **shared}, where `shared` is one
# dict for all the rows it serves (the VRAM section: one decision for the pods of a kind).
SharedRow = tuple[Mapping[str, Any], Mapping[str, Any]]

# `json.dumps` without its check for circular references, which costs a tenth of encoding a 1,000-node plan: what
# is written here is a tree of fresh dicts and lists (a cycle would recurse until RecursionError instead).
_encode = json.JSONEncoder(check_circular=False).encode


def emit_json(data: Any, rows: Mapping[str, Sequence[SharedRow]] | None = None) -> None:
    """`data`, with `rows` as its last keys. Indented on a terminal; compact into a pipe or file, where C's
    encoder writes it (a 1,000-node plan is 7 MB: indenting it in Python took longer than reading the
    snapshot), and each shared dict of `rows` is encoded once, not once per row (`compact_json`)."""
    rows = rows or {}
    if sys.stdout.isatty():
        whole = {**data, **{k: [{**own, **shared} for own, shared in v] for k, v in rows.items()}}
        click.echo(json.dumps(whole, indent=2, sort_keys=False))
        return
    out = sys.stdout  # not click.echo: its pass stripping colour codes over 7 MB finds none (JSON escapes them)
    out.write(compact_json(data, rows) + "\n")
    out.flush()


def compact_json(data: Mapping[str, Any], rows: Mapping[str, Sequence[SharedRow]]) -> str:
    """`json.dumps({**data, **{key: [{**own, **shared} for own, shared in v] ...}})`, the same text, with the
    encoding of each `shared` dict (by identity) spliced into every row it serves."""
    text = _encode(data)
    if not rows:
        return text
    if not isinstance(data, dict) or rows.keys() & data.keys():
        raise ValueError("rows must be new top-level keys of a JSON object")
    parts = [text[:-1]]
    for key, items in rows.items():
        done: dict[int, tuple[Mapping[str, Any], str]] = {}  # id -> (the dict, kept: its id stays its own; text)
        encoded = []
        for own, shared in items:
            hit = done.get(id(shared))
            if hit is None:
                hit = done[id(shared)] = (shared, _encode(shared)[1:-1])
            head = _members(own) if own.keys().isdisjoint(shared) else None
            if head is None:  # a key in both (the shared value wins, at the own key's place), or not a str key
                encoded.append(_encode({**own, **shared}))
            else:
                encoded.append(f"{{{head}{', ' if head and hit[1] else ''}{hit[1]}}}")
        parts.append(f"{', ' if len(parts) > 1 or data else ''}{_encode(key)}: [{', '.join(encoded)}]")
    return "".join(parts) + "}"


def emit(fmt: str, data: Any, rows: Mapping[str, Sequence[SharedRow]] | None = None) -> None:
    """`data` (with `rows`, as `emit_json`) as JSON, or as YAML: the same document, read back from its JSON so
    both carry exactly the same keys and values."""
    if fmt == "yaml":
        import yaml  # only here: every command imports this module

        doc = json.loads(compact_json(data, rows or {}))
        dumper: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        click.echo(yaml.dump(doc, Dumper=dumper, sort_keys=False, allow_unicode=True), nl=False)
    else:
        emit_json(data, rows)


def _members(obj: Mapping[str, Any]) -> str | None:
    """`json.dumps(obj)` without its braces; strings through the encoder's own C function (a json.dumps call per
    row costs more than the row); None for a key that is not a str (json.dumps converts those)."""
    out = []
    for k, v in obj.items():
        if type(k) is not str:
            return None
        out.append(f"{_quote(k)}: {_quote(v) if type(v) is str else _encode(v)}")
    return ", ".join(out)


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
