"""Faults around a reconfiguration, in the real control plane: mig-manager timeout, verify timeout, a rollback
whose previous config fails too, a config label someone else changes, a node deleted mid-phase, leadership lost
mid-drain, pause with a node in flight, and phase annotations migctl cannot read.

Real: kube-apiserver, kube-scheduler, kwok, evictions, Leases. SIMULATED: mig-manager, device plugin and GFD
(sim_gpu_operator.py, with its fault modes), at their real interface. The controller runs in-process here
(these are not crash points; test_crash_points.py kills real processes).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from kubernetes import client

from migctl.controller.loop import Controller
from migctl.core.model.gpu_config import config_name
from migctl.reconcile.nodestate import Target

from .gpunodes import create_gpu_node
from .sim_gpu_operator import FAILED, SUCCESS
from .test_controller_e2e import (
    ALL_1G,
    GROUP,
    TAINT,
    TARGET_3G,
    assert_reconfigured,
    config_for,
    gpu_node,
    mig_pod,
    node_view,
    running,
    running_on,
    seed_configmap,
    settled,
    sim_for,
    wait_reconciles,
)
from .waiting import wait_for

pytestmark = pytest.mark.cluster
T3G = config_name(TARGET_3G)
FAST = {"mig_manager_timeout_s": 2.0, "verify_timeout_s": 2.0}


def big_pods(core: client.CoreV1Api, namespace: str) -> None:
    """Two pending 3g.40gb pods: an idle H100 gets TARGET_3G for them."""
    for pod in ("big-1", "big-2"):
        core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))


def node_events(core: client.CoreV1Api, node: str, reason: str) -> list[Any]:
    evs = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [e for e in evs if e.reason == reason]


def untainted_with_error(core: client.CoreV1Api, node: str) -> dict[str, str] | None:
    _, ann, taints = node_view(core, node)
    return ann if "migctl.io/last-error" in ann and TAINT not in taints and "migctl.io/phase" not in ann else None


@pytest.mark.parametrize(
    ("fault", "cause", "uncertain"),
    [
        ({"hang_configs": {T3G}}, "mig-manager-timeout", False),
        ({"no_capacity_configs": {T3G}}, "verify", True),
        ({"fail_configs": {T3G: "injected: apply failed", ALL_1G: "injected: GPU in a bad state"}},
         "mig-manager-failed", True),
    ],
    ids=["mig-manager-timeout", "verify-timeout", "rollback-fails-too"],
)  # fmt: skip
def test_fault_ends_untainted_with_one_event_and_a_backoff(
    fault: dict[str, Any], cause: str, uncertain: bool,
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str],
) -> None:  # fmt: skip
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    layout = json.dumps({"config": ALL_1G, "gpus": {"0": {"mig": True, "layout": {"1g.10gb": 7}}}}, sort_keys=True)
    core.patch_node(node, {"metadata": {"annotations": {"migctl.io/layout": layout}}})  # as after an earlier change
    ctl = Controller(config_for(namespace, **FAST), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2) as sim:
        wait_for("sim saw the node", lambda: sim.outcomes(node))
        for k, v in fault.items():
            setattr(sim, k, v)
        big_pods(core, namespace)
        ann = wait_for("rolled back", lambda: untainted_with_error(core, node), timeout=30)
        assert ann["migctl.io/failures"] == "1" and float(ann["migctl.io/backoff-until"]) > time.time() + 500
        # the actuator counts the failure right after the write the wait above saw: wait for it, don't race it
        wait_for("the failure counted", lambda: ctl.metrics.failed.labels(cause)._value.get() >= 1, timeout=10)
        assert ctl.metrics.failed.labels(cause)._value.get() == 1
        reason = "MigctlNeedsAttention" if uncertain else "MigctlRolledBack"
        assert ("migctl.io/layout" in ann) is not uncertain  # uncertain: cleared, so the label says what it is
        attempts = len(sim.outcomes(node))
        # the worker emits the Event after the untaint the wait above saw: wait for it, don't race it
        wait_for(f"the {reason} Event", lambda: node_events(core, node, reason), timeout=10)
        wait_reconciles(ctl, 4)  # no retry, no second Event, no hot loop
        assert len(sim.outcomes(node)) == attempts, sim.history
        assert len(node_events(core, node, reason)) == 1
        assert ctl.metrics.started._value.get() == 1
        assert TAINT not in node_view(core, node)[2]
        labels = node_view(core, node)[0]
        if cause == "verify":
            assert labels["nvidia.com/mig.config"] == T3G  # mig-manager applied it: left, layout unknown
        else:
            assert labels["nvidia.com/mig.config"] == ALL_1G
            states = [o.state for o in sim.outcomes(node) if o.config == ALL_1G][1:]  # after first sight
            assert states == ([FAILED] if uncertain else [SUCCESS]), sim.history
        if uncertain:
            msg = node_events(core, node, reason)[0].message
            assert "uncertain" in msg and ("failed too" in msg or "capacity never matched" in msg)


def test_config_label_changed_by_someone_else_mid_phase(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """While mig-manager works on migctl's config, someone sets another: migctl does not fight, untaints and
    says NeedsAttention."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2) as sim:
        sim.hang_configs = {T3G}
        big_pods(core, namespace)
        wait_for("applying", lambda: node_view(core, node)[1].get("migctl.io/phase") == "applying", timeout=20)
        core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config": "all-disabled"}}})
        ann = wait_for("released", lambda: untainted_with_error(core, node), timeout=20)
        assert "someone else" in ann["migctl.io/last-error"]
        assert node_view(core, node)[0]["nvidia.com/mig.config"] == "all-disabled"  # left as the other actor set it
        # the Event is written after the untaint the wait above saw: wait for it, then check that it is the only one
        wait_for("the NeedsAttention Event", lambda: node_events(core, node, "MigctlNeedsAttention"), timeout=10)
        wait_reconciles(ctl, 3)
        assert len(node_events(core, node, "MigctlNeedsAttention")) == 1


