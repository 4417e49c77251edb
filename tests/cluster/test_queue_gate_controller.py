"""The queue gate's controller half in the real control plane (test_controller_e2e.py's setup): a gated pod the
plan serves with a free instance is lifted, pinned to that node (`kubernetes.io/hostname`) and bound there by the
real kube-scheduler; a gated pod nothing serves stays gated until `queue_gate_max_hold_s`, then is lifted without
a pin. `controller.queue_gate` stays off there (the controller lifts every gate it finds either way); on, a pod a
free instance serves is claimed before the plan, then lifted and bound the same way."""

from __future__ import annotations

import time
from typing import Any

import pytest
from kubernetes import client

from migctl.controller.loop import Controller
from migctl.core.model.cluster import epoch_s
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.queue_gate import CLAIMED, FREE, OVERDUE, TEXT
from migctl.wire.names import HOSTNAME, QUEUE_GATE

from .gpunodes import create_gpu_node
from .test_controller_e2e import ALL_1G, GROUP, config_for, mig_pod, running, running_on, seed_configmap
from .waiting import wait_for

pytestmark = pytest.mark.cluster
OTHER = "example.com/other"


def gated_pod(name: str, namespace: str, profile: str) -> dict[str, Any]:
    pod = mig_pod(name, namespace, profile)
    pod["spec"]["schedulingGates"] = [{"name": OTHER}, {"name": QUEUE_GATE}]
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def gates(core: client.CoreV1Api, namespace: str, name: str) -> list[str]:
    return [g.name for g in core.read_namespaced_pod(name, namespace).spec.scheduling_gates or []]


def drop_other_gate(core: client.CoreV1Api, namespace: str, name: str) -> None:
    """Someone else's gate: the test lifts it itself, so only migctl's decides."""
    ops = [{"op": "test", "path": "/spec/schedulingGates/0/name", "value": OTHER},
           {"op": "remove", "path": "/spec/schedulingGates/0"}]  # fmt: skip
    core.patch_namespaced_pod(name, namespace, ops, _content_type="application/json-patch+json")


def test_a_served_pod_is_pinned_and_bound_and_an_unserved_one_waits_until_overdue(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    seed_configmap(core, namespace)
    for suffix in ("a", "b"):
        name = f"{namespace}-{suffix}"
        create_gpu_node(core, name, gpus=[GpuConfig.mig({"1g.10gb": 7})], mig_config=ALL_1G,
                        labels={GROUP: namespace, HOSTNAME: f"host-{name}"})  # fmt: skip
        node_names.append(name)
    hold = 6.0
    ctl = Controller(config_for(namespace, queue_gate_max_hold_s=hold), api, identity="a")
    with running(ctl, core, namespace):
        core.create_namespaced_pod(namespace, gated_pod("fits", namespace, "1g.10gb"))
        core.create_namespaced_pod(namespace, gated_pod("nowhere", namespace, "1g.5gb"))  # an A100 profile

        # free: migctl's gate lifted, the other gate kept, pinned to one of the two nodes by its hostname label
        wait_for("the gate of `fits` lifted", lambda: gates(core, namespace, "fits") == [OTHER], timeout=20)
        selector = core.read_namespaced_pod("fits", namespace).spec.node_selector
        pinned = selector[HOSTNAME].removeprefix("host-")
        assert pinned in node_names and selector[GROUP] == namespace
        assert core.read_namespaced_pod("fits", namespace).spec.node_name is None  # still gated (OTHER)
        drop_other_gate(core, namespace, "fits")
        bound = wait_for("kube-scheduler to bind `fits`", lambda: running_on(core, namespace, "fits"), timeout=30)
        assert bound == pinned

        # unserved: still gated while younger than the hold, then lifted without a pin
        created = epoch_s(core.read_namespaced_pod("nowhere", namespace).metadata.creation_timestamp.isoformat())
        assert created is not None
        start = ctl.reconciles
        wait_for("two more reconciles", lambda: ctl.reconciles >= start + 2, timeout=15)
        if time.time() < created + hold - 0.5:
            assert QUEUE_GATE in gates(core, namespace, "nowhere")
        wait_for("the gate of `nowhere` lifted", lambda: gates(core, namespace, "nowhere") == [OTHER], timeout=30)
        assert time.time() >= created + hold
        assert HOSTNAME not in (core.read_namespaced_pod("nowhere", namespace).spec.node_selector or {})

        def lifted(reason: str) -> float:
            return float(ctl.metrics.gate_lifts.labels(str(reason))._value.get())

        assert (lifted(FREE), lifted(OVERDUE)) == (1, 1)
        evs = {(e.involved_object.name, e.reason): e.message for e in core.list_namespaced_event(namespace).items}
        assert TEXT[FREE] in evs[("fits", "MigctlGateLifted")] and TEXT[OVERDUE] in evs[("nowhere", "MigctlGateLifted")]


def test_with_the_gate_on_a_pod_a_free_instance_serves_is_claimed_before_the_plan_and_bound(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    # controller.queue_gate on: the pod carries migctl's gate only, so the queue claims the free 1g.10gb before
    # the plan (`core/queue_claims.py`) and the plan is made with it bound; it is lifted as `claimed`, pinned, and
    # the real kube-scheduler binds it there
    seed_configmap(core, namespace)
    name = f"{namespace}-a"
    create_gpu_node(core, name, gpus=[GpuConfig.mig({"1g.10gb": 7})], mig_config=ALL_1G,
                    labels={GROUP: namespace, HOSTNAME: f"host-{name}"})  # fmt: skip
    node_names.append(name)
    ctl = Controller(config_for(namespace, queue_gate=True), api, identity="a")
    with running(ctl, core, namespace):
        pod = gated_pod("mine", namespace, "1g.10gb")
        pod["spec"]["schedulingGates"] = [{"name": QUEUE_GATE}]
        core.create_namespaced_pod(namespace, pod)
        bound = wait_for("kube-scheduler to bind `mine`", lambda: running_on(core, namespace, "mine"), timeout=30)
        assert bound == name
        assert core.read_namespaced_pod("mine", namespace).spec.node_selector[HOSTNAME] == f"host-{name}"
        assert float(ctl.metrics.gate_lifts.labels(str(CLAIMED))._value.get()) == 1
        assert ctl.last_plan is not None and "mine" not in {a.pod.split("/")[1] for a in ctl.last_plan.assignments}
        evs = {(e.involved_object.name, e.reason): e.message for e in core.list_namespaced_event(namespace).items}
        assert TEXT[CLAIMED] in evs[("mine", "MigctlGateLifted")]
