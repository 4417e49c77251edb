"""The webhook's queue gate: which pods `review` gates (every GPU demand a MIG profile, after the VRAM rewrite;
no nodeName; the default scheduler; not yet gated; not opted out), the patch, and the Lease that says the
controller is alive (fail open: no fresh Lease, no gate)."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client

from migctl.adapters.pods import pod_from_object
from migctl.config import ControllerSettings, LeaderElectionSettings
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.decide import VramRules
from migctl.core.vram.offers import OfferIndex
from migctl.webhook.admission import apply_patch, review
from migctl.webhook.app import Webhook
from migctl.webhook.configuration import match_conditions
from migctl.webhook.lease import LeaseWatch, fresh
from migctl.webhook.view import Summary
from migctl.wire.names import QUEUE_GATE, WEBHOOK_OPT_OUT
from tests.unit.webhook.test_webhook import CATALOG, OFFERS, admission_review, vram_pod

OTHER = {"name": "example.com/other"}


def pod(limits: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    res = {"limits": limits if limits is not None else {"nvidia.com/mig-1g.10gb": "1"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "m", "image": "x", "resources": res}], **spec},
    }


def gated(
    p: dict[str, Any], labels: dict[str, str] | None = None, gate: bool = True, offers: Any = OFFERS
) -> dict[str, Any] | None:
    """The pod as admitted when `review` patched it (None: allowed unchanged), checked to be a pod the planner
    reads as gated."""
    out = review(admission_review(p), offers, VramRules(), lambda _ns: labels, queue_gate=gate)
    resp = out.response["response"]
    assert resp["allowed"] is True
    if "patch" not in resp:
        assert not out.gated
        return None
    new = apply_patch(p, json.loads(base64.b64decode(resp["patch"])))
    assert new == out.pod
    assert pod_from_object(new, PlannerSettings()).gated is out.gated
    return new


def test_a_profile_pod_is_gated_and_other_gates_kept() -> None:
    new = gated(pod())
    assert new is not None and new["spec"]["schedulingGates"] == [{"name": QUEUE_GATE}]
    new = gated(pod(schedulingGates=[OTHER]))
    assert new is not None and new["spec"]["schedulingGates"] == [OTHER, {"name": QUEUE_GATE}]
    new = gated(pod(schedulerName="default-scheduler", nodeSelector={"a": "b"}))
    assert new is not None and new["spec"]["nodeSelector"] == {"a": "b"}


def test_a_vram_pod_rewritten_to_a_profile_is_gated_in_the_same_patch() -> None:
    new = gated(vram_pod())
    assert new is not None and new["spec"]["schedulingGates"] == [{"name": QUEUE_GATE}]
    assert "nvidia.com/mig-1g.10gb" in new["spec"]["containers"][0]["resources"]["limits"]


@pytest.mark.parametrize(
    ("p", "labels"),
    [
        (pod(nodeName="n1"), None),  # the API server refuses gates with a nodeName
        (pod(schedulerName="migctl"), None),
        (pod(schedulerName="volcano"), None),
        (pod(schedulingGates=[{"name": QUEUE_GATE}]), None),  # already gated
        ({**pod(), "metadata": {"name": "p", "annotations": {WEBHOOK_OPT_OUT: "disabled"}}}, None),
        (pod(), {WEBHOOK_OPT_OUT: "disabled"}),
        (pod({"nvidia.com/gpu": "1"}), None),  # a whole GPU: not a profile
        (pod({"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"}), None),  # not every demand a profile
        (pod({"cpu": "1"}), None),
        (pod({"nvidia.com/mig-1g.10gb": "many"}), None),  # unreadable: the controller rejects it, nobody gates it
    ],
)
def test_no_gate(p: dict[str, Any], labels: dict[str, str] | None) -> None:
    new = gated(p, labels)
    assert new is None or QUEUE_GATE not in str(new["spec"].get("schedulingGates"))


def test_a_vram_pod_left_as_it_is_is_not_gated() -> None:
    assert gated(vram_pod(), offers=()) is None  # no MIG node known: left asking for VRAM, which is no profile


def test_no_gate_when_the_controller_is_not_alive() -> None:
    assert gated(pod(), gate=False) is None
    new = gated(vram_pod(), gate=False)  # the VRAM rewrite still happens
    assert new is not None and "schedulingGates" not in new["spec"]


def test_match_conditions_send_profile_pods_only_with_the_gate() -> None:
    assert "nvidia.com/mig-" not in str(match_conditions("migctl.io/vram"))
    (cond,) = match_conditions("migctl.io/vram", queue_gate=True)
    assert 'startsWith("nvidia.com/mig-")' in cond["expression"] and '"migctl.io/vram"' in cond["expression"]


# -- the Lease ------------------------------------------------------------------------------------------------

NOW = 1_800_000_000.0


def lease(age_s: float, holder: str | None = "migctl-0", duration: int = 15) -> dict[str, Any]:
    renewed = datetime.fromtimestamp(NOW - age_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


@pytest.mark.parametrize(
    ("obj", "alive"),
    [
        (lease(1), True),
        (lease(20), True),  # within the slack
        (lease(30), False),
        (lease(1, holder=None), False),  # released
        (None, False),
        ({"spec": {"holderIdentity": "x", "renewTime": "yesterday", "leaseDurationSeconds": 15}}, False),
    ],
)
def test_fresh(obj: dict[str, Any] | None, alive: bool) -> None:
    assert (fresh(obj, NOW) == "") is alive


class FakeLeases:
    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = lease(1)
        self.error: Exception | None = None
        self.reads: list[tuple[str, str]] = []

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads.append((namespace, name))
        if self.error is not None:
            raise self.error
        return self.lease


def test_the_watch_answers_from_its_last_reading_and_fails_open() -> None:
    now = [NOW]
    api = FakeLeases()
    watch = LeaseWatch(api, LeaderElectionSettings(lease_name="l", lease_namespace="n"), clock=lambda: now[0])
    assert not watch.alive()  # not read yet
    watch.refresh()
    assert watch.alive() and api.reads == [("n", "l")]
    now[0] += 2 * watch.interval_s + 1  # no reading since: the answer expires
    assert not watch.alive()
    api.lease = lease(1 - (now[0] - NOW))
    watch.refresh()
    assert watch.alive()
    api.error = OSError("connection refused")
    watch.refresh()
    assert not watch.alive() and "cannot read Lease" in watch.why


def test_the_webhook_gates_only_with_the_setting_and_a_fresh_lease() -> None:
    assert Webhook(client.ApiClient(), CATALOG).lease is None  # queue_gate off: the Lease is never read
    app = Webhook(client.ApiClient(), CATALOG, controller=ControllerSettings(queue_gate=True))
    assert app.lease is not None
    api = FakeLeases()
    app.lease.kube, app.lease.clock = api, lambda: NOW
    assert "patch" not in app.admit(admission_review(pod()))["response"]  # not read yet: fail open
    app.lease.refresh()
    assert "patch" in app.admit(admission_review(pod()))["response"]
    notes: list[str] = []
    app.view.summary = Summary(OfferIndex(OFFERS))
    app.events.submit = lambda ns, p, uid, message: notes.append(message)  # type: ignore[method-assign]
    app.admit(admission_review(vram_pod()))  # a rewrite and a gate: the pod's Event says both
    assert len(notes) == 1 and f"scheduling gate {QUEUE_GATE} added" in notes[0]
    api.lease = lease(10_000)
    app.lease.refresh()
    assert "patch" not in app.admit(admission_review(pod()))["response"]
    app.admit(admission_review(vram_pod()))
    assert len(notes) == 2 and QUEUE_GATE not in notes[1]
