"""Crash points: `migctl run` (a real process) SIGKILLs itself at one step (MIGCTL_FAILPOINT), then a new
controller converges with no taint left, from the node's annotations alone.

Real: kube-apiserver, kube-scheduler, kwok, evictions, Leases. SIMULATED: the GPU Operator's mig-manager,
device plugin and GFD (sim_gpu_operator.py), at their real interface (labels, node status, the ConfigMap).
The steps every successful reconfiguration passes are also covered in-process in test_controller_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from migctl.config import Config
from migctl.controller.loop import Controller
from migctl.core.model.gpu_config import GpuConfig, config_name

from .controller_process import ControllerProcess
from .controlplane import ControlPlane
from .gpunodes import create_gpu_node
from .sim_gpu_operator import SUCCESS, SimGpuOperator
from .test_controller_e2e import (
    ALL_1G,
    CM,
    GROUP,
    SEED,
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
)
from .waiting import wait_for

pytestmark = pytest.mark.cluster
T3G = config_name(TARGET_3G)


@contextmanager
def crashed_at(
    control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node: str,
    cfg: Config, failpoint: str, tmp_path: Path, pods: list[dict[str, Any]], **sim: Any,
) -> Iterator[SimGpuOperator]:  # fmt: skip
    """Controller A, a process, runs until the failpoint kills it; yields the (still running) simulator."""
    proc = ControllerProcess(control_plane, cfg, tmp_path / "a", failpoint=failpoint)
    try:
        wait_for("migctl ConfigMap", lambda: core.list_namespaced_config_map(
            namespace, field_selector=f"metadata.name={CM}").items, timeout=30)  # fmt: skip
        s = SimGpuOperator(api, config_map=CM, namespace=namespace, nodes=[node], delay=0.3)
        for k, v in sim.items():
            setattr(s, k, v)  # before it starts: ignore_first_sight must hold for its first list
        with s:
            for pod in pods:
                core.create_namespaced_pod(namespace, pod)
            proc.wait_killed(timeout=45)
            yield s
    finally:
        proc.stop()


def converge(ctl: Controller, core: client.CoreV1Api, node: str, timeout: float = 40) -> None:
    wait_for("node settled", lambda: settled(core, node) and not ctl.workers, timeout=timeout)


def big_pods(namespace: str) -> list[dict[str, Any]]:
    return [mig_pod(p, namespace, "3g.40gb") for p in ("big-1", "big-2")]


def test_crash_between_mig_manager_success_and_the_verifying_write(
    control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    cfg = config_for(namespace)
    pods = big_pods(namespace)
    with crashed_at(control_plane, api, core, namespace, node, cfg, "success-seen", tmp_path, pods) as sim:
        _, ann, taints = node_view(core, node)
        assert TAINT in taints and ann["migctl.io/phase"] == "applying"
        ctl = Controller(cfg, api, identity="b")
        with running(ctl, core, namespace):
            converge(ctl, core, node)
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
        assert_reconfigured(core, node, TARGET_3G)
        assert [o.state for o in sim.outcomes(node) if o.config == T3G] == [SUCCESS]
        assert ctl.metrics.started._value.get() == 0  # resumed, not started again


@pytest.mark.parametrize("step", ["rolling-back", "rollback-relabelled"])
def test_crash_while_rolling_back_resumes_the_rollback(
    step: str, control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    """mig-manager fails the new config; A dies in the rollback; B finishes it from phase rolling-back."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    cfg = config_for(namespace)
    fault = {"fail_configs": {T3G: "injected: GPU reset failed"}}
    with crashed_at(control_plane, api, core, namespace, node, cfg, step, tmp_path, big_pods(namespace), **fault):
        _, ann, taints = node_view(core, node)
        assert TAINT in taints and ann["migctl.io/phase"] == "rolling-back"
        ctl = Controller(cfg, api, identity="b")
        with running(ctl, core, namespace):
            converge(ctl, core, node)
        labels, ann, _ = node_view(core, node)
        assert labels["nvidia.com/mig.config"] == ALL_1G and labels["nvidia.com/mig.config.state"] == SUCCESS
        assert ann["migctl.io/failures"] == "1" and "failed" in ann["migctl.io/last-error"]
        failed = ctl.metrics.failed.labels("mig-manager-failed")
        wait_for("the failure counted", lambda: failed._value.get() >= 1, timeout=10)  # counted after the untaint
        assert failed._value.get() == 1
        assert [o for o in ctl.actuator.outcomes if o[1] == "rolled-back"]  # type: ignore[union-attr]


