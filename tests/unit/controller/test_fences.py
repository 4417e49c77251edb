"""The controller's fences on DynamicMIG nodes (controller/fences.py), one reconcile at a time against the in-memory
cluster of fake_cluster.py: NVIDIA's slices (tests/nvidia_slices.py), claim templates and pending claim pods as
plain objects, migctl's DeviceTaintRules created and deleted as the API server would. The real scheduler acting on
the fences is tests/cluster/test_dra_fences.py's.

The burst: two 1g.5gb claims, a 4g.20gb and a 7g.40gb on 2x A100-40GB. First fit alone puts the 1g claims on GPU 0
slices 0 and 1, the 4g (placed only at slice 0) then on GPU 1, and the 7g finds no GPU. The plan keeps GPU 0's
slices 0-3 for the 4g and GPU 1 whole for the 7g: the fences are GPU 0's 1g placements 0-3.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from migctl.controller.events import EventSink
from migctl.controller.fences import (
    FENCE_BYPASSED,
    FENCE_CAPPED,
    FENCED,
    FENCES_LIFTED,
    PLACEMENT,
    RESHAPE,
    RESHAPE_FENCE,
    FenceKeeper,
    owned_rules,
    rule_body,
)
from migctl.controller.loop import Controller
from migctl.controller.metrics import Metrics
from migctl.core.dra.fences import FENCE
from migctl.wire.names import FENCE_NODE, FENCE_PURPOSE, MANAGED_BY
from tests.nvidia_slices import device_classes, node_slices
from tests.unit.adapters.dra.test_dra_snapshot import A100, claim_pod, node, profile, template
from tests.unit.controller.test_reconcile import controller
from tests.unit.fake_cluster import FakeClock, FakeCluster

Obj = dict[str, Any]
FENCES = [f"gpu-0-mig-1g5gb-19-{s}" for s in range(4)]
RULES = [f"migctl-placement-n1-{d}" for d in FENCES]
TOLERATE = {"key": FENCE.key, "operator": "Exists", "effect": "NoSchedule"}


def burst(small: str = "small") -> list[Obj]:
    times = [f"2026-12-07T10:00:0{i}Z" for i in range(4)]
    names = [small, small, "four", "seven"]
    return [claim_pod(f"p{i}", t, times[i]) for i, t in enumerate(names)]


def dra_cluster(*extra: Obj, pods: list[Obj] | None = None) -> FakeCluster:
    objects = [node("n1"), *node_slices("n1", A100, 2, mode="dynamic"), *device_classes(A100),
               template("small", profile("1g.5gb")), template("four", profile("4g.20gb")),
               template("seven", profile("7g.40gb")), *extra]  # fmt: skip
    return FakeCluster([*objects, *(burst() if pods is None else pods)])


def fenced(cluster: FakeCluster, purpose: str = PLACEMENT) -> list[str]:
    return sorted(r.device for r in owned_rules(cluster.taint_rules.values()) if r.purpose == purpose)


def reasons(cluster: FakeCluster, *wanted: str) -> list[str]:
    return [str(e["reason"]) for e in cluster.events if e["reason"] in wanted]


def sample(c: Controller, name: str, **labels: str) -> float | None:
    value = c.metrics.registry.get_sample_value(name, labels)
    return None if value is None else float(value)


def drop_demand(cluster: FakeCluster) -> None:
    for key in ("ns/p2", "ns/p3"):
        cluster.remove("Pod", key)


def placement_rule(node_name: str, device: str) -> Obj:
    return {**rule_body(node_name, node_name, device, PLACEMENT, FENCE), "kind": "DeviceTaintRule"}


def test_a_burst_gets_the_fences_first_fit_needs_as_migctls_own_rules() -> None:
    cluster = dra_cluster()
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    assert fenced(cluster) == FENCES and sorted(cluster.taint_rules) == RULES
    rule = cluster.taint_rules[RULES[0]]
    labels = rule["metadata"]["labels"]
    assert labels[FENCE_NODE] == "n1" and labels[FENCE_PURPOSE] == PLACEMENT and labels[MANAGED_BY] == "migctl"
    assert rule["metadata"]["annotations"][FENCE_NODE] == "n1"
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": FENCES[0]},
        "taint": {"key": "migctl.io/placement", "value": "reserved", "effect": "NoSchedule"},
    }
    (event,) = [e for e in cluster.events if e["reason"] == FENCED]
    assert event["involvedObject"]["kind"] == "Node" and all(d in event["message"] for d in FENCES)
    assert sample(c, "migctl_dra_fences", node="n1", purpose=PLACEMENT) == 4
    assert sample(c, "migctl_dra_fence_writes_total", op="create", result="ok") == 4
    assert c.last_outcome is not None and not c.last_outcome.actions  # DynamicMIG: never started, only steered


def test_a_second_reconcile_writes_nothing_and_says_nothing() -> None:
    cluster = dra_cluster()
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    calls, events = list(cluster.calls), len(cluster.events)
    c.reconcile()
    assert cluster.calls == calls and len(cluster.events) == events and fenced(cluster) == FENCES


def test_fences_are_lifted_when_the_demand_behind_them_is_gone() -> None:
    cluster = dra_cluster()
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    drop_demand(cluster)  # the 4g and 7g claims' pods are deleted: nothing needs GPU 0's slices 0-3 kept
    c.reconcile()
    assert fenced(cluster) == [] and reasons(cluster, FENCES_LIFTED) == [FENCES_LIFTED]
    assert sample(c, "migctl_dra_fences", node="n1", purpose=PLACEMENT) == 0
    assert not [call for call in cluster.calls if call.startswith("create_device_taint_rule")][4:]


def test_the_cap_bounds_the_fences_and_the_event_says_it_once() -> None:
    cluster = dra_cluster()
    c = controller(cluster, FakeClock(tick=0.5), dra_max_fences_per_node=2)
    c.reconcile()
    assert fenced(cluster) == FENCES[:2]
    (event,) = [e for e in cluster.events if e["reason"] == FENCE_CAPPED]
    assert event["type"] == "Warning" and "dra_max_fences_per_node" in event["message"]
    assert sample(c, "migctl_dra_fence_cap_reached", node="n1") == 1
    c.reconcile()
    assert reasons(cluster, FENCE_CAPPED) == [FENCE_CAPPED] and fenced(cluster) == FENCES[:2]


def test_a_cap_of_zero_turns_steering_off_and_lifts_what_is_held() -> None:
    cluster = dra_cluster(*(placement_rule("n1", d) for d in FENCES))
    c = controller(cluster, FakeClock(tick=0.5), dra_max_fences_per_node=0)
    c.reconcile()
    assert fenced(cluster) == [] and not reasons(cluster, FENCED, FENCE_CAPPED)


def test_pausing_lifts_every_placement_fence() -> None:
    cluster = dra_cluster()
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    cm = cluster.configmaps[f"{c.settings.configmap_namespace}/{c.settings.configmap_name}"]
    cm["metadata"].setdefault("annotations", {})[c.settings.pause_annotation] = "true"
    c.reconcile()
    assert fenced(cluster) == []
    (lifted,) = [e for e in cluster.events if e["reason"] == FENCES_LIFTED]
    assert "paused" in lifted["message"]
    c.reconcile()  # still paused: nothing is made again
    assert fenced(cluster) == []


def _lease(cluster: FakeCluster, renewed: float) -> None:
    stamp = datetime.fromtimestamp(renewed, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    cluster.add({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                 "metadata": {"name": "migctl", "namespace": "migctl"},
                 "spec": {"holderIdentity": "leader-pod", "leaseDurationSeconds": 15, "renewTime": stamp}})  # fmt: skip


def test_dry_run_creates_no_fence_and_leaves_a_live_leaders_alone() -> None:
    clock = FakeClock()
    cluster = dra_cluster(*(placement_rule("n1", d) for d in FENCES[:2]))
    _lease(cluster, clock.now - 1)
    le = {"enabled": True, "lease_namespace": "migctl", "lease_name": "migctl"}
    c = controller(cluster, clock, dry_run=True, leader_election=le)
    c.reconcile()
    assert fenced(cluster) == FENCES[:2] and not [x for x in cluster.calls if "device_taint_rule" in x]
    assert not reasons(cluster, FENCED, FENCES_LIFTED)


def test_dry_run_lifts_fences_no_live_leader_holds() -> None:
    for lease_age in (None, 60.0):  # no Lease at all; a Lease not renewed for four times its duration
        clock = FakeClock()
        cluster = dra_cluster(*(placement_rule("n1", d) for d in FENCES[:2]))
        if lease_age is not None:
            _lease(cluster, clock.now - lease_age)
        le = {"enabled": True, "lease_namespace": "migctl", "lease_name": "migctl"}
        c = controller(cluster, clock, dry_run=True, leader_election=le)
        c.reconcile()
        assert fenced(cluster) == [], lease_age
        assert not [x for x in cluster.calls if x.startswith("create_device_taint_rule")]
        (lifted,) = [e for e in cluster.events if e["reason"] == FENCES_LIFTED]
        assert "dry run" in lifted["message"]


def test_other_owners_rules_are_never_touched() -> None:
    other_driver = placement_rule("n1", "gpu-0-mig-1g5gb-19-5")
    other_driver["metadata"]["name"] = "someone-elses"
    other_driver["spec"]["deviceSelector"]["driver"] = "example.com"
    no_purpose = placement_rule("n1", "gpu-0-mig-1g5gb-19-6")
    no_purpose["metadata"]["name"] = "no-purpose"
    del no_purpose["metadata"]["labels"][FENCE_PURPOSE]
    unlabelled = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule", "metadata": {"name": "admins"},
                  "spec": {"deviceSelector": {"driver": "gpu.nvidia.com", "pool": "n1", "device": FENCES[0]},
                           "taint": {"key": "maintenance", "effect": "NoSchedule"}}}  # fmt: skip
    cluster = dra_cluster(other_driver, no_purpose, unlabelled)
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    drop_demand(cluster)
    c.reconcile()
    assert sorted(cluster.taint_rules) == ["admins", "no-purpose", "someone-elses"]
    assert not [x for x in cluster.calls if x.endswith(("admins", "no-purpose", "someone-elses"))]


def test_one_api_error_costs_one_retry_on_the_next_reconcile() -> None:
    cluster = dra_cluster()
    cluster.fail_rules = {RULES[1]}
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    assert fenced(cluster) == [FENCES[0], *FENCES[2:]]
    assert sample(c, "migctl_dra_fence_writes_total", op="create", result="error") == 1
    c.reconcile()
    assert fenced(cluster) == FENCES and c.failed_in_a_row == 0
    cluster.fail_rules = {RULES[2]}
    drop_demand(cluster)
    c.reconcile()
    assert fenced(cluster) == [FENCES[2]]
    assert sample(c, "migctl_dra_fence_writes_total", op="delete", result="error") == 1
    c.reconcile()
    assert fenced(cluster) == []


def test_a_claim_that_tolerates_the_fence_is_reported_once() -> None:
    tolerant = template("tolerant", profile("1g.5gb"))
    tolerant["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [TOLERATE]
    pods = burst()
    pods[0] = claim_pod("p0", "tolerant", "2026-12-07T10:00:00Z")
    cluster = dra_cluster(tolerant, pods=pods)
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    c.reconcile()
    (event,) = [e for e in cluster.events if e["reason"] == FENCE_BYPASSED]
    assert event["type"] == "Warning" and "ns/p0" in event["message"] and FENCE.key in event["message"]
    assert sample(c, "migctl_dra_fence_bypasses", node="n1") == 1


def test_a_static_mig_node_not_opted_in_gets_no_fence_and_no_change() -> None:
    cluster = FakeCluster([node("s1"), *node_slices("s1", A100, 1, mode="static", static_layouts=[None]),
                           *device_classes(A100), template("seven", profile("7g.40gb")),
                           claim_pod("big", "seven")])  # fmt: skip
    before = {k: dict(v) for k, v in cluster.nodes.items()}
    c = controller(cluster, FakeClock(tick=0.5))
    c.reconcile()
    assert not cluster.taint_rules and cluster.nodes == before
    assert not [x for x in cluster.calls if not x.startswith("create_configmap")]


# -- FenceKeeper alone: reshape orphans and which nodes are this controller's ----------------------------------


def _keeper(cluster: FakeCluster) -> FenceKeeper:
    return FenceKeeper(EventSink(cluster, "test"), Metrics())


def test_an_orphaned_reshape_fence_is_lifted_and_one_in_flight_is_kept() -> None:
    cluster = FakeCluster()
    for n in ("s1", "s2"):
        cluster.add({**rule_body(n, n, "gpu-0-mig-1g5gb-19-0", RESHAPE, RESHAPE_FENCE), "kind": "DeviceTaintRule"})
    keeper = _keeper(cluster)
    rules = owned_rules(cluster.taint_rules.values())
    keeper.reconcile(cluster, {}, rules, {}, {"s1", "s2"}, every_node=False, changing={"s2"})
    assert [r.node for r in owned_rules(cluster.taint_rules.values())] == ["s2"]
    keeper.reconcile(cluster, {}, owned_rules(cluster.taint_rules.values()), {}, {"s2"}, every_node=False,
                     changing=set(), lift_only=True)  # fmt: skip
    assert [r.node for r in owned_rules(cluster.taint_rules.values())] == ["s2"]  # dry run: the leader's


def test_only_this_controllers_nodes_unless_it_manages_every_node() -> None:
    cluster = FakeCluster([placement_rule("n1", FENCES[0]), placement_rule("gone", FENCES[0])])
    keeper = _keeper(cluster)
    keeper.reconcile(cluster, {}, owned_rules(cluster.taint_rules.values()), {}, {"n1"}, every_node=False,
                     changing=set())  # fmt: skip
    assert [r.node for r in owned_rules(cluster.taint_rules.values())] == ["gone"]
    keeper.reconcile(cluster, {}, owned_rules(cluster.taint_rules.values()), {}, {"n1"}, every_node=True,
                     changing=set())  # fmt: skip
    assert cluster.taint_rules == {}


def test_a_stale_uid_is_a_counted_error_not_a_deleted_namesake() -> None:
    cluster = FakeCluster([placement_rule("n1", FENCES[0])])
    stale = [r.__class__(r.name, "uid-of-an-older-rule", r.node, r.device, r.purpose)
             for r in owned_rules(cluster.taint_rules.values())]  # fmt: skip
    keeper = _keeper(cluster)
    keeper.reconcile(cluster, {}, stale, {}, {"n1"}, every_node=False, changing=set())
    assert fenced(cluster) == [FENCES[0]]
    assert keeper.metrics.registry.get_sample_value("migctl_dra_fence_writes_total", {"op": "delete",
                                                    "result": "error"}) == 1  # fmt: skip
