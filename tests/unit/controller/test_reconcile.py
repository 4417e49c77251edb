"""One reconcile of the controller, end to end, against the in-memory cluster of fake_cluster.py (the Kubernetes
seam's fake: nodes, pods, ConfigMaps, Events; mig-manager, device plugin and GFD SIMULATED at their labels and
node status) and a fake clock: cache -> snapshot -> plan -> guard rails -> actuator worker. No API server:
tests/cluster/test_controller*.py run the controller against a real one."""

from __future__ import annotations

from migctl.config import Config
from migctl.controller.loop import Controller
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.gpu_config import config_name
from tests.unit.fake_cluster import MIG_CONFIG, FakeCache, FakeClock, FakeCluster
from tests.unit.kube_builders import gpu_node, mig_parted, node_config, pod

IDLE = {0: {"1g.5gb": 7}}
IDLE_CONFIG = config_name(node_config(IDLE))
CATALOG = load_catalog()


def controller(cluster: FakeCluster, clock: FakeClock, **settings: object) -> Controller:
    cfg = Config.model_validate({"controller": {"batch_stable_s": 0, "batch_max_s": 0, "poll_interval_s": 0.0001,
                                                "leader_election": {"enabled": False}, **settings}})  # fmt: skip
    c = Controller(cfg, None, catalog=CATALOG, identity="test", clock=clock,
                   connect=lambda stop: cluster, cache=FakeCache(cluster))  # fmt: skip
    c._started_leading()  # as the elector does; the scheduler is not started, so nothing runs by itself
    return c


def settle(c: Controller) -> None:
    for t in list(c.workers.values()):
        t.join(timeout=30)
        assert not t.is_alive()


def cluster_with_pending_pod() -> FakeCluster:
    return FakeCluster([gpu_node("n1", layouts=IDLE), mig_parted(IDLE), pod("want", {"nvidia.com/mig-3g.20gb": 1})])


def test_a_reconcile_plans_and_reconfigures_an_idle_gpu_for_a_pending_pod() -> None:
    cluster, clock = cluster_with_pending_pod(), FakeClock(tick=0.5)
    c = controller(cluster, clock)
    c.reconcile()
    settle(c)
    assert c.last_plan is not None and [a.pod for a in c.last_plan.assignments] == ["ns/want"]
    node = cluster.nodes["n1"]
    assert node["metadata"]["labels"][MIG_CONFIG] != IDLE_CONFIG
    assert int(node["status"]["allocatable"]["nvidia.com/mig-3g.20gb"]) >= 1
    assert not node["spec"].get("taints") and "migctl.io/phase" not in node["metadata"]["annotations"]
    assert c.actuator is not None and c.actuator.outcomes == [("n1", "succeeded", "")]
    assert "MigctlPlanned" in cluster.reasons() and "MigctlReconfigured" in cluster.reasons()

    writes = len(cluster.calls)
    c.reconcile()  # the pod is settling (its instance exists now) and the node is in its dwell time
    settle(c)
    assert len(cluster.calls) == writes and c.workers == {}


def test_dry_run_reconcile_writes_nothing_but_events() -> None:
    cluster, clock = cluster_with_pending_pod(), FakeClock(tick=0.5)
    before = {k: dict(v) for k, v in cluster.nodes.items()}
    c = controller(cluster, clock, dry_run=True)
    c.reconcile()
    settle(c)
    assert cluster.calls == [] and cluster.nodes == before
    assert "MigctlWouldReconfigure" in cluster.reasons()


def test_a_paused_controller_plans_but_starts_nothing() -> None:
    cluster, clock = cluster_with_pending_pod(), FakeClock(tick=0.5)
    c = controller(cluster, clock, paused=True)
    c.reconcile()
    settle(c)
    assert c.last_plan is not None and c.last_plan.assignments
    assert not any(call.startswith("patch_node") for call in cluster.calls) and c.workers == {}


def test_every_pod_event_names_the_pods_uid_as_kubectl_describe_selects_it() -> None:
    """kubectl describe pod lists Events by involvedObject uid: a pod Event without it is invisible there. The
    controller's and the actuator's pod Events (Planned, Reconfigured) carry the uid of the watched pod."""
    cluster, clock = cluster_with_pending_pod(), FakeClock(tick=0.5)
    cluster.pods["ns/want"]["metadata"]["uid"] = "uid-want"
    c = controller(cluster, clock)
    c.reconcile()
    settle(c)
    on_pod = [e for e in cluster.events if e["involvedObject"]["kind"] == "Pod"]
    assert {e["reason"] for e in on_pod} >= {"MigctlPlanned", "MigctlReconfigured"}
    assert all(e["involvedObject"].get("uid") == "uid-want" for e in on_pod)
