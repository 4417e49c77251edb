"""The controller's in-place path, end to end in one process: cache -> snapshot -> plan -> reconcile.decide ->
the in-place executor, against the in-memory cluster of fake_cluster.py and a fake clock. The node agent and the
device plugin are SIMULATED at their real interface (inplace_agent.py: the node's annotations and allocatable).
The cluster tier runs the same path against a real API server (tests/cluster/test_in_place*.py)."""

from __future__ import annotations

import json

from migctl.config import Config
from migctl.controller.inplace import unadmitted
from migctl.controller.loop import Controller
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.nodestate import ADVERTISING, AGENT_APPLYING, Target
from migctl.wire import inplace as wire
from migctl.wire.names import (
    ACTUATION,
    DEPLOY_MIG_MANAGER,
    FAILURES,
    IN_PLACE,
    IN_PLACE_STATUS,
    IN_PLACE_TARGET,
    LAST_ERROR,
    LAYOUT,
    PHASE,
    PHASE_SINCE,
    PLAN_ID,
    TARGET,
)
from tests.unit.controller.inplace_agent import SimAgent
from tests.unit.fake_cluster import MIG_CONFIG, FakeCache, FakeClock, FakeCluster, Obj
from tests.unit.kube_builders import gpu_node, mig_parted, pod

