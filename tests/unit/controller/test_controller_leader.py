"""Lease leader election against an in-memory Lease with real compare-and-swap semantics."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

from migctl.adapters.kube.errors import ConflictError, TransientError
from migctl.config import LeaderElectionSettings
from migctl.controller.leader import LeaderElector

FAST = LeaderElectionSettings(lease_duration_s=0.6, renew_deadline_s=0.4, retry_period_s=0.05)


class FakeLeases:
    """One Lease; writes must carry the current resourceVersion (409 otherwise); `down` makes calls fail."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.down = False
        self.lock = threading.Lock()

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        if self.down:
            raise TransientError("read lease", 503, "down")
        with self.lock:
            return copy.deepcopy(self.lease)

    def write_lease(self, namespace: str, body: dict[str, Any], create: bool) -> dict[str, Any]:
        if self.down:
            raise TransientError("write lease", 503, "down")
        with self.lock:
            if create and self.lease is not None:
                raise ConflictError("create lease", 409, "exists")
            if not create and body["metadata"].get("resourceVersion") != str(self.rv):
                raise ConflictError("write lease", 409, "conflict")
            self.rv += 1
            self.lease = copy.deepcopy(body)
            self.lease["metadata"]["resourceVersion"] = str(self.rv)
            return copy.deepcopy(self.lease)


def _elector(leases: FakeLeases, ident: str, log: list[str]) -> LeaderElector:
    return LeaderElector(
        leases,  # type: ignore[arg-type]
        FAST,
        ident,
        on_started=lambda: log.append(f"{ident}+"),
        on_stopped=lambda: log.append(f"{ident}-"),
    )


def _wait(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_one_leader_then_failover_after_expiry() -> None:
    leases, log = FakeLeases(), []
    a, b = _elector(leases, "a", log), _elector(leases, "b", log)
    a.start()
    _wait(lambda: a.leading)
    b.start()
    time.sleep(FAST.lease_duration_s * 1.5)  # b must stay a follower while a renews
    assert not b.leading and log == ["a+"]
    crashed = time.monotonic()
    a.stop(release=False)
    _wait(lambda: b.leading)
    assert time.monotonic() - crashed >= FAST.lease_duration_s * 0.8
    assert leases.lease is not None and leases.lease["spec"]["holderIdentity"] == "b"
    assert leases.lease["spec"]["leaseTransitions"] == 1
    b.stop()


def test_leader_that_cannot_renew_stops_acting_before_the_lease_expires() -> None:
    leases, log = FakeLeases(), []
    a = _elector(leases, "a", log)
    a.start()
    _wait(lambda: a.leading)
    leases.down = True
    down = time.monotonic()
    _wait(lambda: "a-" in log)  # `leading` drops just before `on_stopped` runs: wait for the callback itself
    assert not a.leading
    assert time.monotonic() - down < FAST.lease_duration_s  # gave up within the renew deadline
    assert log == ["a+", "a-"]
    a.stop()


def test_release_hands_over_at_once() -> None:
    leases, log = FakeLeases(), []
    a, b = _elector(leases, "a", log), _elector(leases, "b", log)
    a.start()
    _wait(lambda: a.leading)
    b.start()
    _wait(lambda: b._observed is not None)
    a.stop(release=True)
    _wait(lambda: b.leading, timeout=FAST.lease_duration_s * 0.5)  # well before the lease would expire
    b.stop()
