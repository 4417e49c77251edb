"""Hostile pods and a broken node beside normal ones, against the real kube-apiserver and kube-scheduler.

Real: kube-apiserver (it accepts every object below), kube-scheduler, kwok. SIMULATED: the GPU Operator's
mig-manager, device plugin and GFD (`sim_gpu_operator.py`). Issue 21: one pod with the annotation
`migctl.io/vram: "1e999999999"` (even a CPU-only one) or a pending pod with the limit `migctl.io/vram: "1e5000"`
used to stop every reconcile. Now each costs only its own plan: the normal pods are planned and run, the
rejected objects are counted in `migctl_rejected_objects`, each gets a MigctlInvalid Event, and the controller
stays ready.
"""

from __future__ import annotations

import re
import urllib.request
from typing import Any

import pytest
from kubernetes import client

from migctl.controller.loop import Controller

from .test_controller_e2e import (
    GROUP,
    TARGET_3G,
    assert_reconfigured,
    config_for,
    gpu_node,
    mig_pod,
    running,
    running_on,
    seed_configmap,
    settled,
    sim_for,
)
from .waiting import wait_for

pytestmark = pytest.mark.cluster
VRAM = "migctl.io/vram"


def _pod(name: str, namespace: str, limits: dict[str, str], annotations: dict[str, str] | None = None) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "nodeSelector": {GROUP: namespace},
            "containers": [{"name": "main", "image": "registry.invalid/x", "resources": {"limits": limits}}],
        },
    }


def _metrics(ctl: Controller) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{ctl.metrics_port}/metrics", timeout=5).read().decode()


def _gauge(body: str, name: str, **labels: str) -> float | None:
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    m = re.search(rf"^{name}{{{re.escape(want)}}} (\S+)$" if want else rf"^{name} (\S+)$", body, re.M)
    return float(m.group(1)) if m else None


def test_hostile_pods_cost_only_themselves(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    broken = gpu_node(core, namespace, node_names, suffix="broken")  # a second node with a garbled GPU count
    core.patch_node(broken, {"metadata": {"labels": {"nvidia.com/gpu.count": "abc"}}})
    # the hostile ones first: the CPU-only pod runs on the GPU node itself (its annotation must not freeze it)
    hostile = {
        "cpu-only": _pod("cpu-only", namespace, {"cpu": "100m"}, {VRAM: "1e999999999"}),
        "huge-vram": _pod("huge-vram", "nowhere", {VRAM: "1e5000"}),  # pending (kube-scheduler would bind it)
        "many-instances": _pod("many-instances", namespace, {"nvidia.com/mig-3g.40gb": "1e18"}),
        "bad-need": _pod("bad-need", "nowhere", {"nvidia.com/mig-1g.10gb": "1"}, {VRAM: "Infinity"}),  # stays pending
    }
    for body in hostile.values():
        core.create_namespaced_pod(namespace, body)
    wait_for("cpu-only running", lambda: running_on(core, namespace, "cpu-only"), timeout=30)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.3):
        for pod in ("big-1", "big-2"):
            core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))
        try:
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=60) == node
        except TimeoutError:
            print(
                "plan:",
                ctl.last_plan and ctl.last_plan.to_dict(),
                "actuator:",
                ctl.actuator and ctl.actuator.events.sent,
            )
            raise
        wait_for("node settled", lambda: settled(core, node))
        assert_reconfigured(core, node, TARGET_3G)

        def counted() -> str | None:
            b = _metrics(ctl)
            pods, nodes = (
                _gauge(b, "migctl_rejected_objects", kind="Pod"),
                _gauge(b, "migctl_rejected_objects", kind="Node"),
            )
            return b if (pods, nodes) == (3, 1) else None  # huge-vram, many-instances, bad-need; the broken node

        body = wait_for("3 pods and 1 node counted as rejected", counted, timeout=15)
        assert _gauge(body, "migctl_reconcile_errors_total") == 0
        assert (_gauge(body, "migctl_last_successful_plan_timestamp_seconds") or 0) > 0
        assert urllib.request.urlopen(f"http://127.0.0.1:{ctl.metrics_port}/readyz", timeout=5).status == 200

        def invalid(name: str, ns: str) -> list[str]:
            events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
            return [e.message for e in events if e.reason == "MigctlInvalid"]

        # the API server stores 1e5000 as 100e4998
        (huge,) = wait_for("huge-vram event", lambda: invalid("huge-vram", namespace))
        assert f"resources[{VRAM}]: '100e4998' is out of range (exponent 4998" in huge, huge
        (many,) = wait_for("many-instances event", lambda: invalid("many-instances", namespace))
        assert "is out of range (a count of at most 448 per pod" in many, many
        (bad,) = wait_for("broken node event", lambda: invalid(broken, "default"))
        assert "label nvidia.com/gpu.count: 'abc' is not a whole number" in bad, bad
        assert not invalid("cpu-only", namespace)
        assert all(running_on(core, namespace, p) is None for p in ("many-instances", "bad-need", "huge-vram"))


