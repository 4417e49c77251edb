"""One bad object costs only its own plan: the webhook, the controller's metrics, Events and readiness, and the
planning budget."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import yaml
from kubernetes import client

from migctl.adapters.objects import snapshot_from_objects
from migctl.cli.plan import example_path
from migctl.config import Config
from migctl.config.webhook import WebhookSettings
from migctl.controller.loop import Controller
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan
from migctl.core.vram.decide import offers_from_snapshot
from migctl.webhook.admission import review

CATALOG = load_catalog()
EXAMPLE: list[dict[str, Any]] = yaml.safe_load(example_path().read_text())["items"]
VRAM = "migctl.io/vram"


def _hostile(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's two: the annotation on a CPU-only pod, the limit on a pending pod; and a node status string."""
    cpu = {"kind": "Pod", "metadata": {"namespace": "web", "name": "cpu-only", "annotations": {VRAM: "1e999999999"}},
           "spec": {"nodeName": "cpu-node-1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
           "status": {"phase": "Running"}}  # fmt: skip
    big = {"kind": "Pod", "metadata": {"namespace": "web", "name": "big"},
           "spec": {"containers": [{"resources": {"limits": {VRAM: "1e5000"}}}]},
           "status": {"phase": "Pending"}}  # fmt: skip
    node = copy.deepcopy(next(o for o in items if o["kind"] == "Node" and o["metadata"]["name"] == "a100-node-2"))
    node["metadata"]["name"], node["status"] = "broken-node", "Ready"
    return [*copy.deepcopy(items), cpu, big, node]


def _review(pod: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": "web",
                        "operation": "CREATE", "object": pod}}  # fmt: skip


def test_the_webhook_answers_hostile_pods_with_a_clear_403_and_keeps_serving_others() -> None:
    snapshot = snapshot_from_objects(_hostile(EXAMPLE), CATALOG)  # the webhook's view of a hostile cluster
    offers = offers_from_snapshot(snapshot, PlannerSettings())
    rules = WebhookSettings().rules(PlannerSettings())
    for value in ("1e5000", "1e999999999", "²Gi", "Infinity"):
        pod = {"metadata": {"name": "h", "namespace": "web"},
               "spec": {"containers": [{"name": "m", "resources": {"limits": {VRAM: value}}}]}}  # fmt: skip
        resp = review(_review(pod), offers, rules).response["response"]
        assert resp["allowed"] is False and resp["status"]["code"] == 403
        assert f"containers[0] 'm': {VRAM}: '{value}'" in resp["status"]["message"]
    ok = {"metadata": {"name": "ok", "namespace": "web", "annotations": {VRAM: "1e999999999"}},
          "spec": {"containers": [{"name": "m", "resources": {"limits": {VRAM: "7Gi"}}}]}}  # fmt: skip
    resp = review(_review(ok), offers, rules).response["response"]
    assert resp["allowed"] is True and resp["patchType"] == "JSONPatch"
    assert "nvidia.com/mig-1g" in base64.b64decode(resp["patch"]).decode()


def test_hostile_objects_leave_the_rest_of_the_plan_unchanged() -> None:
    clean = plan(snapshot_from_objects(EXAMPLE, CATALOG))
    snapshot = snapshot_from_objects(_hostile(EXAMPLE), CATALOG)
    hostile = plan(snapshot)
    assert hostile.assignments == clean.assignments
    assert [k for k, _ in snapshot.rejected] == ["web/big"]
    assert ("Node", "broken-node", "status: expected an object, got str 'Ready'; node skipped") in snapshot.problems


class _Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str, str, str]] = []

    def emit(self, ref: dict[str, Any], reason: str, message: str, warning: bool = False) -> None:
        self.sent.append((ref["kind"], ref["name"], reason, message))


def _controller(**settings: Any) -> Controller:
    ctl = Controller(Config.model_validate({"controller": {"metrics_port": None, **settings}}), client.ApiClient())
    ctl.cache.synced = lambda: True  # type: ignore[method-assign]
    return ctl


def _metric(ctl: Controller, name: str, labels: dict[str, str] | None = None) -> float | None:
    return ctl.metrics.registry.get_sample_value(name, labels or {})


