"""The coordination.k8s.io/v1 Lease: one reader (`LeaseView`) and the writes of leader election.

Two components read it, each with its own rule, on purpose: the elector follows client-go (a follower takes over
only after seeing no change of the Lease record for a lease duration on its own monotonic clock: another
machine's clock never decides who leads), while the webhook, which reads it once a while to know whether a
controller is alive, judges one reading by its renewTime (`LeaseView.fresh`) and fails open.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migctl.adapters.views import as_mapping
from migctl.core.model.cluster import epoch_s

Obj = dict[str, Any]


@dataclass(frozen=True)
class LeaseView:
    """A coordination.k8s.io/v1 Lease. `renewed`: renewTime in seconds since the epoch (None: absent or
    unreadable); `duration_s`: None when unreadable."""

    holder: str
    renewed: float | None
    duration_s: float | None
    transitions: int
    raw_renew_time: str = ""

    def fresh(self, now: float, slack: float) -> str:
        """ "" when renewed by a holder within its duration times `slack` before `now`; else why not."""
        if not self.holder:
            return "the Lease has no holder"
        if self.renewed is None:
            return f"unreadable renewTime {self.raw_renew_time!r}"
        if self.duration_s is None:
            return "unreadable leaseDurationSeconds"
        age = now - self.renewed
        if age > self.duration_s * slack:
            return f"last renewed {age:.0f} s ago (lease duration {self.duration_s:.0f} s)"
        return ""

    @property
    def record(self) -> tuple[str, str, int]:
        """What changes at every renewal: the elector watches it."""
        return self.holder, self.raw_renew_time, self.transitions


def lease_view(obj: Mapping[str, Any]) -> LeaseView:
    spec = as_mapping(obj.get("spec"))
    raw = str(spec.get("renewTime") or "")
    try:
        duration: float | None = float(spec.get("leaseDurationSeconds") or 0)
    except (TypeError, ValueError):
        duration = None
    try:
        transitions = int(spec.get("leaseTransitions") or 0)
    except (TypeError, ValueError):
        transitions = 0
    return LeaseView(str(spec.get("holderIdentity") or ""), epoch_s(raw) if raw else None, duration, transitions, raw)


def new_lease(name: str, namespace: str, identity: str, duration_s: int, now: str) -> Obj:
    """The first Lease of an election, held by `identity` (`now`: RFC 3339 micro time)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"holderIdentity": identity, "leaseDurationSeconds": duration_s, "acquireTime": now,
                 "renewTime": now, "leaseTransitions": 0},
    }  # fmt: skip


def renewed(lease: Mapping[str, Any], identity: str, duration_s: int, now: str) -> Obj:
    """`lease` renewed (or taken over) by `identity`: a takeover counts a transition and a new acquireTime."""
    out = dict(lease)
    spec = dict(as_mapping(lease.get("spec")))
    view = lease_view(lease)
    if view.holder != identity:
        spec["acquireTime"] = now
        spec["leaseTransitions"] = view.transitions + 1
    spec.update({"holderIdentity": identity, "leaseDurationSeconds": duration_s, "renewTime": now})
    out["spec"] = spec
    return out


def released(lease: Mapping[str, Any]) -> Obj:
    """`lease` given up: no holder, and a one-second duration so a follower takes over at once."""
    out = dict(lease)
    out["spec"] = {**as_mapping(lease.get("spec")), "holderIdentity": None, "leaseDurationSeconds": 1}
    return out