IDLE = {0: {"1g.5gb": 7}}
OPTED_IN = {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"}
TAINT = "migctl.io/reconfiguring"
CATALOG = load_catalog()


def controller(cluster: FakeCluster, clock: FakeClock, agent: SimAgent | None, **settings: object) -> Controller:
    cfg = Config.model_validate({"controller": {
        "batch_stable_s": 0, "batch_max_s": 0, "in_place_batch_stable_s": 0, "in_place_batch_max_s": 0,
        "poll_interval_s": 0.0001, "leader_election": {"enabled": False},
        "in_place_agent_timeout_s": 20, "in_place_advertise_timeout_s": 20, "in_place_admission_timeout_s": 20,
        **settings}})  # fmt: skip
    c = Controller(cfg, None, catalog=CATALOG, identity="test", clock=clock, hook=agent,
                   connect=lambda stop: cluster, cache=FakeCache(cluster))  # fmt: skip
    c._started_leading()
    return c


def settle(c: Controller) -> None:
    for t in list(c.workers.values()):
        t.join(timeout=30)
        assert not t.is_alive()


def in_place_cluster(labels: dict[str, str] | None = None, *extra: Obj) -> FakeCluster:
    node = gpu_node("n1", layouts=IDLE, labels=OPTED_IN if labels is None else labels)
    return FakeCluster([node, mig_parted(IDLE), pod("want", {"nvidia.com/mig-3g.20gb": 1}), *extra])


def node_annotations(cluster: FakeCluster, node: str = "n1") -> dict[str, str]:
    return dict(cluster.nodes[node]["metadata"].get("annotations") or {})


def tainted(cluster: FakeCluster, node: str = "n1") -> bool:
    return any(t.get("key") == TAINT for t in cluster.nodes[node]["spec"].get("taints") or [])


def sample(c: Controller, name: str, labels: dict[str, str] | None = None) -> float:
    return c.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def test_an_opted_in_node_is_changed_by_its_agent_not_by_mig_manager() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    agent = SimAgent(cluster)
    c = controller(cluster, clock, agent)
    label_before = cluster.nodes["n1"]["metadata"]["labels"][MIG_CONFIG]
    c.reconcile()
    settle(c)
    assert c.actuator is not None and c.actuator.outcomes == [("n1", "succeeded", "")]
    assert len(agent.seen) == 1 and "3g.20gb" in agent.seen[0].gpus[0]
    ann = node_annotations(cluster)
    assert not tainted(cluster) and PHASE not in ann and PLAN_ID not in ann
    assert wire.decode_target(ann[IN_PLACE_TARGET]).plan == agent.seen[0].plan  # kept: the agent's reboot record
    assert json.loads(ann[LAYOUT])["gpus"]["0"]["layout"] == dict(agent.seen[0].gpus[0])
    assert cluster.nodes["n1"]["metadata"]["labels"][MIG_CONFIG] == label_before  # mig-manager's label untouched
    assert not any(call.startswith("replace_configmap") for call in cluster.calls)  # no mig-parted config written
    assert sample(c, "migctl_in_place_window_seconds_count") == 1
    assert sample(c, "migctl_in_place_window_seconds_sum") > 0
    assert sample(c, "migctl_in_place_changes_total", {"result": "applied"}) == 1
    assert "MigctlReconfigured" in cluster.reasons()


def test_a_node_where_mig_manager_still_runs_is_refused_with_an_event_saying_what_to_set() -> None:
    cluster, clock = in_place_cluster({ACTUATION: IN_PLACE}), FakeClock(tick=0.5)
    c = controller(cluster, clock, SimAgent(cluster))
    c.reconcile()
    settle(c)
    refused = [e for e in cluster.events if e["reason"] == "MigctlInPlaceRefused"]
    assert len(refused) == 1 and f"{DEPLOY_MIG_MANAGER}=false" in refused[0]["message"]
    assert not tainted(cluster) and IN_PLACE_TARGET not in node_annotations(cluster)
    assert c.last_plan is not None and not c.last_plan.assignments  # frozen: planned around
    c.reconcile()
    settle(c)
    assert len([e for e in cluster.events if e["reason"] == "MigctlInPlaceRefused"]) == 1  # once per message


def test_a_node_hami_manages_is_refused() -> None:
    cluster, clock = in_place_cluster({**OPTED_IN, "gpu": "on"}), FakeClock(tick=0.5)
    c = controller(cluster, clock, SimAgent(cluster))
    c.reconcile()
    settle(c)
    refused = [e["message"] for e in cluster.events if e["reason"] == "MigctlInPlaceRefused"]
    assert refused and "gpu=on" in refused[0] and not tainted(cluster)


def test_the_config_selector_opts_a_node_in_without_the_label() -> None:
    cluster = in_place_cluster({DEPLOY_MIG_MANAGER: "false", "pool": "fast"})
    agent = SimAgent(cluster)
    c = controller(cluster, FakeClock(tick=0.5), agent, in_place_node_selector="pool=fast")
    c.reconcile()
    settle(c)
    assert len(agent.seen) == 1 and c.actuator is not None and c.actuator.outcomes == [("n1", "succeeded", "")]


def test_agent_blocked_untaints_backs_off_and_removes_the_target() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    c = controller(cluster, clock, SimAgent(cluster, answer="blocked", message="GPU 0 1g.5gb@0 in use by ns/x"))
    c.reconcile()
    settle(c)
    ann = node_annotations(cluster)
    assert not tainted(cluster) and PHASE not in ann and IN_PLACE_TARGET not in ann
    assert ann[FAILURES] == "1" and "blocked" in ann[LAST_ERROR] and "in use by ns/x" in ann[LAST_ERROR]
    assert sample(c, "migctl_in_place_changes_total", {"result": "blocked"}) == 1
    assert sample(c, "migctl_in_place_window_seconds_count") == 1
    assert "MigctlRolledBack" in cluster.reasons()
    writes = len(cluster.calls)
    c.reconcile()  # backing off: nothing starts again
    settle(c)
    assert len(cluster.calls) == writes


def test_agent_silent_times_out_untainted_and_flagged() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    c = controller(cluster, clock, SimAgent(cluster, answer=None))
    c.reconcile()
    settle(c)
    ann = node_annotations(cluster)
    assert not tainted(cluster) and IN_PLACE_TARGET not in ann and "no answer from the node agent" in ann[LAST_ERROR]
    assert sample(c, "migctl_in_place_changes_total", {"result": "timeout"}) == 1
    assert "MigctlNeedsAttention" in cluster.reasons()


def test_device_plugin_not_coming_back_times_out_and_records_the_applied_layout() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    agent = SimAgent(cluster, advertise=False)
    c = controller(cluster, clock, agent)
    c.reconcile()
    settle(c)
    ann = node_annotations(cluster)
    assert not tainted(cluster) and "did not advertise" in ann[LAST_ERROR]
    assert json.loads(ann[LAYOUT])["gpus"]["0"]["layout"] == dict(agent.seen[0].gpus[0])  # the GPUs did change
    assert sample(c, "migctl_in_place_changes_total", {"result": "timeout"}) == 1


def test_a_status_for_another_plan_is_not_taken_as_the_answer() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    stale = wire.encode_status(wire.Status("p-older", "applied"))
    cluster.nodes["n1"]["metadata"]["annotations"][IN_PLACE_STATUS] = stale
    c = controller(cluster, clock, SimAgent(cluster, answer=None))
    c.reconcile()
    settle(c)
    assert sample(c, "migctl_in_place_changes_total", {"result": "timeout"}) == 1
    assert "no answer from the node agent" in node_annotations(cluster)[LAST_ERROR]  # still waiting for ITS answer


def test_an_agent_of_another_version_fails_the_change_and_says_so() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)

    def newer_agent(node: str, step: str) -> None:
        if step == "in-place-target-written":
            doc = {"version": "v9", "plan": "x", "state": "applied"}
            cluster.patch_node(node, {"metadata": {"annotations": {IN_PLACE_STATUS: json.dumps(doc)}}})

    c = controller(cluster, clock, None)
    assert c.actuator is not None
    c.actuator.hook = newer_agent
    c.reconcile()
    settle(c)
    ann = node_annotations(cluster)
    assert not tainted(cluster) and "another version" in ann[LAST_ERROR]