# Absurd values the API server accepts (it stores 1e5000 as 100e4998); none can hold a GPU device on the test's
# MIG nodes: they offer no VRAM resource, no 7g.80gb instance, and cpu, memory and the rest are no devices.
ABSURD = {
    "absurd-vram": {VRAM: "1e5000", "cpu": "100m"},
    "absurd-profile": {"nvidia.com/mig-7g.80gb": "1e5000", "cpu": "100m"},
    "absurd-dongle": {"example.com/dongle": "1e5000", "cpu": "100m"},
    "absurd-cpu": {"cpu": "1e5000"},
    "absurd-memory": {"memory": "1e5000"},
    "absurd-storage": {"ephemeral-storage": "1e5000", "cpu": "100m"},
}


def _decided(core: client.CoreV1Api, namespace: str, name: str) -> bool:
    """kube-scheduler has bound the pod, or said it cannot."""
    pod = core.read_namespaced_pod(name, namespace)
    unschedulable = any(c.type == "PodScheduled" and c.status == "False" for c in (pod.status.conditions or []))
    return bool(pod.spec.node_name) or unschedulable


def _snapshot_now(api: client.ApiClient, core: client.CoreV1Api, namespace: str, ctl: Controller) -> Any:
    """The adapter's reading of the test's nodes and pods as the API server has them now."""
    from migctl.adapters.objects import snapshot_from_objects
    from migctl.core.hardware.catalog import load_catalog

    def plain(obj: Any, kind: str) -> dict[str, Any]:
        return {**api.sanitize_for_serialization(obj), "kind": kind}

    nodes = [plain(n, "Node") for n in core.list_node(label_selector=f"{GROUP}={namespace}").items]
    pods = [plain(p, "Pod") for p in core.list_namespaced_pod(namespace).items]
    configmaps = [plain(c, "ConfigMap") for c in core.list_namespaced_config_map(namespace).items]
    objects = [*nodes, *pods, *configmaps]
    return snapshot_from_objects(objects, load_catalog(), ctl.config.planner, ctl.config.gpu_operator)


def test_absurd_values_of_any_resource_freeze_no_node(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Issue 33: a pod with `migctl.io/vram: "1e5000"` was bound by kube-scheduler to a MIG node (which does not
    even offer that resource), read as "a bound pod I cannot read", and froze the node: servable pods stayed
    Pending. Now pods with absurd values of any resource sit beside normal ones; kube-scheduler binds what it
    binds; the pods that can be served run (the node is reshaped for them) and no node is frozen."""
    seed_configmap(core, namespace)
    node = gpu_node(core, namespace, node_names)
    for name, limits in ABSURD.items():
        core.create_namespaced_pod(namespace, _pod(name, namespace, limits))
    for name in ABSURD:
        wait_for(f"kube-scheduler decided {name}", lambda n=name: _decided(core, namespace, n), timeout=30)
    bound = {n for n in ABSURD if core.read_namespaced_pod(n, namespace).spec.node_name}
    for name in bound:  # kwok runs what was bound
        wait_for(f"{name} running", lambda n=name: running_on(core, namespace, n), timeout=30)
    ctl = Controller(config_for(namespace), api, identity="a")
    with running(ctl, core, namespace), sim_for(api, core, namespace, [node], delay=0.3):
        for pod in ("big-1", "big-2"):
            core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))
        try:
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=60) == node
        except TimeoutError:
            snap = _snapshot_now(api, core, namespace, ctl)
            print("bound:", sorted(bound), "frozen:", [(n.name, n.frozen_reason) for n in snap.nodes])
            print("warnings:", snap.warnings, "rejected:", snap.rejected)
            print("plan:", ctl.last_plan and ctl.last_plan.to_dict())
            raise
        wait_for("node settled", lambda: settled(core, node))
        assert_reconfigured(core, node, TARGET_3G)
        snap = _snapshot_now(api, core, namespace, ctl)
        assert {n.name: n.frozen_reason for n in snap.nodes if n.frozen_reason} == {}
        assert not any("usage is unknown" in w for w in snap.warnings), snap.warnings
        for name in bound & {"absurd-vram", "absurd-profile", "absurd-dongle"}:  # each a warning on its pod
            assert any(w.startswith(f"pod {namespace}/{name}: ") and "ignored" in w for w in snap.warnings), (
                name,
                snap.warnings,
            )
        assert all(running_on(core, namespace, p) == node for p in bound)  # nothing bound was evicted
        print("bound by kube-scheduler:", sorted(bound))
