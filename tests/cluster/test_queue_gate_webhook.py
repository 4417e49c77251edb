"""The queue gate's webhook half against the real kube-apiserver: a pod asking for a MIG profile comes back gated
(`spec.schedulingGates: [{name: migctl.io/queue}]`) while the controller's Lease is fresh, and ungated when there
is none or it is stale (fail open). The webhook runs in-process as in test_webhook.py, with `controller.queue_gate`
on and its Lease in the test namespace; the configuration's matchConditions (MIG profile pods are sent too) are
evaluated by the real API server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes import client

from migctl.config import ControllerSettings
from migctl.config.webhook import WebhookSettings
from migctl.webhook.app import Webhook
from migctl.wire.names import QUEUE_GATE

from .waiting import wait_for
from .webhook_harness import served_webhook

pytestmark = pytest.mark.cluster
LEASE = "migctl-test"


def profile_pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/mig-1g.10gb": "1"}}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }


def gates(pod: client.V1Pod) -> list[str]:
    return [g.name for g in pod.spec.scheduling_gates or []]


@pytest.fixture
def webhook(api: client.ApiClient, namespace: str) -> Iterator[Webhook]:
    name = f"migctl-webhook-{namespace}"
    settings = WebhookSettings.model_validate(
        {"address": "127.0.0.1", "port": 0, "namespace": namespace, "configuration_name": name, "refresh_s": 0.5,
         "events": False, "tls": {"secret_name": "migctl-webhook-tls", "ip_addresses": ["127.0.0.1"]}}
    )  # fmt: skip
    controller = ControllerSettings.model_validate(
        {"queue_gate": True, "leader_election": {"lease_name": LEASE, "lease_namespace": namespace,
                                                 "lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 1}}
    )  # fmt: skip
    with served_webhook(api, settings, [namespace], controller) as (app, _, _):
        yield app


def write_lease(api: client.ApiClient, namespace: str, age_s: float) -> None:
    """The controller's Lease as its leader writes it, last renewed `age_s` ago."""
    renewed = (datetime.now(UTC) - timedelta(seconds=age_s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {"metadata": {"name": LEASE}, "spec": {"holderIdentity": "migctl-0", "leaseDurationSeconds": 3,
                                                   "renewTime": renewed, "acquireTime": renewed}}  # fmt: skip
    leases = client.CoordinationV1Api(api)
    try:
        old = leases.read_namespaced_lease(LEASE, namespace)
    except client.ApiException:
        leases.create_namespaced_lease(namespace, body)
        return
    body["metadata"]["resourceVersion"] = old.metadata.resource_version
    leases.replace_namespaced_lease(LEASE, namespace, body)


def test_profile_pods_are_gated_only_while_the_controllers_lease_is_fresh(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, webhook: Webhook
) -> None:
    def dry_run_gates() -> list[str]:
        pod = core.create_namespaced_pod(namespace, profile_pod(f"probe-{uuid.uuid4().hex[:6]}"), dry_run="All")
        return gates(pod)

    assert webhook.lease is not None and not webhook.lease.alive()  # no Lease yet
    write_lease(api, namespace, age_s=0)
    wait_for("a fresh Lease to gate profile pods", lambda: dry_run_gates() == [QUEUE_GATE], timeout=30, interval=0.3)
    pod = core.create_namespaced_pod(namespace, profile_pod("gated"))
    assert gates(pod) == [QUEUE_GATE]  # the API server accepted the patched pod: a valid gate
    assert core.read_namespaced_pod("gated", namespace).spec.node_name is None  # kube-scheduler leaves it alone

    write_lease(api, namespace, age_s=60)  # the controller stopped renewing: fail open
    wait_for("a stale Lease to stop the gating", lambda: dry_run_gates() == [], timeout=30, interval=0.3)
    assert gates(core.create_namespaced_pod(namespace, profile_pod("stale"))) == []

    client.CoordinationV1Api(api).delete_namespaced_lease(LEASE, namespace)  # no Lease at all
    wait_for("the webhook to see no Lease", lambda: webhook.lease is not None and webhook.lease.why == "no Lease")
    assert gates(core.create_namespaced_pod(namespace, profile_pod("no-lease"))) == []
