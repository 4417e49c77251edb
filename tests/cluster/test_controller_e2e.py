"""End-to-end tests of `migctl run` (the Controller, in-process threads) in the real control plane.

Real: kube-apiserver (evictions, PDBs, optimistic concurrency, Leases), kube-scheduler, kwok. SIMULATED: the
GPU Operator's mig-manager + device plugin + GFD (`sim_gpu_operator.py`), reading migctl's own ConfigMap.
Each test gets its own namespace for pods, ConfigMaps and the Lease, and its nodes carry a group label the
controller's `node_selector` selects, so tests never see each other's objects. Intervals are short.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml
from kubernetes import client

from migctl.adapters.kube import Stopped
from migctl.config import Config
from migctl.controller.loop import Controller
from migctl.core.hardware.naming import resource_name
from migctl.core.model.gpu_config import GpuConfig, config_name

from .gpunodes import create_gpu_node
from .sim_gpu_operator import FAILED, SUCCESS, SimGpuOperator
from .waiting import wait_for

pytestmark = pytest.mark.cluster

CM = "migctl-mig-parted-config"
SEED = "seed-mig-parted-config"
TAINT = "migctl.io/reconfiguring"
GROUP = "migctl.test/group"
ALL_1G = "all-1g.10gb"
TARGET_3G = {0: GpuConfig.mig({"3g.40gb": 2})}  # what two pending 3g.40gb pods on an idle H100 get


def config_for(namespace: str, **controller: Any) -> Config:
    settings = {
        "configmap_name": CM,
        "configmap_namespace": namespace,
        "node_selector": f"{GROUP}={namespace}",
        "resync_interval_s": 1.0,
        "debounce_s": 0.1,
        "batch_stable_s": 0.3,
        "batch_max_s": 2.0,
        "in_place_batch_stable_s": 0.3,
        "in_place_batch_max_s": 2.0,
        "poll_interval_s": 0.1,
        "watch_timeout_s": 5.0,
        "cooldown_s": 0.0,
        "min_dwell_s": 0.0,
        "eviction_timeout_s": 5.0,
        "mig_manager_timeout_s": 10.0,
        "verify_timeout_s": 5.0,
        "api_retry_max_wait_s": 0.2,
        "metrics_port": 0,
        "metrics_address": "127.0.0.1",
        "leader_election": {
            "lease_name": "migctl",
            "lease_namespace": namespace,
            "lease_duration_s": 2.0,
            "renew_deadline_s": 1.5,
            "retry_period_s": 0.2,
        },
        **controller,
    }
    return Config.model_validate(
        {
            "gpu_operator": {"configmap_namespace": namespace, "configmap_name": SEED},
            "controller": settings,
        }
    )


def seed_configmap(core: client.CoreV1Api, namespace: str) -> None:
    """The GPU Operator's own config (what nodes are labelled with before migctl ever acted)."""
    configs = {
        ALL_1G: [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
    }
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": SEED}, "data": {"config.yaml": text}})


def gpu_node(core: client.CoreV1Api, namespace: str, node_names: list[str], suffix: str = "gpu") -> str:
    name = f"{namespace}-{suffix}"
    create_gpu_node(core, name, gpus=[GpuConfig.mig({"1g.10gb": 7})], labels={GROUP: namespace}, mig_config=ALL_1G)
    node_names.append(name)
    return name


def mig_pod(name: str, namespace: str, profile: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "nodeSelector": {GROUP: namespace},
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/cuda:fake",
                    "resources": {"limits": {resource_name(profile): "1"}},
                }
            ],
            **extra,
        },
    }


def running_on(core: client.CoreV1Api, namespace: str, pod: str) -> str | None:
    p = core.read_namespaced_pod(pod, namespace)
    ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
    return p.spec.node_name if p.status.phase == "Running" and ready else None