def test_a_bound_pod_not_yet_admitted_is_waited_for_before_the_target_is_written() -> None:
    waiting = pod("bound", {"nvidia.com/mig-1g.5gb": 1}, node="n1", phase="Pending")  # no container status yet
    cluster, clock = in_place_cluster(None, waiting), FakeClock(tick=0.5)
    agent = SimAgent(cluster)
    c = controller(cluster, clock, agent)
    assert c.actuator is not None
    looks: list[int] = []
    original = cluster.list_pods_on_node

    def list_pods(node: str) -> list[Obj]:
        looks.append(len(agent.seen))
        if len(looks) == 4:  # the kubelet admits it on the fourth look
            cluster.pods["ns/bound"]["status"]["containerStatuses"] = [{"name": "main", "ready": False}]
        return original(node)

    cluster.list_pods_on_node = list_pods  # type: ignore[method-assign]
    gpus = {0: GpuConfig.mig({"3g.20gb": 2})}
    target = Target("p1", config_name(gpus), gpus, pods=("ns/want",), started=clock.now)
    assert c.actuator.start_in_place("n1", target, lambda node: True) == "succeeded"
    assert looks == [0, 0, 0, 0] and len(agent.seen) == 1  # the target came only after the pod was admitted


def test_bound_pods_never_admitted_delay_the_target_only_up_to_the_admission_timeout() -> None:
    waiting = pod("stuck", {"nvidia.com/mig-1g.5gb": 1}, node="n1", phase="Pending")
    cluster, clock = in_place_cluster(None, waiting), FakeClock(tick=0.5)
    agent = SimAgent(cluster)
    c = controller(cluster, clock, agent, in_place_admission_timeout_s=5)
    assert c.actuator is not None
    gpus = {0: GpuConfig.mig({"3g.20gb": 2})}
    start = clock.now
    target = Target("p1", config_name(gpus), gpus, started=start)
    assert c.actuator.start_in_place("n1", target, lambda node: True) == "succeeded"
    assert len(agent.seen) == 1 and 5 <= clock.now - start < 20


