"""One logging setup for every migctl component: plain text (key=value extras) or JSON lines, one line per decision.

Decision lines carry extras (`log.info(..., extra={"plan_id": ..., "node": ...})`), so a plan can be followed
across nodes and restarts with one grep. Every extra a caller passes is kept, in both formats: a formatter that
knew a fixed list of keys silently dropped the others.

The format and level come from the component's config (`controller.log_format`, `controller.log_level`: the one
setting every component reads), and the global `migctl --log-format/--log-level` flags win over it
(`set_overrides`, called by the command group before any subcommand configures its logging).
"""

from __future__ import annotations

import json
import logging
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

Format = Literal["text", "json"]
FORMATS: tuple[Format, ...] = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

# What every LogRecord carries by itself; anything else on a record came from `extra=`.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime", "taskName"}


def extras(record: logging.LogRecord) -> dict[str, Any]:
    """The `extra=` fields of a record, in the order given; empty ones (None, "") are left out."""
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD and v is not None and v != ""}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in extras(record).items():
            out.setdefault(key, value)  # an extra never overwrites the line's own fields
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        pairs = [f"{k}={v}" for k, v in extras(record).items()]
        return f"{line} [{' '.join(pairs)}]" if pairs else line


@dataclass
class _Overrides:
    fmt: Format | None = None
    level: str | None = None


_overrides = _Overrides()


def set_overrides(fmt: Format | None, level: str | None) -> None:
    """The global command-line flags: they win over every later `setup_logging` call's arguments."""
    _overrides.fmt, _overrides.level = fmt, level


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger (replacing earlier handlers); quiet chatty libraries. The global flags win."""
    fmt = _overrides.fmt or fmt
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(_overrides.level or level)
    for noisy in ("apscheduler", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