def node_view(core: client.CoreV1Api, name: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    n = core.read_node(name)
    return dict(n.metadata.labels or {}), dict(n.metadata.annotations or {}), [t.key for t in n.spec.taints or []]


def settled(core: client.CoreV1Api, name: str) -> bool:
    """migctl is done with the node: no taint, no phase annotations."""
    _, ann, taints = node_view(core, name)
    return TAINT not in taints and "migctl.io/phase" not in ann and "migctl.io/plan-id" not in ann


@contextmanager
def running(ctl: Controller, core: client.CoreV1Api, namespace: str) -> Iterator[Controller]:
    ctl.start(sync_timeout=20)
    try:
        yield ctl
    finally:
        ctl.stop()


@contextmanager
def sim_for(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, nodes: list[str], **kw: Any
) -> Iterator[SimGpuOperator]:
    """Start the SIMULATED GPU Operator once migctl's ConfigMap exists (the operator mounts it)."""
    wait_for(
        "migctl ConfigMap",
        lambda: core.list_namespaced_config_map(namespace, field_selector=f"metadata.name={CM}").items,
    )
    with SimGpuOperator(api, config_map=CM, namespace=namespace, nodes=nodes, **kw) as sim:
        yield sim


def assert_reconfigured(core: client.CoreV1Api, node: str, gpus: dict[int, GpuConfig]) -> None:
    labels, ann, taints = node_view(core, node)
    assert TAINT not in taints
    assert labels["nvidia.com/mig.config"] == config_name(gpus)
    assert labels["nvidia.com/mig.config.state"] == SUCCESS
    layout = json.loads(ann["migctl.io/layout"])
    assert layout["config"] == config_name(gpus)
    assert layout["gpus"] == {str(i): {"mig": g.mig_enabled, "layout": dict(g.layout)} for i, g in gpus.items()}
    for key in ("migctl.io/phase", "migctl.io/target", "migctl.io/plan-id", "migctl.io/phase-since"):
        assert key not in ann


# -- happy path ------------------------------------------------------------------------------------------------


def test_pending_pods_get_a_new_layout_and_run(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Pending 3g.40gb pods no node offers -> plan, taint, ConfigMap, relabel, SIMULATED mig-manager success,
    capacity, untaint; kube-scheduler binds them and kwok runs them."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.3) as sim:
        for pod in ("big-1", "big-2"):
            core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))

        # While it works the node is tainted and carries the plan (observed at least once).
        wait_for("taint", lambda: TAINT in node_view(core, node)[2], timeout=15, interval=0.02)
        for pod in ("big-1", "big-2"):
            assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
        wait_for("node settled", lambda: settled(core, node))
        assert_reconfigured(core, node, TARGET_3G)
        applied = [o for o in sim.outcomes(node) if o.config == config_name(TARGET_3G)]
        assert [o.state for o in applied] == [SUCCESS], sim.history

        cm = core.read_namespaced_config_map(CM, namespace)
        configs = yaml.safe_load(cm.data["config.yaml"])["mig-configs"]
        assert ALL_1G in configs and config_name(TARGET_3G) in configs  # seeded + the new layout

        # the Events are written after the untaint the waits above saw: wait for each, don't race them
        def sent() -> set[str]:
            both = ctl.events.sent + ctl.actuator.events.sent  # type: ignore[union-attr]
            reasons = {r for what, r, _ in both if what.startswith("Node")}
            return reasons if {"MigctlReconfiguring", "MigctlReconfigured"} <= reasons else set()

        def on(name: str, ns: str, reason: str, text: str = "") -> bool:
            evs = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            return any(e.reason == reason and text in e.message for e in evs)

        wait_for("both Events sent", sent, timeout=10)
        wait_for("the Reconfigured Event", lambda: on(node, "default", "MigctlReconfigured"), timeout=10)
        wait_for("the Planned Event on big-1", lambda: on("big-1", namespace, "MigctlPlanned", node), timeout=10)

        def described(pod: str) -> set[str]:
            """The Events `kubectl describe pod` shows: it selects by involvedObject name, namespace, kind and uid
            (kubectl pkg/describe searchEvents), so an Event without the pod's uid is never shown."""
            uid = core.read_namespaced_pod(pod, namespace).metadata.uid
            selector = (f"involvedObject.name={pod},involvedObject.namespace={namespace},involvedObject.kind=Pod,"
                        f"involvedObject.uid={uid}")  # fmt: skip
            return {e.reason for e in core.list_namespaced_event(namespace, field_selector=selector).items}

        wait_for("describe shows MigctlPlanned and MigctlReconfigured on big-1",
                 lambda: {"MigctlPlanned", "MigctlReconfigured"} <= described("big-1"), timeout=10)  # fmt: skip

        port = ctl.metrics_port
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "migctl_reconfigurations_succeeded_total 1.0" in body
        assert "migctl_leader 1.0" in body
        for path in ("/healthz", "/readyz"):
            assert urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).status == 200


