"""Small output helpers shared by the subcommands (tables, JSON, errors)."""

from __future__ import annotations

import json
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from json.encoder import encode_basestring_ascii as _quote  # json.dumps of a str
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
