"""Is migctl's controller alive? Its leader-election Lease, read in the background, for the queue gate.

The webhook gates a pod only while a controller that lifts gates is running: its Lease has a holder and was
renewed within its lease duration (times `SLACK`, for the clocks of two machines and the read's age). The Lease
is read every `interval_s` on the webhook's timer loop, never per request; a reading counts for `2 * interval_s`
only, and a Lease that cannot be read, or none at all, means "not alive": the webhook fails open and gates
nobody (a pod must never be held by a migctl that is not running). With leader election off the controller
writes no Lease, so nothing is gated.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from migctl.adapters.lease import lease_view
from migctl.config import LeaderElectionSettings

log = logging.getLogger(__name__)
SLACK = 1.5


class LeaseApi(Protocol):
    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...


def fresh(lease: dict[str, Any] | None, now: float, slack: float = SLACK) -> str:
    """ "" when `lease` was renewed by a holder within its duration times `slack` before `now`; else why not."""
    return "no Lease" if lease is None else lease_view(lease).fresh(now, slack)


class LeaseWatch:
    """`refresh()` reads the Lease (the timer loop calls it); `alive()` answers from the last reading."""

    def __init__(
        self, kube: LeaseApi, settings: LeaderElectionSettings, clock: Callable[[], float] = time.time
    ) -> None:
        self.kube, self.settings, self.clock = kube, settings, clock
        self.interval_s = max(1.0, settings.lease_duration_s / 3)
        self._alive_at: float | None = None  # when the last reading found a fresh Lease (None: it did not)
        self.why = "not read yet"

    def refresh(self) -> None:
        s = self.settings
        try:
            lease = self.kube.read_lease(s.lease_namespace, s.lease_name)
        except Exception as e:  # fail open: no reading, no gate
            self._alive_at, why = None, f"cannot read Lease {s.lease_namespace}/{s.lease_name}: {e}"
        else:
            now = self.clock()
            why = fresh(lease, now)
            self._alive_at = None if why else now
        if why != self.why:
            log.info("queue gate: %s", f"gating (controller alive: {s.lease_namespace}/{s.lease_name})" if not why
                     else f"not gating: {why}")  # fmt: skip
        self.why = why

    def alive(self) -> bool:
        at = self._alive_at
        return at is not None and self.clock() - at <= 2 * self.interval_s