# -- failures --------------------------------------------------------------------------------------------------


def wait_reconciles(ctl: Controller, n: int, timeout: float = 15.0) -> None:
    """Let the controller run `n` more full reconciles (so a wrong second attempt would have happened)."""
    start = ctl.reconciles
    wait_for(f"{n} more reconciles", lambda: ctl.reconciles >= start + n, timeout=timeout)


def test_mig_manager_failed_rolls_back_and_backs_off(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """SIMULATED mig-manager answers `failed`: migctl relabels the previous config, untaints, records a backoff,
    emits a Warning Event, and does not try the node again while backing off."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2) as sim:
        wait_for("sim saw the node", lambda: sim.outcomes(node))
        sim.fail_with = "injected: GPU reset failed"
        core.create_namespaced_pod(namespace, mig_pod("big", namespace, "3g.40gb"))

        def rolled_back() -> dict[str, str] | None:
            _, ann, taints = node_view(core, node)
            return ann if "migctl.io/backoff-until" in ann and TAINT not in taints else None

        ann = wait_for("rollback with backoff", rolled_back, timeout=30)
        assert ann["migctl.io/failures"] == "1"
        assert float(ann["migctl.io/backoff-until"]) > time.time() + 500  # failure_backoff_s 600
        assert "failed" in ann["migctl.io/last-error"]
        assert "migctl.io/phase" not in ann
        labels, _, _ = node_view(core, node)
        assert labels["nvidia.com/mig.config"] == ALL_1G  # back to the previous config
        wait_for(
            "rollback relabel succeeded", lambda: node_view(core, node)[0].get("nvidia.com/mig.config.state") == SUCCESS
        )
        states = [(o.config, o.state) for o in sim.outcomes(node)]
        assert states.count((ALL_1G, SUCCESS)) == 2, states  # first sight, then the rollback
        assert [s for c, s in states if c != ALL_1G] == [FAILED], states

        wait_reconciles(ctl, 3)
        assert [s for c, s in ((o.config, o.state) for o in sim.outcomes(node)) if c != ALL_1G] == [FAILED]
        assert TAINT not in node_view(core, node)[2]
        assert core.read_namespaced_pod("big", namespace).spec.node_name is None
        sent = ctl.actuator.events.sent  # type: ignore[union-attr]
        wait_for("the RolledBack Event", lambda: any(r == "MigctlRolledBack" for _, r, _ in sent), timeout=10)


def _priority_class(api: client.ApiClient, name: str, value: int) -> None:
    client.SchedulingV1Api(api).create_priority_class({"metadata": {"name": name}, "value": value})


def test_pdb_blocking_eviction_rolls_back(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """A plan that evicts a lower-priority pod meets a PodDisruptionBudget: the real apiserver answers 429
    until the eviction timeout, then migctl untaints, backs off and leaves the protected pod running."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    low, high = f"{namespace}-low", f"{namespace}-high"
    _priority_class(api, low, 10)
    _priority_class(api, high, 1000)
    try:
        core.create_namespaced_pod(namespace, mig_pod("guarded", namespace, "1g.10gb", priorityClassName=low))
        wait_for("guarded running", lambda: running_on(core, namespace, "guarded"))
        policy = client.PolicyV1Api(api)
        policy.create_namespaced_pod_disruption_budget(
            namespace,
            {
                "metadata": {"name": "guarded"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
            },
        )
        pdb = policy.read_namespaced_pod_disruption_budget("guarded", namespace)
        status = {"observedGeneration": pdb.metadata.generation, "currentHealthy": 1, "desiredHealthy": 1,
                  "expectedPods": 1, "disruptionsAllowed": 0}  # fmt: skip
        policy.patch_namespaced_pod_disruption_budget_status("guarded", namespace, {"status": status})

        cfg = config_for(namespace, eviction_timeout_s=2.0)
        cfg = cfg.model_copy(update={"planner": cfg.planner.model_copy(update={"evictions": "lower-priority"})})
        ctl = Controller(cfg, api, identity="a")
        with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2) as sim:
            core.create_namespaced_pod(namespace, mig_pod("urgent", namespace, "7g.80gb", priorityClassName=high))
            wait_for("taint", lambda: TAINT in node_view(core, node)[2], timeout=15, interval=0.02)

            def rolled_back() -> dict[str, str] | None:
                _, ann, taints = node_view(core, node)
                return ann if "migctl.io/backoff-until" in ann and TAINT not in taints else None

            ann = wait_for("rollback", rolled_back, timeout=20)
            assert "PodDisruptionBudget" in ann["migctl.io/last-error"]
            assert running_on(core, namespace, "guarded") == node  # never evicted
            assert node_view(core, node)[0]["nvidia.com/mig.config"] == ALL_1G  # config never touched
            assert all(o.config == ALL_1G for o in sim.outcomes(node)), sim.history
            body = urllib.request.urlopen(f"http://127.0.0.1:{ctl.metrics_port}/metrics", timeout=5).read().decode()
            assert 'migctl_reconfigurations_failed_total{cause="eviction"} 1.0' in body
            assert "migctl_evictions_total 0.0" in body
    finally:
        for name in (low, high):
            client.SchedulingV1Api(api).delete_priority_class(name)


# -- crash at every step, then a fresh controller resumes ------------------------------------------------------


# The steps every successful reconfiguration passes (crash_points_test.py covers the others, in real processes).
HAPPY_STEPS = ("tainted", "drained", "configmap-merged", "configmap-written", "labelled", "success-seen",
               "mig-manager-succeeded", "verified")  # fmt: skip


@pytest.mark.parametrize("step", HAPPY_STEPS)
def test_killed_at_each_step_a_new_controller_resumes(
    step: str, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Controller A "dies" right after `step` (its hook halts it and raises); controller B, a fresh instance,
    resumes the node from its annotations (same plan id, no new start) and converges; mig-manager applied the
    layout exactly once."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    killed = threading.Event()
    seen: dict[str, str] = {}

    def hook(name: str, at: str) -> None:
        if at == step and not killed.is_set():
            seen.update(node_view(core, node)[1])  # `name` is the ConfigMap's at configmap-merged
            ctl_a.halt()
            killed.set()
            raise Stopped(f"simulated crash after {at}")

    ctl_a = Controller(config_for(namespace), api, identity="a", hook=hook)
    with sim_for_later(api, core, namespace, [node]) as sim:
        ctl_a.start(sync_timeout=20)
        sim.start_when_ready()
        for pod in ("big-1", "big-2"):
            core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))
        wait_for(f"crash after {step}", killed.is_set, timeout=30)
        ctl_a.stop(release=True)
        _, ann, taints = node_view(core, node)
        if step != "verified":
            assert TAINT in taints and ann["migctl.io/plan-id"] == seen["migctl.io/plan-id"]

        ctl_b = Controller(config_for(namespace), api, identity="b")
        with running(ctl_b, core, namespace):
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
            wait_for("node settled", lambda: settled(core, node))
        assert_reconfigured(core, node, TARGET_3G)
        assert [o.state for o in sim.sim.outcomes(node) if o.config == config_name(TARGET_3G)] == [SUCCESS]
        assert ctl_b.actuator is not None
        assert ctl_b.metrics.started._value.get() == 0  # resumed, never started a second time
        assert (node, "succeeded", "") in ctl_b.actuator.outcomes
        configs = yaml.safe_load(core.read_namespaced_config_map(CM, namespace).data["config.yaml"])["mig-configs"]
        assert sorted(c for c in configs if c.startswith("migctl-")) == [config_name(TARGET_3G)]  # none lost/stale


