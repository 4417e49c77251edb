"""Leader election on a coordination.k8s.io/v1 Lease, the way client-go does it.

A replica leads while it renews the Lease every `retry_period_s`. Followers take over only after seeing no
change of the Lease record for `lease_duration_s` (measured on their own monotonic clock, so clock skew between
machines does not matter). A leader that cannot renew for `renew_deadline_s` (< lease duration), or that finds
another holder, calls `on_stopped` at once: the controller stops every write before a follower can take over.
Writes are compare-and-swap on resourceVersion, so two replicas can never both win one round.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import LeaderApi
from migctl.adapters.lease import lease_view, new_lease, released, renewed
from migctl.config import LeaderElectionSettings

log = logging.getLogger(__name__)


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}"


def _micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        kube: LeaderApi,
        settings: LeaderElectionSettings,
        identity: str,
        on_started: Callable[[], None],
        on_stopped: Callable[[], None],
    ) -> None:
        self.kube, self.settings, self.identity = kube, settings, identity
        self.on_started, self.on_stopped = on_started, on_stopped
        self.leading = False
        self._stop = threading.Event()
        self._observed: tuple[object, ...] | None = None
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.thread = threading.Thread(target=self._run, name="leader-election", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, release: bool = True) -> None:
        """Stop campaigning; with `release`, hand the Lease back so a follower takes over at once."""
        self._stop.set()
        self.thread.join(timeout=10)
        if self.leading:
            self._lost("stopped")
            if release:
                self._release()

    def _lost(self, why: str) -> None:
        if self.leading:
            self.leading = False
            log.warning("leadership lost (%s): stop acting", why)
            self.on_stopped()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                result = self._try()
            except KubeError as e:
                log.warning("lease %s/%s: %s", self.settings.lease_namespace, self.settings.lease_name, e)
                result = "error"
            now = time.monotonic()
            if result == "leading":
                self._last_renew = now
                if not self.leading:
                    self.leading = True
                    log.info("became leader (%s)", self.identity)
                    self.on_started()
            elif result == "other":
                self._lost("another replica holds the lease")
            elif self.leading and now - self._last_renew > self.settings.renew_deadline_s:
                self._lost(f"could not renew for {self.settings.renew_deadline_s} s")
            self._stop.wait(self.settings.retry_period_s)

    def _try(self) -> str:
        """One round: `leading`, `other` (held by another replica) or `error`."""
        s = self.settings
        lease = self.kube.read_lease(s.lease_namespace, s.lease_name)
        now = _micro_time()
        duration = max(1, math.ceil(s.lease_duration_s))
        if lease is None:
            body = new_lease(s.lease_name, s.lease_namespace, self.identity, duration, now)
            try:
                self.kube.write_lease(s.lease_namespace, body, create=True)
            except KubeError as e:
                if e.status == 409:
                    return "other"
                raise
            return "leading"
        view = lease_view(lease)
        holder = view.holder
        if view.record != self._observed:
            self._observed, self._observed_at = view.record, time.monotonic()
        if holder and holder != self.identity and time.monotonic() - self._observed_at < s.lease_duration_s:
            return "other"
        try:
            self.kube.write_lease(s.lease_namespace, renewed(lease, self.identity, duration, now), create=False)
        except KubeError as e:
            if e.status == 409:
                return "other" if holder != self.identity else "error"
            raise
        return "leading"

    def _release(self) -> None:
        s = self.settings
        try:
            lease = self.kube.read_lease(s.lease_namespace, s.lease_name)
            if lease and lease_view(lease).holder == self.identity:
                self.kube.write_lease(s.lease_namespace, released(lease), create=False)
        except KubeError as e:
            log.warning("could not release the lease: %s", e)
