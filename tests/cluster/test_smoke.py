"""Smoke tests of the cluster tier: a real kube-apiserver, kube-scheduler and kwok, plus the SIMULATED GPU Operator.

The API server, admission, PDB enforcement on evictions, the scheduler's extended-resource accounting and kwok's
node/pod lifecycle are real. The mig-manager/device-plugin/GFD part is simulated (`sim_gpu_operator.py`),
because no GPU and no mig-manager can run here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest
import yaml
from kubernetes import client

from migctl.core.hardware.naming import WHOLE_GPU_RESOURCE, resource_name
from migctl.core.model.gpu_config import GpuConfig

from .gpunodes import MIG_CONFIG_LABEL, advertised, allocatable, catalog, create_gpu_node
from .sim_gpu_operator import FAILED, PENDING, SUCCESS, Outcome, SimGpuOperator, wait_for_state
from .waiting import wait_for

pytestmark = pytest.mark.cluster

CM_NAME = "custom-mig-parted-config"


def pod_body(
    name: str, resources: Mapping[str, int], node_selector: Mapping[str, str], **labels: str
) -> dict[str, Any]:
    limits = {k: str(v) for k, v in resources.items()}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeSelector": dict(node_selector),
            "containers": [{"name": "main", "image": "registry.invalid/cuda:fake", "resources": {"limits": limits}}],
        },
    }


def running_on(core: client.CoreV1Api, namespace: str, pod: str) -> Callable[[], str | None]:
    def check() -> str | None:
        p = core.read_namespaced_pod(pod, namespace)
        ready = any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        return p.spec.node_name if p.status.phase == "Running" and ready else None

    return check


def gpu_resources(core: client.CoreV1Api, node: str) -> dict[str, int]:
    return {k: int(v) for k, v in allocatable(core, node).items() if int(v) > 0}


# -- scheduler + kwok ----------------------------------------------------------------------------------------


def test_scheduler_binds_mig_pod_to_the_node_that_advertises_it(
    core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    group = {"migctl.test/group": namespace}
    mig_node, whole_node = f"{namespace}-mig", f"{namespace}-whole"
    create_gpu_node(core, mig_node, gpus=[GpuConfig.mig({"1g.10gb": 7})], labels=group)
    create_gpu_node(core, whole_node, gpus=[GpuConfig.disabled()], labels=group)
    node_names += [mig_node, whole_node]

    core.create_namespaced_pod(namespace, pod_body("fits", {resource_name("1g.10gb"): 1}, group))
    core.create_namespaced_pod(namespace, pod_body("no-such-slice", {resource_name("3g.40gb"): 1}, group))

    assert wait_for("pod Running via kube-scheduler + kwok", running_on(core, namespace, "fits")) == mig_node

    def unschedulable() -> str | None:
        p = core.read_namespaced_pod("no-such-slice", namespace)
        cond = next((c for c in p.status.conditions or [] if c.type == "PodScheduled"), None)
        return cond.message if cond and cond.status == "False" and cond.reason == "Unschedulable" else None

    message = wait_for("PodScheduled=False/Unschedulable", unschedulable)
    assert f"Insufficient {resource_name('3g.40gb')}" in message
    assert core.read_namespaced_pod("no-such-slice", namespace).spec.node_name is None


# -- PodDisruptionBudget on the real eviction API ------------------------------------------------------------


def _evict(policy: client.PolicyV1Api, core: client.CoreV1Api, namespace: str, pod: str) -> client.ApiException | None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod, namespace=namespace))
    try:
        core.create_namespaced_pod_eviction(pod, namespace, body)
    except client.ApiException as e:
        return e
    return None


def _compute_pdb_status(policy: client.PolicyV1Api, namespace: str, name: str, healthy: int) -> None:
    """Stand in for kube-controller-manager's disruption controller (not run in this tier) for a minAvailable PDB."""
    pdb = policy.read_namespaced_pod_disruption_budget(name, namespace)
    desired = int(pdb.spec.min_available)
    status = {
        "observedGeneration": pdb.metadata.generation,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": healthy,
        "disruptionsAllowed": max(0, healthy - desired),
    }
    policy.patch_namespaced_pod_disruption_budget_status(name, namespace, {"status": status})