def test_node_deleted_mid_phase(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """A node deleted while migctl waits on it: the worker ends, nothing loops, a new node of that name is left
    alone, and the controller still plans other nodes."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    other = f"{namespace}-gpu2"
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node, other], delay=0.2) as sim:
        sim.hang_configs = {T3G}
        big_pods(core, namespace)
        wait_for("applying", lambda: node_view(core, node)[1].get("migctl.io/phase") == "applying", timeout=20)
        core.delete_node(node)
        wait_for("worker ended", lambda: not ctl.workers, timeout=15)
        sim.hang_configs = set()
        gpu_node(core, namespace, node_names, suffix="gpu2")
        for pod in ("big-1", "big-2"):
            assert wait_for(f"{pod} elsewhere", lambda p=pod: running_on(core, namespace, p), timeout=40) == other
        assert_reconfigured(core, other, TARGET_3G)
        create_gpu_node(core, node, labels={GROUP: namespace}, mig_config=ALL_1G)  # same name, a fresh node
        wait_reconciles(ctl, 3)
        assert settled(core, node) and "migctl.io/last-error" not in node_view(core, node)[1]


def test_leadership_lost_mid_drain(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """The leader loses its Lease after the first of two evictions: it stops acting before its next write; the
    next leader finishes the drain. Two evictions in all, one start."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    low, high = f"{namespace}-low", f"{namespace}-high"
    sched, coord = client.SchedulingV1Api(api), client.CoordinationV1Api(api)
    for name, value in ((low, 10), (high, 1000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    replicas: dict[str, Controller] = {}
    lost_at_eviction: list[float] = []

    def hook(name: str, at: str) -> None:
        if at != "evicted" or lost_at_eviction:
            return
        leader = next(c for c in replicas.values() if c.leading)
        lost_at_eviction.append(leader.metrics.evictions._value.get())
        lease = coord.read_namespaced_lease("migctl", namespace)
        lease.spec.holder_identity = "intruder"
        coord.replace_namespaced_lease("migctl", namespace, lease)
        wait_for("leadership lost", lambda: not leader.leading, timeout=10, interval=0.05)

    try:
        for p in ("low-1", "low-2"):
            core.create_namespaced_pod(namespace, mig_pod(p, namespace, "1g.10gb", priorityClassName=low))
        for p in ("low-1", "low-2"):
            wait_for(f"{p} running", lambda p=p: running_on(core, namespace, p))
        cfg = config_for(namespace)
        cfg = cfg.model_copy(update={"planner": cfg.planner.model_copy(update={"evictions": "lower-priority"})})
        for ident in ("a", "b"):
            replicas[ident] = Controller(cfg, api, identity=ident, hook=hook)
            replicas[ident].start(sync_timeout=20)
        with sim_for(api, core, namespace, [node], delay=0.2):
            core.create_namespaced_pod(namespace, mig_pod("urgent", namespace, "7g.80gb", priorityClassName=high))
            assert wait_for("urgent running", lambda: running_on(core, namespace, "urgent"), timeout=60) == node
            wait_for("node settled", lambda: settled(core, node))
        assert lost_at_eviction == [1.0]
        assert sum(c.metrics.evictions._value.get() for c in replicas.values()) == 2  # nobody evicted twice
        assert sum(c.metrics.started._value.get() for c in replicas.values()) == 1
        assert {p.metadata.name for p in core.list_namespaced_pod(namespace).items} == {"urgent"}
    finally:
        for c in replicas.values():
            c.stop()
        for name in (low, high):
            sched.delete_priority_class(name)


def test_pause_lets_a_node_in_flight_finish(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Pause stops new reconfigurations only: the node already tainted finishes (docs/operations.md)."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=1.0) as sim:
        big_pods(core, namespace)
        wait_for("applying", lambda: node_view(core, node)[1].get("migctl.io/phase") == "applying", timeout=20)
        assert [o.state for o in sim.outcomes(node) if o.config == T3G] == []  # mig-manager still busy
        cm = "migctl-mig-parted-config"
        core.patch_namespaced_config_map(cm, namespace, {"metadata": {"annotations": {"migctl.io/paused": "true"}}})
        wait_for("pause seen", lambda: ctl.metrics.paused._value.get() == 1, timeout=10)
        wait_for("node settled", lambda: settled(core, node), timeout=30)
        assert_reconfigured(core, node, TARGET_3G)


GOOD = Target("p0123456789", T3G, TARGET_3G, previous_config=ALL_1G).to_json()
UNREADABLE = {
    "since-garbage": ({"migctl.io/phase": "applying", "migctl.io/phase-since": "yesterday"}, "MigctlRolledBack"),
    "since-future": ({"migctl.io/phase": "applying", "migctl.io/phase-since": "99999999999"}, "MigctlRolledBack"),
    "since-superscript": ({"migctl.io/phase": "draining", "migctl.io/phase-since": "1²"}, "MigctlRolledBack"),
    "target-list": ({"migctl.io/phase": "draining", "migctl.io/target": "[1, 2]"}, "MigctlRolledBack"),
    "target-string": ({"migctl.io/phase": "applying", "migctl.io/target": '"x"'}, "MigctlNeedsAttention"),
    "plan-mismatch": ({"migctl.io/phase": "verifying", "migctl.io/plan-id": "p-other"}, "MigctlNeedsAttention"),
    "phase-unknown": ({"migctl.io/phase": "exploding"}, "MigctlRolledBack"),
    "phase-missing": ({"migctl.io/phase": None}, "MigctlRolledBack"),
    "rollback-garbage": ({"migctl.io/phase": "rolling-back", "migctl.io/rollback": "{}"}, "MigctlRolledBack"),
}


def test_unreadable_phase_annotations_roll_back_and_untaint(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """One tainted node per class of unreadable phase annotation (a sample of each; the unit tier fuzzes the
    class): every one ends untainted, with no phase annotation, a failure backoff and one Event naming it."""
    seed_configmap(core, namespace)
    nodes = {}
    for case, (bad, _) in UNREADABLE.items():
        name = gpu_node(core, namespace, node_names, suffix=case)
        ann = {"migctl.io/plan-id": "p0123456789", "migctl.io/phase-since": f"{time.time():.3f}",
               "migctl.io/target": GOOD, **bad}  # fmt: skip
        taints = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]
        core.patch_node(name, {"metadata": {"annotations": ann}, "spec": {"taints": taints}})
        nodes[case] = name
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace):
        for case, name in nodes.items():
            ann = wait_for(f"{case} released", lambda n=name: untainted_with_error(core, n), timeout=30)
            assert ann["migctl.io/failures"] == "1", case
            assert not any(k in ann for k in ("migctl.io/plan-id", "migctl.io/target", "migctl.io/phase-since"))
            expected = UNREADABLE[case][1]
            events = wait_for(f"{case} Event", lambda n=name, r=expected: node_events(core, n, r), timeout=10)
            assert "unreadable" in events[0].message, (case, events[0].message)
        wait_reconciles(ctl, 3)
        for case, name in nodes.items():
            assert len(node_events(core, name, UNREADABLE[case][1])) == 1, case
        assert all(node_view(core, n)[0]["nvidia.com/mig.config"] == ALL_1G for n in nodes.values())


class ForbidNodePatch(client.ApiClient):
    """Answers 403 to every PATCH of one node (as RBAC would) and counts the attempts."""

    def __init__(self, configuration: client.Configuration, node: str) -> None:
        super().__init__(configuration)
        self.path, self.attempts = f"/api/v1/nodes/{node}", 0

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        if method == "PATCH" and url.split("?", 1)[0].endswith(self.path):
            self.attempts += 1
            raise client.ApiException(status=403, reason="injected: forbidden")
        return super().call_api(method, url, *args, **kwargs)


def test_a_node_that_cannot_be_written_is_retried_with_backoff_not_in_a_loop(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Every write to an in-flight node fails (403): each resume fails, and the next waits a doubling backoff
    (resync_interval_s 1 s: 1, 2, 4 s...), instead of re-trying on every reconcile and debounce (0.1 s)."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    taints = [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]
    core.patch_node(node, {"metadata": {"annotations": {"migctl.io/phase": "exploding"}}, "spec": {"taints": taints}})
    forbid = ForbidNodePatch(api.configuration, node)
    ctl = Controller(config_for(namespace), forbid, identity="a")
    with running(ctl, core, namespace):
        wait_for("first attempt", lambda: forbid.attempts >= 1, timeout=20)
        first = time.monotonic()
        wait_reconciles(ctl, 6)
        elapsed = time.monotonic() - first
        assert forbid.attempts <= 2 + int(elapsed).bit_length(), (forbid.attempts, elapsed)  # ~log2(elapsed) resumes
        assert ctl.reconciles >= 6
    forbid.close()
    assert TAINT in node_view(core, node)[2]  # still in flight: nothing could write, nothing pretended
