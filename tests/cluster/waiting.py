"""Polling for conditions in the real control plane: one helper, so every test waits (and fails) the same way."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(what: str, check: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; the error says what was awaited and the last answer."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
