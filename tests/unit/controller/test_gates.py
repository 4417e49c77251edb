"""The controller lifts the queue gate (controller/gates.py), against the in-memory cluster of fake_cluster.py:
pinned where the plan serves a pod, after the taint where its node's change starts, everyone when paused or in
dry run, overdue pods without a pin; a failed lift never stops the reconcile. `controller.queue_gate` is left
off throughout: the controller lifts every gate it finds either way."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from migctl.controller import events as ev
from migctl.core.queue_claims import Claim
from migctl.core.queue_gate import FREE, OVERDUE, RELEASED, STARTED, TEXT, UNPLANNED
from migctl.wire.names import EXCLUDE, HOSTNAME, QUEUE_GATE
from tests.unit.controller.test_reconcile import IDLE, controller, settle
from tests.unit.fake_cluster import FakeClock, FakeCluster
from tests.unit.kube_builders import gpu_node, mig_parted, pod

OTHER = {"name": "example.com/other"}


def gated(name: str, profile: str, clock: FakeClock, age_s: float = 0.0, **kw: Any) -> dict[str, Any]:
    p = pod(name, {f"nvidia.com/mig-{profile}": "1"}, **kw)
    p["spec"]["schedulingGates"] = [OTHER, {"name": QUEUE_GATE}]
    created = datetime.fromtimestamp(clock() - age_s, UTC)
    p["metadata"]["creationTimestamp"] = created.strftime("%Y-%m-%dT%H:%M:%SZ")
    return p


def cluster(*pods: dict[str, Any], hostname: bool = True) -> FakeCluster:
    labels = {HOSTNAME: "host-n1"} if hostname else {}
    return FakeCluster([gpu_node("n1", layouts=IDLE, labels=labels), mig_parted(IDLE), *pods])


def gates_of(c: FakeCluster, key: str) -> list[str]:
    return [g["name"] for g in c.pods[key]["spec"].get("schedulingGates") or []]


def lifted(c: Any, why: str) -> float:
    return float(c.metrics.gate_lifts.labels(why)._value.get())


def test_a_pod_served_by_a_free_instance_is_lifted_and_pinned() -> None:
    clock = FakeClock()
    fake = cluster(gated("fits", "1g.5gb", clock))
    c = controller(fake, clock)
    c.reconcile()
    settle(c)
    assert gates_of(fake, "ns/fits") == [OTHER["name"]]  # only migctl's gate is removed
    assert fake.pods["ns/fits"]["spec"]["nodeSelector"] == {HOSTNAME: "host-n1"}
    assert not any(call.startswith("patch_node") for call in fake.calls)  # nothing to re-cut
    assert lifted(c, "free") == 1
    assert any(r == ev.GATE_LIFTED and TEXT[FREE] in m and "pinned to node n1" in m for _, r, m in c.events.sent)


def test_a_node_without_a_hostname_label_lifts_without_a_pin() -> None:
    clock = FakeClock()
    fake = cluster(gated("fits", "1g.5gb", clock), hostname=False)
    c = controller(fake, clock)
    c.reconcile()
    assert gates_of(fake, "ns/fits") == [OTHER["name"]] and "nodeSelector" not in fake.pods["ns/fits"]["spec"]


def test_a_pod_a_started_change_serves_is_lifted_after_the_taint() -> None:
    clock = FakeClock(tick=0.5)
    fake = cluster(gated("recut", "3g.20gb", clock))
    c = controller(fake, clock)
    c.reconcile()
    settle(c)
    calls = fake.calls
    lift = calls.index("lift_gate ns/recut -> host-n1")
    assert calls.index("patch_node n1 (taint)") < lift  # the worker lifted it right after its taint write
    assert gates_of(fake, "ns/recut") == [OTHER["name"]] and lifted(c, "started") == 1
    assert any(TEXT[STARTED] in m for _, r, m in c.events.sent if r == ev.GATE_LIFTED)


def test_a_pod_nothing_serves_stays_gated_until_overdue() -> None:
    clock = FakeClock()
    fake = cluster(gated("nowhere", "7g.80gb", clock))  # an 80 GB profile; the one node is an A100 40GB
    c = controller(fake, clock, queue_gate_max_hold_s=60)
    c.reconcile()
    assert gates_of(fake, "ns/nowhere") == [OTHER["name"], QUEUE_GATE]
    clock.advance(61)
    c.reconcile()
    assert gates_of(fake, "ns/nowhere") == [OTHER["name"]] and "nodeSelector" not in fake.pods["ns/nowhere"]["spec"]
    assert any(TEXT[OVERDUE] in m for _, r, m in c.events.sent if r == ev.GATE_LIFTED)


def test_paused_and_dry_run_release_everyone_without_a_pin() -> None:
    for settings in ({"paused": True}, {"dry_run": True}):
        clock = FakeClock(tick=0.5)
        fake = cluster(gated("recut", "3g.20gb", clock), gated("nowhere", "7g.80gb", clock))
        c = controller(fake, clock, **settings)
        c.reconcile()
        settle(c)
        for key in ("ns/recut", "ns/nowhere"):
            assert gates_of(fake, key) == [OTHER["name"]], settings
            assert "nodeSelector" not in fake.pods[key]["spec"]
        assert not any(call.startswith("patch_node") for call in fake.calls)
        assert lifted(c, "released") == 2 and any(TEXT[RELEASED] in m for _, _, m in c.events.sent)


def test_a_gated_pod_migctl_does_not_plan_is_released() -> None:
    clock = FakeClock()
    fake = cluster(gated("mine", "7g.80gb", clock, annotations={EXCLUDE: "true"}))
    c = controller(fake, clock)
    c.reconcile()
    assert gates_of(fake, "ns/mine") == [OTHER["name"]] and lifted(c, "unplanned") == 1
    assert any(TEXT[UNPLANNED] in m for _, _, m in c.events.sent)


def test_a_failed_lift_is_retried_and_never_stops_the_reconcile() -> None:
    clock = FakeClock()
    fake = cluster(gated("a", "1g.5gb", clock), gated("b", "1g.5gb", clock, age_s=1))
    fake.fail_lifts.add("ns/b")  # the older pod, lifted first: its failure must not stop the other's lift
    c = controller(fake, clock)
    c.reconcile()
    assert gates_of(fake, "ns/a") == [OTHER["name"]] and QUEUE_GATE in gates_of(fake, "ns/b")
    assert c.failed_in_a_row == 0
    fake.fail_lifts.clear()
    c.reconcile()
    assert gates_of(fake, "ns/b") == [OTHER["name"]]


def test_no_gate_no_lift() -> None:
    clock = FakeClock()
    fake = cluster(pod("plain", {"nvidia.com/mig-1g.5gb": "1"}))
    c = controller(fake, clock)
    c.reconcile()
    assert not any(call.startswith("lift_gate") for call in fake.calls) and lifted(c, "free") == 0


def test_with_the_gate_on_the_queue_claims_free_instances_before_the_plan() -> None:
    # on: the pod takes the free 1g.5gb before the plan is made, and the plan does not place it again; off, or a pod
    # another component's gate holds too: the plan places it on that instance itself, and the lift comes after
    for on, others in ((True, False), (False, False), (True, True)):
        clock = FakeClock()
        small = gated("small", "1g.5gb", clock)
        if not others:
            small["spec"]["schedulingGates"] = [{"name": QUEUE_GATE}]
        fake = cluster(small)
        c = controller(fake, clock, queue_gate=on)
        c.reconcile()
        settle(c)
        assert c.last_plan is not None
        claimed = on and not others
        assert ("ns/small" in {a.pod for a in c.last_plan.assignments}) is not claimed, (on, others)
        expected = (Claim("ns/small", "n1", ((0, "1g.5gb"),), True),) if claimed else ()
        assert c.last_outcome is not None and c.last_outcome.claims.claims == expected
        assert fake.pods["ns/small"]["spec"]["nodeSelector"] == {HOSTNAME: "host-n1"}
        assert lifted(c, "claimed" if claimed else "free") == 1