class _LateSim:
    def __init__(self, api: client.ApiClient, core: client.CoreV1Api, namespace: str, nodes: list[str]) -> None:
        self.api, self.core, self.namespace, self.nodes = api, core, namespace, nodes
        self.sim = SimGpuOperator(api, config_map=CM, namespace=namespace, nodes=nodes, delay=0.3)
        self.started = False

    def start_when_ready(self) -> None:
        wait_for("migctl ConfigMap", lambda: self.core.list_namespaced_config_map(
            self.namespace, field_selector=f"metadata.name={CM}").items)  # fmt: skip
        self.sim.start()
        self.started = True


@contextmanager
def sim_for_later(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, nodes: list[str]
) -> Iterator[_LateSim]:
    late = _LateSim(api, core, namespace, nodes)
    try:
        yield late
    finally:
        if late.started:
            late.sim.stop()


# -- two replicas ----------------------------------------------------------------------------------------------


def test_two_replicas_only_the_leader_acts_and_failover_resumes(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Two controllers share a Lease: exactly one leads and acts. The leader dies mid-reconfiguration without
    releasing the Lease; the other takes over after the lease expires and finishes the node."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    died = threading.Event()
    replicas: dict[str, Controller] = {}

    def hook(name: str, at: str) -> None:
        if at == "labelled" and not died.is_set():
            leader = next(c for c in replicas.values() if c.leading)
            leader.halt()
            died.set()
            raise Stopped("leader crashed")

    for ident in ("a", "b"):
        replicas[ident] = Controller(config_for(namespace), api, identity=ident, hook=hook)
    with sim_for_later(api, core, namespace, [node]) as sim:
        for c in replicas.values():
            c.start(sync_timeout=20)
        try:
            first = wait_for("a leader", lambda: [i for i, c in replicas.items() if c.leading])
            assert len(first) == 1
            leader_id = first[0]
            follower_id = "b" if leader_id == "a" else "a"
            follower = replicas[follower_id]
            sim.start_when_ready()
            for pod in ("big-1", "big-2"):
                core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))
            wait_for("leader died after labelling", died.is_set, timeout=30)
            assert not follower.leading and follower.actuator is None  # the follower never acted
            died_at = time.monotonic()
            replicas[leader_id].stop(release=False)  # a crash: the Lease is not handed back

            wait_for("follower takes over", lambda: follower.leading, timeout=15)
            assert time.monotonic() - died_at >= 1.0  # only after the lease expired (2 s, minus one renew period)
            lease = client.CoordinationV1Api(api).read_namespaced_lease("migctl", namespace)
            assert lease.spec.holder_identity == follower_id
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
            wait_for("node settled", lambda: settled(core, node))
            assert_reconfigured(core, node, TARGET_3G)
            assert [o.state for o in sim.sim.outcomes(node) if o.config == config_name(TARGET_3G)] == [SUCCESS]
            assert follower.metrics.started._value.get() == 0
            assert follower.actuator is not None and (node, "succeeded", "") in follower.actuator.outcomes
        finally:
            for c in replicas.values():
                c.stop()