def test_unadmitted_reads_only_bound_gpu_pods_without_container_status() -> None:
    pods = [
        pod("a", {"nvidia.com/mig-1g.5gb": 1}, node="n1", phase="Pending"),
        pod("cpu", {"cpu": "1"}, node="n1", phase="Pending"),
        pod("run", {"nvidia.com/mig-1g.5gb": 1}, node="n1", phase="Running"),
    ]
    admitted = pod("b", {"nvidia.com/mig-1g.5gb": 1}, node="n1", phase="Pending")
    admitted["status"]["containerStatuses"] = [{"name": "main"}]
    assert unadmitted([*pods, admitted], "migctl.io/vram") == ["ns/a"]


def in_flight_node(phase: str, status: wire.State | None, advertised: bool) -> tuple[FakeCluster, str]:
    """A node a killed controller left in `phase` (its annotations as that controller wrote them)."""
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    agent = SimAgent(cluster, answer="applied" if phase == ADVERTISING else None, advertise=False)
    first = controller(cluster, clock, agent)
    stop_at = {AGENT_APPLYING: "in-place-target-written", ADVERTISING: "in-place-advertising"}[phase]

    def crash(node: str, step: str) -> None:
        agent(node, step)
        if step == stop_at:
            first.halt()  # the controller dies here: nothing after this step is written

    assert first.actuator is not None
    first.actuator.hook = crash
    first.reconcile()
    settle(first)
    plan = json.loads(node_annotations(cluster)[TARGET])["plan"]
    if status is not None:
        cluster.patch_node("n1", {"metadata": {"annotations": {
            IN_PLACE_STATUS: wire.encode_status(wire.Status(plan, status))}}})  # fmt: skip
    if advertised:
        agent.advertise_now("n1", agent.seen[0])
    return cluster, plan


def test_a_new_leader_resumes_a_node_whose_agent_answered_while_nobody_led() -> None:
    cluster, _ = in_flight_node(AGENT_APPLYING, "applied", advertised=True)
    assert tainted(cluster) and node_annotations(cluster)[PHASE] == AGENT_APPLYING
    c = controller(cluster, FakeClock(tick=0.5), None)
    c.reconcile()
    settle(c)
    assert c.actuator is not None and c.actuator.outcomes == [("n1", "succeeded", "")]
    assert sample(c, "migctl_reconfigurations_started_total") == 0  # resumed, not started again
    assert not tainted(cluster) and PHASE not in node_annotations(cluster)


def test_a_new_leader_resumes_from_advertising_and_times_out_from_the_recorded_phase_start() -> None:
    cluster, _ = in_flight_node(ADVERTISING, None, advertised=False)
    assert node_annotations(cluster)[PHASE] == ADVERTISING
    since = float(node_annotations(cluster)[PHASE_SINCE])
    clock = FakeClock(start=since + 19.9, tick=0.5)  # 20 s timeout: a fresh wait would poll ~40 times
    c = controller(cluster, clock, None)
    c.reconcile()
    settle(c)
    assert not tainted(cluster) and "did not advertise" in node_annotations(cluster)[LAST_ERROR]
    assert clock.now - since < 25  # measured from the phase's start, not restarted


def test_a_dry_run_controller_releases_an_abandoned_in_place_node() -> None:
    cluster, _ = in_flight_node(AGENT_APPLYING, None, advertised=False)
    since = float(node_annotations(cluster)[PHASE_SINCE])
    c = controller(cluster, FakeClock(start=since + 3600, tick=0.5), None, dry_run=True)
    c.reconcile()
    settle(c)
    ann = node_annotations(cluster)
    assert not tainted(cluster) and PHASE not in ann and IN_PLACE_TARGET not in ann and FAILURES not in ann
    assert "released" in ann[LAST_ERROR]


def test_dry_run_on_an_in_place_node_writes_nothing_but_says_in_place() -> None:
    cluster, clock = in_place_cluster(), FakeClock(tick=0.5)
    agent = SimAgent(cluster)
    c = controller(cluster, clock, agent, dry_run=True)
    c.reconcile()
    settle(c)
    assert not agent.seen and not tainted(cluster) and cluster.calls == []
    (would,) = [e["message"] for e in cluster.events if e["reason"] == "MigctlWouldReconfigure"]
    assert "in place (node agent)" in would
