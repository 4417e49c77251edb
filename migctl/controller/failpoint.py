"""Failpoints: make `migctl run` die hard at one named step, to test that a new process converges from there.

`MIGCTL_FAILPOINT=<step>[@<n>]` (a name from `actuator.STEPS`; `n`: the n-th time the step is reached, default
1) makes the process SIGKILL itself at that step: no cleanup, no Lease release, no `finally`, exactly like the
OOM killer or a node failure. Read once when `migctl run` starts; unset (the default) it installs nothing, so
production code paths are unchanged. Why a failpoint and not a timed kill: the interesting crashes sit between
two API writes a few milliseconds apart (docs/testing.md).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Mapping

from migctl.controller.actuator import STEPS, Hook
from migctl.errors import InputError

ENV = "MIGCTL_FAILPOINT"
log = logging.getLogger(__name__)


def parse_failpoint(value: str) -> tuple[str, int]:
    """`step[@n]` -> (step, n); InputError naming the variable for an unknown step or a bad count."""
    step, _, count = value.strip().partition("@")
    if step not in STEPS:
        raise InputError(ENV, f"unknown step {step!r}; expected one of {', '.join(STEPS)} (optionally @N)")
    if count and not (count.isascii() and count.isdigit() and 0 < int(count) <= 1000):
        raise InputError(ENV, f"count {count!r} after '@' must be a whole number from 1 to 1000")
    return step, int(count or 1)


def failpoint_hook(environ: Mapping[str, str] = os.environ) -> Hook | None:
    """The hook for `migctl run`: None unless the variable is set."""
    value = environ.get(ENV, "")
    if not value:
        return None
    step, nth = parse_failpoint(value)
    seen = [0]
    lock = threading.Lock()
    log.warning("failpoint armed: the process kills itself at step %s (occurrence %d)", step, nth)

    def hook(name: str, at: str) -> None:
        if at != step:
            return
        with lock:
            seen[0] += 1
            if seen[0] != nth:
                return
        log.warning("failpoint %s reached on %s: SIGKILL", step, name)
        for h in logging.getLogger().handlers:
            h.flush()
        os.kill(os.getpid(), signal.SIGKILL)

    return hook
