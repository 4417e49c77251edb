"""Error types shared by the core and the edges.

An `InputError` is bad input a person can fix: it always says which file (or object), which field path, and
what was expected. The CLI prints it as one paragraph and exits with code 2.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

MAX_LISTED = 20  # problems one message lists (hostile input can have millions)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an input: where (a field path) and what was expected."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class MigctlError(Exception):
    """Base class of every error migctl raises on purpose."""


class InputError(MigctlError):
    """Bad input (a file, a snapshot, a quantity): names the source, the field path and what was expected."""

    def __init__(self, source: str, problems: Sequence[Problem] | str) -> None:
        self.source = source
        self.problems: tuple[Problem, ...] = (Problem("", problems),) if isinstance(problems, str) else tuple(problems)
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.source}: {self.problems[0]}"
        listed = "; ".join(str(p) for p in self.problems[:MAX_LISTED])
        more = f"; and {len(self.problems) - MAX_LISTED} more" if len(self.problems) > MAX_LISTED else ""
        return f"{self.source}: {len(self.problems)} problems: {listed}{more}"


class LayoutError(MigctlError):
    """A MIG layout that cannot exist on a GPU model (the reason says which rule it breaks)."""


def loc_to_path(loc: Iterable[int | str], prefix: str = "") -> str:
    """Turn a pydantic error location into `a.b[2].c` form."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def from_validation_error(source: str, err: ValidationError, prefix: str = "") -> InputError:
    """Translate pydantic's error list into an InputError with field paths and expectations."""
    problems = []
    for e in err.errors(include_url=False):
        loc = [p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-"))]
        got = e.get("input")
        msg = e["msg"]
        if e["type"] == "extra_forbidden":
            msg = "unknown field (not part of the schema)"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif got is not None and not isinstance(got, dict | list):
            msg = f"{msg} (got {got!r})"
        problems.append(Problem(loc_to_path(loc, prefix), msg))
    return InputError(source, problems)