def test_crash_in_the_label_toggle_path(
    control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    """The node's label already names the target config but its GPUs are not that layout (migctl's recorded
    layout says 1g.10gb x7): migctl removes the label to re-trigger mig-manager and dies right after; B sets it."""
    seed_configmap(core, namespace)
    seed = yaml.safe_load(core.read_namespaced_config_map(SEED, namespace).data["config.yaml"])
    seed["mig-configs"][T3G] = [{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2}}]
    core.patch_namespaced_config_map(SEED, namespace, {"data": {"config.yaml": yaml.safe_dump(seed)}})
    node = f"{namespace}-gpu"
    layout = json.dumps({"config": ALL_1G, "gpus": {"0": {"mig": True, "layout": {"1g.10gb": 7}}}}, sort_keys=True)
    create_gpu_node(core, node, gpus=[GpuConfig.mig({"1g.10gb": 7})], labels={GROUP: namespace}, mig_config=T3G)
    core.patch_node(node, {"metadata": {"annotations": {"migctl.io/layout": layout}}})
    node_names.append(node)
    cfg = config_for(namespace)
    pods = big_pods(namespace)
    with crashed_at(control_plane, api, core, namespace, node, cfg, "label-toggled", tmp_path, pods,
                    ignore_first_sight=True) as sim:  # fmt: skip
        labels, ann, taints = node_view(core, node)
        assert TAINT in taints and "nvidia.com/mig.config" not in labels and ann["migctl.io/phase"] == "draining"
        ctl = Controller(cfg, api, identity="b")
        with running(ctl, core, namespace):
            converge(ctl, core, node)
        assert_reconfigured(core, node, TARGET_3G)
        assert [o.state for o in sim.outcomes(node) if o.config == T3G] == [SUCCESS]


def test_crash_mid_drain_after_some_evictions(
    control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    """The plan evicts two lower-priority pods; A dies after the first eviction; B evicts only the second."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    low, high = f"{namespace}-low", f"{namespace}-high"
    sched = client.SchedulingV1Api(api)
    for name, value in ((low, 10), (high, 1000)):
        sched.create_priority_class({"metadata": {"name": name}, "value": value})
    try:
        for p in ("low-1", "low-2"):
            core.create_namespaced_pod(namespace, mig_pod(p, namespace, "1g.10gb", priorityClassName=low))
        for p in ("low-1", "low-2"):
            wait_for(f"{p} running", lambda p=p: running_on(core, namespace, p))
        cfg = config_for(namespace)
        cfg = cfg.model_copy(update={"planner": cfg.planner.model_copy(update={"evictions": "lower-priority"})})
        urgent = [mig_pod("urgent", namespace, "7g.80gb", priorityClassName=high)]
        with crashed_at(control_plane, api, core, namespace, node, cfg, "evicted@1", tmp_path, urgent):
            _, ann, taints = node_view(core, node)
            assert TAINT in taints and ann["migctl.io/phase"] == "draining"
            ctl = Controller(cfg, api, identity="b")
            with running(ctl, core, namespace):
                assert wait_for("urgent running", lambda: running_on(core, namespace, "urgent"), timeout=40) == node
                converge(ctl, core, node)
            assert ctl.metrics.evictions._value.get() == 1  # only the one A had not done
            assert ctl.metrics.started._value.get() == 0
            left = {p.metadata.name for p in core.list_namespaced_pod(namespace).items}
            assert left == {"urgent"}
    finally:
        for name in (low, high):
            sched.delete_priority_class(name)


@pytest.mark.parametrize("how", ["relabelled-out-of-scope", "dry-run"])
def test_node_in_flight_that_no_leader_drives_is_released(
    how: str, control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    """A dies mid-`applying` (mig-manager hangs). Then either the node leaves the controller's node_selector, or
    the controller comes back in dry run: B releases the node (rollback to the previous config, untaint)."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    cfg = config_for(namespace, mig_manager_timeout_s=1.0, api_timeout_s=1.0)
    with crashed_at(control_plane, api, core, namespace, node, cfg, "labelled", tmp_path, big_pods(namespace),
                    hang_configs={T3G}):  # fmt: skip
        assert TAINT in node_view(core, node)[2]
        if how == "dry-run":
            cfg = config_for(namespace, mig_manager_timeout_s=1.0, api_timeout_s=1.0, dry_run=True)
        else:
            core.patch_node(node, {"metadata": {"labels": {GROUP: "elsewhere"}}})
        ctl = Controller(cfg, api, identity="b")
        with running(ctl, core, namespace):
            converge(ctl, core, node, timeout=30)
            labels, ann, _ = node_view(core, node)
            assert labels["nvidia.com/mig.config"] == ALL_1G
            wait_for("previous config applied", lambda: node_view(core, node)[0].get(
                "nvidia.com/mig.config.state") == SUCCESS)  # fmt: skip
        assert "released" in ann["migctl.io/last-error"]
        assert "migctl.io/failures" not in ann  # not the node's fault: no backoff

        def released() -> bool:  # the Event is written after the untaint that `converge` saw
            evs = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
            return any(e.reason == "MigctlRolledBack" and "released" in e.message for e in evs)

        wait_for("the released Event", released, timeout=10)
        assert ctl.metrics.started._value.get() == 0