def test_rejected_objects_are_counted_and_each_gets_one_event() -> None:
    ctl = _controller()
    events = _Events()
    ctl.events = ctl.reporter.events = events  # type: ignore[assignment]
    snapshot = snapshot_from_objects(_hostile(EXAMPLE), CATALOG)
    ctl.reporter.invalid(snapshot)
    assert _metric(ctl, "migctl_rejected_objects", {"kind": "Pod"}) == 1
    assert _metric(ctl, "migctl_rejected_objects", {"kind": "Node"}) == 1
    why = "status: expected an object, got str 'Ready'; node skipped"
    assert ("Node", "broken-node", "MigctlInvalid", why) in events.sent
    assert any(k == "Pod" and n == "big" and "'1e5000' is out of range" in m for k, n, _, m in events.sent)
    before = len(events.sent)
    ctl.reporter.invalid(snapshot)  # the same problems again: no new Events
    assert len(events.sent) == before
    ctl.reporter.invalid(snapshot_from_objects(EXAMPLE, CATALOG))
    assert _metric(ctl, "migctl_rejected_objects", {"kind": "Pod"}) == 0


def test_readiness_reports_a_controller_that_cannot_plan_n_times_in_a_row() -> None:
    ctl = _controller(unready_after_failed_reconciles=2)
    calls = {"n": 0}

    def boom() -> None:
        calls["n"] += 1
        raise RuntimeError("snapshot failed")

    ctl.reconcile = boom  # type: ignore[method-assign]
    ctl._tick()
    assert ctl._ready() and _metric(ctl, "migctl_reconciles_failed_in_a_row") == 1
    ctl._tick()
    assert not ctl._ready()
    assert _metric(ctl, "migctl_reconcile_errors_total") == 2
    ctl.reconcile = lambda: None  # type: ignore[method-assign]
    ctl._tick()
    assert ctl._ready() and _metric(ctl, "migctl_reconciles_failed_in_a_row") == 0


def test_the_budget_counts_work_not_time_and_says_when_it_cut_planning_short() -> None:
    snapshot = snapshot_from_objects(EXAMPLE, CATALOG)
    full = plan(snapshot)
    assert not full.budget_exhausted and full.work_units > 0
    per_pass = len(snapshot.pending) + sum(len(n.gpus) for n in snapshot.nodes)
    assert full.work_units % per_pass == 0
    short = PlannerSettings(work_budget=per_pass)  # the first pass only
    cut = plan(snapshot, short)
    assert cut.budget_exhausted and cut.work_units == per_pass < full.work_units
    assert "planning stopped at planner.work_budget" in cut.warnings[-1]
    assert cut == plan(snapshot, short)  # the same input gives the same plan
    assert plan(snapshot, PlannerSettings(work_budget=full.work_units)).to_dict() == full.to_dict()
    assert json.loads(json.dumps(cut.to_dict()))["budget"] == {"work_units": per_pass, "exhausted": True}


def test_an_inventory_annotation_with_too_many_gpus_is_ignored_with_a_warning() -> None:
    from migctl.core.model.inventory import INVENTORY_ANNOTATION

    gpu = {"index": 0, "uuid": "GPU-0", "name": "NVIDIA H100 80GB HBM3", "memory_mib": 81559, "mig_capable": True,
           "mig_enabled": False, "mig_pending": False, "busy": False}  # fmt: skip
    inventory = {"version": "v1", "gpus": [{**gpu, "index": i, "uuid": f"GPU-{i}"} for i in range(100_000)]}
    items = copy.deepcopy(EXAMPLE)
    node = next(o for o in items if o["kind"] == "Node" and o["metadata"]["name"] == "h100-node-2")
    node["metadata"]["annotations"] = {INVENTORY_ANNOTATION: json.dumps(inventory)}
    snapshot = snapshot_from_objects(items, CATALOG)
    (warning,) = [w for w in snapshot.warnings if w.startswith("node h100-node-2")]
    assert f"metadata.annotations[{INVENTORY_ANNOTATION}].gpus" in warning and "at most 64" in warning, warning
    assert len(next(n for n in snapshot.nodes if n.name == "h100-node-2").gpus) == 4  # GFD's count stands
