"""One logging setup for migctl: plain text (key=value extras) or JSON lines, one line per decision.

Decision lines carry `plan_id` and `node` extras (`log.info(..., extra={"plan_id": ..., "node": ...})`), so a
plan can be followed across nodes and restarts with one grep.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

EXTRAS = ("plan_id", "node", "phase", "decision", "pod")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key in EXTRAS:
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        extras = [f"{k}={getattr(record, k)}" for k in EXTRAS if getattr(record, k, None)]
        return f"{line} [{' '.join(extras)}]" if extras else line


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger once (replacing earlier handlers); quiet chatty libraries."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("apscheduler", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