# -- injected API errors ---------------------------------------------------------------------------------------


class FlakyApiClient(client.ApiClient):
    """Fails node/ConfigMap/eviction calls on a fixed schedule: 500 before the call, 500 *after* it reached the
    server (a lost response: the retry repeats a write that already happened), 409 before, 503 on reads."""

    WRITE_MODES = ("500-before", "500-after", "409-before", "ok")

    def __init__(self, configuration: client.Configuration, budget: int) -> None:
        super().__init__(configuration)
        self.budget = budget
        self.writes = 0
        self.reads = 0
        self.injected: list[str] = []
        self.lock = threading.Lock()

    def call_api(self, method: str, url: str, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        watched = "watch=" in url
        relevant = not watched and any(p in url for p in ("/nodes", "/configmaps", "/eviction"))
        mode = "ok"
        with self.lock:
            if relevant and len(self.injected) < self.budget:
                if method in ("PATCH", "POST", "PUT"):
                    mode = self.WRITE_MODES[self.writes % len(self.WRITE_MODES)]
                    self.writes += 1
                elif method == "GET":
                    self.reads += 1
                    mode = "503-before" if self.reads % 5 == 0 else "ok"
                if mode != "ok":
                    self.injected.append(f"{mode} {method} {url.split('?', maxsplit=1)[0]}")
        if mode.endswith("-before"):
            raise client.ApiException(status=int(mode[:3]), reason=f"injected {mode}")
        result = super().call_api(method, url, *args, **kwargs)
        if mode == "500-after":
            result.read()
            raise client.ApiException(status=500, reason="injected: response lost")
        return result


def test_injected_api_errors_are_retried_without_double_action(
    control_plane: Any, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """500s (before and after the write reached the server), 409s and 503s on node, ConfigMap and eviction
    calls: migctl retries (or re-reads and decides again) and converges; mig-manager applied once, one taint,
    one start, one config in the ConfigMap."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    flaky = FlakyApiClient(api.configuration, budget=40)
    ctl = Controller(config_for(namespace), flaky, identity="a")
    taints_seen: list[list[str]] = []
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.3) as sim:
        for pod in ("big-1", "big-2"):
            core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))

        def settled_and_running() -> bool:
            taints_seen.append(node_view(core, node)[2])
            return settled(core, node) and all(running_on(core, namespace, p) for p in ("big-1", "big-2"))

        wait_for("converged", settled_and_running, timeout=60, interval=0.05)
        assert_reconfigured(core, node, TARGET_3G)
        assert [o.state for o in sim.outcomes(node) if o.config == config_name(TARGET_3G)] == [SUCCESS]
        assert max(t.count(TAINT) for t in taints_seen) == 1
        assert ctl.metrics.started._value.get() == 1
        # counted after the untaint the wait above saw: wait for it, then check it counted once
        wait_for("the success counted", lambda: ctl.metrics.succeeded._value.get() >= 1, timeout=10)
        assert ctl.metrics.succeeded._value.get() == 1
        configs = yaml.safe_load(core.read_namespaced_config_map(CM, namespace).data["config.yaml"])["mig-configs"]
        assert sorted(c for c in configs if c.startswith("migctl-")) == [config_name(TARGET_3G)]
        kinds = {i.split()[0] for i in flaky.injected}
        assert {"500-before", "500-after", "409-before"} <= kinds, flaky.injected
    flaky.close()


# -- dry run and pause -----------------------------------------------------------------------------------------


def test_dry_run_changes_nothing(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """--dry-run plans, logs and emits Events saying what it would do; nodes and ConfigMaps keep their
    resourceVersions, no ConfigMap or Lease is created. (The node is not kwok-managed, so no heartbeat
    changes its resourceVersion either.)"""
    from .gpunodes import gpu_node_body

    seed_configmap(core, namespace)
    node = f"{namespace}-dry"
    body = gpu_node_body(node, "h100-80gb", [GpuConfig.mig({"1g.10gb": 7})], labels={GROUP: namespace},
                         mig_config=ALL_1G)  # fmt: skip
    del body["metadata"]["annotations"]["kwok.x-k8s.io/node"]
    core.create_node(body)
    node_names.append(node)
    core.create_namespaced_pod(namespace, mig_pod("big", namespace, "3g.40gb"))
    before_node = core.read_node(node).metadata.resource_version
    before_cms = {
        c.metadata.name: c.metadata.resource_version for c in core.list_namespaced_config_map(namespace).items
    }
    ctl = Controller(config_for(namespace, dry_run=True), api, identity="a")
    with running(ctl, core, namespace):

        def would() -> list[Any]:
            evs = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
            return [e for e in evs if e.reason == "MigctlWouldReconfigure"]

        found = wait_for("dry-run Event", would, timeout=20)
        assert config_name(TARGET_3G) in found[0].message or "would reconfigure" in found[0].message
        wait_reconciles(ctl, 3)
        assert core.read_node(node).metadata.resource_version == before_node
        after_cms = {
            c.metadata.name: c.metadata.resource_version for c in core.list_namespaced_config_map(namespace).items
        }
        assert after_cms == before_cms  # nothing written, migctl's ConfigMap not even created
        assert not client.CoordinationV1Api(api).list_namespaced_lease(namespace).items

        def planned() -> bool:  # the pod's Event and the node's are written one after the other
            evs = core.list_namespaced_event(namespace, field_selector="involvedObject.name=big").items
            return any(e.reason == "MigctlPlanned" and "would place" in e.message for e in evs)

        wait_for("the would-place Event on the pod", planned, timeout=10)


def test_pause_switch_on_the_configmap(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """`migctl.io/paused=true` on migctl's ConfigMap stops new reconfigurations; removing it resumes."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.2):
        core.patch_namespaced_config_map(CM, namespace, {"metadata": {"annotations": {"migctl.io/paused": "true"}}})
        wait_for("pause seen", lambda: ctl.metrics.paused._value.get() == 1, timeout=10)
        core.create_namespaced_pod(namespace, mig_pod("big", namespace, "3g.40gb"))
        wait_for(
            "held as paused",
            lambda: (node, False, "paused") in ctl.last_decisions,
            timeout=15,
        )
        wait_reconciles(ctl, 2)
        assert TAINT not in node_view(core, node)[2]
        core.patch_namespaced_config_map(CM, namespace, {"metadata": {"annotations": {"migctl.io/paused": None}}})
        assert wait_for("big running", lambda: running_on(core, namespace, "big"), timeout=40) == node