def test_eviction_blocked_by_pdb_returns_429(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    policy = client.PolicyV1Api(api)
    group = {"migctl.test/group": namespace}
    node = f"{namespace}-n"
    create_gpu_node(core, node, gpus=[GpuConfig.mig({"1g.10gb": 7})], labels=group)
    node_names.append(node)
    for pod in ("guarded", "free"):
        core.create_namespaced_pod(namespace, pod_body(pod, {resource_name("1g.10gb"): 1}, group, app=pod))
        wait_for(f"{pod} Running", running_on(core, namespace, pod))
    for pod, min_available in (("guarded", 1), ("free", 0)):
        spec = {"minAvailable": min_available, "selector": {"matchLabels": {"app": pod}}}
        policy.create_namespaced_pod_disruption_budget(namespace, {"metadata": {"name": pod}, "spec": spec})

    # Without kube-controller-manager nobody computes PDB status: status.observedGeneration (0) < generation,
    # and the apiserver answers 429 "still being processed" for every pod the PDB covers.
    unprocessed = _evict(policy, core, namespace, "guarded")
    assert unprocessed is not None and unprocessed.status == 429
    assert "is still being processed" in json.loads(unprocessed.body)["details"]["causes"][0]["message"]

    # With a computed status the real budget check runs: minAvailable 1 of 1 healthy -> 0 disruptions allowed
    # -> 429; minAvailable 0 -> 1 allowed -> evicted.
    _compute_pdb_status(policy, namespace, "guarded", healthy=1)
    _compute_pdb_status(policy, namespace, "free", healthy=1)
    blocked = _evict(policy, core, namespace, "guarded")
    assert blocked is not None and blocked.status == 429, blocked
    body = json.loads(blocked.body)
    assert body["reason"] == "TooManyRequests"
    assert "disruption budget" in body["message"]
    assert _evict(policy, core, namespace, "free") is None

    def gone() -> bool:
        try:
            core.read_namespaced_pod("free", namespace)
        except client.ApiException as e:
            return e.status == 404
        return False

    wait_for("evicted pod deleted (kwok pod-delete stage)", gone)
    assert core.read_namespaced_pod("guarded", namespace).metadata.deletion_timestamp is None


# -- the SIMULATED mig-manager / device plugin / GFD ---------------------------------------------------------


def _publish_config(core: client.CoreV1Api, namespace: str, configs: Mapping[str, list[dict[str, Any]]]) -> None:
    text = yaml.safe_dump({"version": "v1", "mig-configs": dict(configs)}, sort_keys=False)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": CM_NAME}, "data": {"config.yaml": text}})


def _label(core: client.CoreV1Api, node: str, config: str | None) -> None:
    core.patch_node(node, {"metadata": {"labels": {MIG_CONFIG_LABEL: config}}})


def _relabel(core: client.CoreV1Api, sim: SimGpuOperator, node: str, config: str, timeout: float = 30.0) -> Outcome:
    """Set the config label and wait for the simulator's next outcome; the node's state label must agree."""
    done = len(sim.outcomes(node))
    _label(core, node, config)
    outcome = wait_for(f"an outcome for {config}", lambda: sim.outcomes(node)[done:], timeout)[0]
    assert outcome.config == config, sim.history
    assert wait_for_state(core, node, {outcome.state}, timeout=5) == outcome.state
    return outcome


def _observe_states(core: client.CoreV1Api, node: str, until: set[str], timeout: float = 30.0) -> list[str]:
    """Every distinct mig.config.state value seen (polling fast) until one in `until` appears."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = (core.read_node(node).metadata.labels or {}).get("nvidia.com/mig.config.state", "")
        if not seen or seen[-1] != state:
            seen.append(state)
        if state in until:
            return seen
        time.sleep(0.05)
    raise TimeoutError(f"states seen on {node}: {seen}")


def test_sim_mig_manager_round_trips_a_label_change_to_success(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """SIMULATED mig-manager: relabel -> pending -> success, new capacity, and the real scheduler uses it."""
    model = catalog().model("h100-80gb")
    group = {"migctl.test/group": namespace}
    node = f"{namespace}-gpu"
    before = [GpuConfig.mig({"1g.10gb": 7}), GpuConfig.disabled()]
    create_gpu_node(core, node, gpus=before, labels=group)
    node_names.append(node)
    target = {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    _publish_config(
        core,
        namespace,
        {
            "balanced-plus-whole": [
                {"devices": [0], "mig-enabled": True, "mig-devices": target},
                {"devices": [1], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
            ]
        },
    )
    assert gpu_resources(core, node) == advertised(model, before)

    with SimGpuOperator(api, config_map=CM_NAME, namespace=namespace, nodes=[node], delay=1.0) as sim:
        _label(core, node, "balanced-plus-whole")
        states = _observe_states(core, node, {SUCCESS, FAILED})
        assert states[-2:] == [PENDING, SUCCESS], (states, sim.history)

        expected = advertised(model, [GpuConfig.mig(target), GpuConfig.mig({"7g.80gb": 1})])
        assert gpu_resources(core, node) == expected
        stale = {k: v for k, v in allocatable(core, node).items() if v == "0"}
        assert stale == {WHOLE_GPU_RESOURCE: "0"}  # vanished resources stay listed at 0, as the device plugin does
        labels = core.read_node(node).metadata.labels
        assert labels[f"{resource_name('1g.10gb')}.count"] == "2"
        assert labels[f"{resource_name('3g.40gb')}.memory"] == str(model.profile("3g.40gb").memory_mib)

    # The real scheduler now places a 3g.40gb pod on the reconfigured node.
    core.create_namespaced_pod(namespace, pod_body("big", {resource_name("3g.40gb"): 1}, group))
    assert wait_for("3g.40gb pod Running", running_on(core, namespace, "big")) == node


def test_sim_mig_manager_fails_when_a_gpu_that_would_change_is_busy(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """SIMULATED mig-manager: 'In use by another client' -> failed; an untouched busy GPU does not block."""
    model = catalog().model("h100-80gb")
    group = {"migctl.test/group": namespace}
    node = f"{namespace}-gpu"
    before = [GpuConfig.mig({"1g.10gb": 7}), GpuConfig.mig({"7g.80gb": 1})]
    create_gpu_node(core, node, gpus=before, labels=group)
    node_names.append(node)
    gpu0_new = {"4g.40gb": 1, "3g.40gb": 1}
    _publish_config(
        core,
        namespace,
        {
            "gpu0-split": [{"devices": [0], "mig-enabled": True, "mig-devices": gpu0_new}],
            "gpu1-split": [{"devices": [1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
        },
    )
    # A pod holding the (unchanged) GPU 1 and one holding a 1g.10gb slice of GPU 0.
    core.create_namespaced_pod(namespace, pod_body("on-gpu1", {resource_name("7g.80gb"): 1}, group))
    core.create_namespaced_pod(namespace, pod_body("on-gpu0", {resource_name("1g.10gb"): 1}, group))
    for pod in ("on-gpu1", "on-gpu0"):
        wait_for(f"{pod} Running", running_on(core, namespace, pod))

    with SimGpuOperator(api, config_map=CM_NAME, namespace=namespace, nodes=[node], delay=0.2) as sim:
        _label(core, node, "gpu0-split")
        assert _observe_states(core, node, {SUCCESS, FAILED})[-2:] == [PENDING, FAILED]
        assert "In use by another client" in sim.outcomes(node)[-1].message
        assert gpu_resources(core, node) == advertised(model, before)  # nothing changed

        # Free GPU 0 and retrigger by toggling the label, as NVIDIA documents; the GPU 1 pod keeps running.
        core.delete_namespaced_pod("on-gpu0", namespace, grace_period_seconds=0)
        wait_for(
            "on-gpu0 gone",
            lambda: not core.list_namespaced_pod(namespace, field_selector="metadata.name=on-gpu0").items,
        )
        _label(core, node, None)
        assert _relabel(core, sim, node, "gpu0-split").state == SUCCESS, sim.history
        assert gpu_resources(core, node) == advertised(model, [GpuConfig.mig(gpu0_new), before[1]])

        # GPU 1 is busy and would change: refused even though GPU 0 is free.
        refused = _relabel(core, sim, node, "gpu1-split")
        assert refused.state == FAILED
        assert resource_name("7g.80gb") in refused.message


def test_sim_mig_manager_rejects_impossible_unknown_and_injected(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """SIMULATED mig-manager: invalid geometry, an unknown config name and an injected failure all end in failed."""
    model = catalog().model("h100-80gb")
    node = f"{namespace}-gpu"
    before = [GpuConfig.mig({"1g.10gb": 7})]
    create_gpu_node(core, node, gpus=before)
    node_names.append(node)
    _publish_config(
        core,
        namespace,
        {
            "too-big": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1, "1g.10gb": 1}}],
            "whole": [{"devices": "all", "mig-enabled": False}],
        },
    )
    with SimGpuOperator(api, config_map=CM_NAME, namespace=namespace, nodes=[node], delay=0.1) as sim:
        for config, expected in (("too-big", "compute slices"), ("not-in-the-file", "no such config")):
            outcome = _relabel(core, sim, node, config)
            assert (outcome.state, expected in outcome.message) == (FAILED, True), outcome
        assert gpu_resources(core, node) == advertised(model, before)

        sim.fail_with = "injected: GPU reset failed"
        core.patch_node(node, {"metadata": {"labels": {"nvidia.com/mig.config.state": None}}})
        _label(core, node, "whole")
        assert _observe_states(core, node, {FAILED, SUCCESS})[-2:] == [PENDING, FAILED]
        assert sim.outcomes(node)[-1].message == "injected: GPU reset failed"
        assert gpu_resources(core, node) == advertised(model, before)

        sim.fail_with = None
        _label(core, node, None)
        assert _relabel(core, sim, node, "whole").state == SUCCESS
        assert gpu_resources(core, node) == {WHOLE_GPU_RESOURCE: 1}


def test_sim_capacity_can_lag_behind_success(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """SIMULATED device plugin restart: with capacity_lag, `success` comes first and allocatable follows."""
    model = catalog().model("h100-80gb")
    node = f"{namespace}-gpu"
    before = [GpuConfig.mig({"1g.10gb": 7})]
    create_gpu_node(core, node, gpus=before)
    node_names.append(node)
    _publish_config(
        core, namespace, {"one-7g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}
    )
    with SimGpuOperator(api, config_map=CM_NAME, namespace=namespace, nodes=[node], delay=0.1, capacity_lag=2.0):
        _label(core, node, "one-7g")
        assert wait_for_state(core, node, {SUCCESS, FAILED}) == SUCCESS
        assert gpu_resources(core, node) == advertised(model, before)  # not yet re-registered
        expected = advertised(model, [GpuConfig.mig({"7g.80gb": 1})])
        wait_for("allocatable after the lag", lambda: gpu_resources(core, node) == expected, timeout=10)
