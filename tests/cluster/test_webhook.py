"""`migctl webhook` against the real kube-apiserver: it calls the webhook over HTTPS (URL clientConfig + caBundle).

Real: kube-apiserver (admission chain, MutatingWebhookConfiguration, dry-run), kube-scheduler (extended-resource
accounting and node affinity), kwok (marks bound pods Running). The webhook runs in-process (`Webhook`, threads)
on a loopback port with its own CA; its certificate lives in a Secret of the test namespace and it sets the
configuration's caBundle itself. Each test's configuration only selects the test's own namespaces, so other
tests in the session never pass through it, and it is deleted at teardown.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes import client

from migctl.config.webhook import WebhookSettings
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.vram.decide import CHOICE_ANNOTATION, PRODUCT_LABEL
from migctl.webhook.app import Webhook
from migctl.webhook.events import REASON

from .gpunodes import create_gpu_node
from .waiting import wait_for
from .webhook_harness import served_webhook

pytestmark = pytest.mark.cluster
VRAM = "migctl.io/vram"
H100 = "NVIDIA-H100-80GB-HBM3"


def vram_pod(name: str, vram: str = "7Gi", *, generate: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"generateName": name + "-"} if generate else {"name": name}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {VRAM: vram}}}],
            "terminationGracePeriodSeconds": 0,
        },
    }


@dataclass
class Env:
    webhook: Webhook
    configuration: str
    namespaces: list[str]
    admission: client.AdmissionregistrationV1Api

    def set_failure_policy(self, policy: str) -> None:
        cfg = self.admission.read_mutating_webhook_configuration(self.configuration)
        cfg.webhooks[0].failure_policy = policy
        self.admission.replace_mutating_webhook_configuration(self.configuration, cfg)


def _mutated(pod: client.V1Pod) -> bool:
    limits = pod.spec.containers[0].resources.limits or {}
    return VRAM not in limits and any(k.startswith("nvidia.com/mig-") for k in limits)


@pytest.fixture
def env(api: client.ApiClient, core: client.CoreV1Api, namespace: str) -> Iterator[Env]:
    opted_out = f"{namespace}-out"
    core.create_namespace({"metadata": {"name": opted_out, "labels": {"migctl.io/webhook": "disabled"}}})
    name = f"migctl-webhook-{namespace}"
    settings = WebhookSettings.model_validate(
        {
            "address": "127.0.0.1",
            "port": 0,
            "namespace": namespace,
            "configuration_name": name,
            "refresh_s": 0.5,
            "event_wait_s": 15,
            "tls": {"secret_name": "migctl-webhook-tls", "check_interval_s": 1.0, "ip_addresses": ["127.0.0.1"]},
        }
    )
    try:
        with served_webhook(api, settings, [namespace, opted_out]) as (webhook, admission, done):
            assert f"caBundle of {name} updated" in done
            yield Env(webhook, name, [namespace, opted_out], admission)
    finally:
        core.delete_collection_namespaced_pod(opted_out, grace_period_seconds=0)
        core.delete_namespace(opted_out)


def _h100_node(core: client.CoreV1Api, node_names: list[str], namespace: str, layout: dict[str, int]) -> str:
    name = f"{namespace}-h100"
    create_gpu_node(core, name, "h100-80gb", [GpuConfig.mig(layout)])
    node_names.append(name)
    return name


def _wait_until_mutating(env: Env, core: client.CoreV1Api, namespace: str) -> None:
    """The API server picks up the configuration (and its caBundle) asynchronously: probe with dry-run creates."""

    def probe() -> bool:
        pod = core.create_namespaced_pod(namespace, vram_pod(f"probe-{uuid.uuid4().hex[:6]}"), dry_run="All")
        return _mutated(pod)

    wait_for("the API server to call the webhook", probe, timeout=30, interval=0.3)


def test_vram_pod_rewritten_scheduled_and_running(
    env: Env, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """7Gi on an H100 cluster -> nvidia.com/mig-1g.10gb + product affinity + annotations; kube-scheduler binds it
    to the node offering that profile, kwok runs it, and an Event on the pod says what was chosen and why."""
    node = _h100_node(core, node_names, namespace, {"1g.10gb": 7})
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)

    pod = core.create_namespaced_pod(namespace, vram_pod("train"))
    limits = pod.spec.containers[0].resources.limits
    assert limits == {"nvidia.com/mig-1g.10gb": "1"}
    assert pod.metadata.annotations[VRAM] == "7Gi"
    choice = json.loads(pod.metadata.annotations[CHOICE_ANNOTATION])
    assert choice["model"] == "h100-80gb"
    assert choice["containers"] == [
        {"name": "main", "init": False, "request": "7Gi", "resource": "nvidia.com/mig-1g.10gb"}
    ]
    terms = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms
    assert len(terms) == 1
    (expr,) = terms[0].match_expressions
    assert (expr.key, expr.operator) == (PRODUCT_LABEL, "In")
    assert H100 in expr.values

    running = wait_for(
        "the pod to be bound and Running",
        lambda: (
            (p := core.read_namespaced_pod("train", namespace)).spec.node_name == node
            and p.status.phase == "Running"
            and p
        ),
    )
    assert running.spec.node_name == node

    events = wait_for(
        "the webhook's Event on the pod",
        lambda: (
            core.list_namespaced_event(namespace, field_selector=f"involvedObject.name=train,reason={REASON}").items
        ),
        timeout=20,
        interval=0.3,
    )
    assert events[0].involved_object.uid == running.metadata.uid
    assert "nvidia.com/mig-1g.10gb" in events[0].message
    assert "a free instance exists on node" in events[0].message

    # A generateName pod (every Deployment's) has no name at admission: its Event is found through the request uid.
    gen = core.create_namespaced_pod(namespace, vram_pod("worker", "4Gi", generate=True))
    assert _mutated(gen)
    gen_events = wait_for(
        "the Event on the generateName pod",
        lambda: (
            core.list_namespaced_event(
                namespace, field_selector=f"involvedObject.name={gen.metadata.name},reason={REASON}"
            ).items
        ),
        timeout=20,
        interval=0.3,
    )
    assert gen_events[0].involved_object.uid == gen.metadata.uid


def test_too_large_request_rejected_with_the_reason(
    env: Env, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    _h100_node(core, node_names, namespace, {"7g.80gb": 1})
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)
    with pytest.raises(client.ApiException) as err:
        core.create_namespaced_pod(namespace, vram_pod("giant", "100Gi"))
    assert err.value.status == 403
    body = json.loads(err.value.body)
    assert "denied the request" in body["message"]
    assert "asks for 100Gi (102400 MiB" in body["message"]
    assert "the largest MIG instance on the GPUs in this cluster is 7g.80gb with 81152 MiB" in body["message"]
    with pytest.raises(client.ApiException):
        core.read_namespaced_pod("giant", namespace)


def test_opted_out_namespace_untouched(env: Env, core: client.CoreV1Api, namespace: str, node_names: list[str]) -> None:
    _h100_node(core, node_names, namespace, {"1g.10gb": 7})
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)  # the webhook is live for the other namespace...
    pod = core.create_namespaced_pod(env.namespaces[1], vram_pod("mine"))  # ...but this one is labelled disabled
    assert pod.spec.containers[0].resources.limits == {VRAM: "7Gi"}
    assert CHOICE_ANNOTATION not in (pod.metadata.annotations or {})
    assert pod.spec.affinity is None


def test_webhook_down_ignore_admits_fail_rejects(
    env: Env, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """With the default failurePolicy Ignore an outage admits pods unchanged; with Fail it rejects them."""
    _h100_node(core, node_names, namespace, {"1g.10gb": 7})
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)
    env.webhook.stop()  # the port now refuses connections

    pod = core.create_namespaced_pod(namespace, vram_pod("while-down"))
    assert pod.spec.containers[0].resources.limits == {VRAM: "7Gi"}  # admitted, not rewritten

    env.set_failure_policy("Fail")

    def rejected() -> str | None:
        try:
            core.create_namespaced_pod(namespace, vram_pod(f"probe-{uuid.uuid4().hex[:6]}"), dry_run="All")
        except client.ApiException as e:
            return str(e.body)
        return None

    message = wait_for("the API server to apply failurePolicy Fail", rejected, timeout=30, interval=0.3)
    assert "failed calling webhook" in message
    assert "vram.migctl.io" in message


def test_controller_makes_the_chosen_instance_and_the_pod_runs(
    env: Env, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """No 1g.10gb exists (the idle H100 is one 7g.80gb): the webhook still picks 1g.10gb ("an idle GPU ... can be
    reshaped"), the controller (`migctl run`, in-process) plans it from the pod's request and annotation, the
    SIMULATED mig-manager applies it, and kube-scheduler binds the pod, which kwok runs."""
    import yaml

    from migctl.controller.loop import Controller

    from .sim_gpu_operator import SimGpuOperator
    from .test_controller_e2e import CM, GROUP, SEED, config_for

    configs = {"all-7g": [{"devices": "all", "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}]}
    text = yaml.safe_dump({"version": "v1", "mig-configs": configs}, sort_keys=False)
    core.create_namespaced_config_map(namespace, {"metadata": {"name": SEED}, "data": {"config.yaml": text}})
    node = f"{namespace}-h100"
    create_gpu_node(
        core, node, "h100-80gb", [GpuConfig.mig({"7g.80gb": 1})], labels={GROUP: namespace}, mig_config="all-7g"
    )
    node_names.append(node)
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)

    body = vram_pod("infer")
    body["spec"]["nodeSelector"] = {GROUP: namespace}
    pod = core.create_namespaced_pod(namespace, body)
    assert pod.spec.containers[0].resources.limits == {"nvidia.com/mig-1g.10gb": "1"}
    assert pod.metadata.annotations[VRAM] == "7Gi"

    ctl = Controller(config_for(namespace), api, identity="a")
    ctl.start(sync_timeout=20)
    try:
        wait_for(
            "migctl ConfigMap",
            lambda: core.list_namespaced_config_map(namespace, field_selector=f"metadata.name={CM}").items,
        )
        with SimGpuOperator(api, config_map=CM, namespace=namespace, nodes=[node], delay=0.3):
            running = wait_for(
                "the pod to run on the reshaped node",
                lambda: (p := core.read_namespaced_pod("infer", namespace)).status.phase == "Running" and p,
                timeout=60,
                interval=0.2,
            )
    finally:
        ctl.stop()
    assert running.spec.node_name == node
    assert int(core.read_node(node).status.allocatable.get("nvidia.com/mig-1g.10gb", "0")) >= 1


def test_only_pods_asking_for_vram_reach_the_webhook(
    env: Env, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """matchConditions: the API server evaluates them itself, so a pod without a VRAM request is never sent (counted
    at the webhook's HTTPS server); VRAM in limits, in requests only, or in an init container is sent and rewritten."""
    _h100_node(core, node_names, namespace, {"1g.10gb": 7})
    env.webhook.view.refresh()
    _wait_until_mutating(env, core, namespace)
    assert env.webhook.server is not None

    def admissions() -> int:
        assert env.webhook.server is not None
        return env.webhook.server.stats["admissions"]

    def container(res: dict[str, Any]) -> dict[str, Any]:
        return {"name": "c", "image": "busybox", "resources": res}

    plain = {
        "cpu only": {"containers": [container({"limits": {"cpu": "1"}})]},
        "no resources": {"containers": [{"name": "c", "image": "busybox"}]},
        "another extended resource": {"containers": [container({"limits": {"example.com/vram": "1"}})]},
        "vram as an annotation only": {"containers": [container({})]},
    }
    before = admissions()
    for i, spec in enumerate(plain.values()):
        meta: dict[str, Any] = {"name": f"plain-{i}", "annotations": {VRAM: "7Gi"}}
        core.create_namespaced_pod(namespace, {"metadata": meta, "spec": spec})
    assert admissions() == before, "a pod without a VRAM request was sent to the webhook"

    asking = {
        "limits": {"containers": [container({"limits": {VRAM: "7Gi"}})]},
        "requests only": {"containers": [container({"requests": {VRAM: "7Gi"}})]},
        "an init container": {
            "initContainers": [container({"limits": {VRAM: "7Gi"}})],
            "containers": [{"name": "main", "image": "busybox"}],
        },
        "the second container": {"containers": [{"name": "a", "image": "x"}, container({"limits": {VRAM: "7Gi"}})]},
    }
    for i, (what, spec) in enumerate(asking.items()):
        sent = admissions()
        pod = core.create_namespaced_pod(namespace, {"metadata": {"name": f"asks-{i}"}, "spec": spec})
        assert admissions() == sent + 1, what
        assert CHOICE_ANNOTATION in (pod.metadata.annotations or {}), what
