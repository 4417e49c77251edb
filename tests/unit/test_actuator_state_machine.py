"""The actuator's state machine against an in-memory API (merge patches, resourceVersion checks) and a stand-in
mig-manager that answers every label change at once: whatever phase annotations a node carries (fuzzed), one
`drive` ends with the node untainted and free of phase annotations, and never raises.

Not Kubernetes: the cluster tier (test_crash_points.py, test_actuator_faults.py) runs the same paths against a
real kube-apiserver; this tier is here to cover many more inputs, fast.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.adapters.kube.errors import ConflictError
from migctl.config import Config
from migctl.controller.actuator import Actuator
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.events import EventSink
from migctl.controller.guards import EvictionLedger
from migctl.controller.metrics import Metrics
from migctl.controller.nodestate import PHASE_ANNOTATIONS, Target

from .test_controller_nodestate import GOOD, TARGET, annotations

TAINT = "migctl.io/reconfiguring"
Obj = dict[str, Any]


def merge(base: Obj, patch: Obj) -> Obj:
    """RFC 7386 JSON merge patch (lists replace, null deletes)."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class FakeKube:
    """One node, its Events, a ConfigMap; mig-manager answers `answer(config)` when the config label changes."""

    def __init__(self, node: Obj, answer: Callable[[str], str]) -> None:
        self.node, self.answer, self.rv = node, answer, 1
        self.node["metadata"]["resourceVersion"] = "1"
        self.events: list[Obj] = []
        self.cm: Obj | None = None

    def read_node(self, name: str) -> Obj:
        return copy.deepcopy(self.node)

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != self.node["metadata"]["resourceVersion"]:
            raise ConflictError(what, 409, "conflict")
        before = (self.node["metadata"].get("labels") or {}).get("nvidia.com/mig.config")
        self.node = merge(self.node, patch)
        self.rv += 1
        self.node["metadata"]["resourceVersion"] = str(self.rv)
        label = (self.node["metadata"].get("labels") or {}).get("nvidia.com/mig.config")
        if label and label != before:
            self.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = self.answer(label)
        return self.read_node(name)

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        node = self.read_node(name)
        patch = mutate(node)
        if patch is None:
            return node
        meta = {**(patch.get("metadata") or {}), "resourceVersion": node["metadata"]["resourceVersion"]}
        return self.patch_node(name, {**patch, "metadata": meta})

    def list_nodes(self) -> list[Obj]:
        return [self.read_node("")]

    def list_pods_on_node(self, node: str) -> list[Obj]:
        return []

    def evict(self, namespace: str, name: str) -> str:
        return "gone"

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self.cm)

    def create_configmap(self, namespace: str, body: Obj) -> Obj:
        self.cm = copy.deepcopy(body)
        return body

    def replace_configmap(self, namespace: str, body: Obj) -> Obj:
        return self.create_configmap(namespace, body)

    def create_event(self, namespace: str, body: Obj) -> None:
        self.events.append(body)


def actuator(kube: FakeKube) -> Actuator:
    cfg = Config.model_validate({"controller": {"poll_interval_s": 0.001, "eviction_timeout_s": 5,
                                                "mig_manager_timeout_s": 5, "verify_timeout_s": 5}})  # fmt: skip
    clock = itertools.count(1_800_000_000.0, 1.0)  # one second per reading: every timeout passes quickly
    api: Any = kube
    writer = ConfigMapWriter(api, "ns", "cm", cfg.gpu_operator, set)
    return Actuator(kube=api, config=cfg, configmaps=writer, events=EventSink(api, "test"), metrics=Metrics(),
                    ledger=EvictionLedger(), stop=threading.Event(), clock=lambda: next(clock))  # fmt: skip


def node_with(ann: dict[str, str]) -> Obj:
    return {
        "metadata": {"name": "n", "labels": {"nvidia.com/mig.config": "all-1g.10gb",
                                             "nvidia.com/mig.config.state": "success"},
                     "annotations": dict(ann)},
        "spec": {"taints": [{"key": TAINT, "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7"}},
    }  # fmt: skip


def released(kube: FakeKube) -> bool:
    meta = kube.node["metadata"]
    return not kube.node["spec"].get("taints") and not any(
        k in (meta.get("annotations") or {}) for k in PHASE_ANNOTATIONS
    )


@settings(max_examples=150, deadline=None)
@given(annotations(), st.sampled_from(["success", "failed", "pending"]))
def test_any_phase_annotations_end_untainted(ann: dict[str, str], answer: str) -> None:
    kube = FakeKube(node_with(ann), lambda c: answer)
    outcome = actuator(kube).drive("n")
    assert outcome in ("rolled-back", "succeeded", "untainted", "idle")
    assert released(kube), kube.node
    if outcome == "rolled-back":
        reasons = [e["reason"] for e in kube.events if e["reason"] in ("MigctlRolledBack", "MigctlNeedsAttention")]
        assert len(reasons) == 1


def test_unreadable_target_releases_without_relabel_and_says_needs_attention() -> None:
    kube = FakeKube(node_with({**GOOD, "migctl.io/target": "[1]"}), lambda c: "success")
    kube.node["metadata"]["labels"]["nvidia.com/mig.config"] = TARGET.config
    kube.node["metadata"]["annotations"]["migctl.io/layout"] = "{}"
    a = actuator(kube)
    assert a.drive("n") == "rolled-back"
    assert released(kube)
    meta = kube.node["metadata"]
    assert meta["labels"]["nvidia.com/mig.config"] == TARGET.config  # not relabelled on a guess
    assert "migctl.io/layout" not in meta["annotations"] and meta["annotations"]["migctl.io/failures"] == "1"
    assert [e["reason"] for e in kube.events][-1] == "MigctlNeedsAttention"
    assert a.metrics.failed.labels("unreadable")._value.get() == 1


def test_garbage_phase_since_with_a_good_target_rolls_back_to_the_previous_config() -> None:
    kube = FakeKube(node_with({**GOOD, "migctl.io/phase-since": "yesterday"}), lambda c: "success")
    kube.node["metadata"]["labels"]["nvidia.com/mig.config"] = TARGET.config
    assert actuator(kube).drive("n") == "rolled-back"
    assert kube.node["metadata"]["labels"]["nvidia.com/mig.config"] == TARGET.previous_config
    assert "yesterday" in kube.node["metadata"]["annotations"]["migctl.io/last-error"]
    assert [e["reason"] for e in kube.events][-1] == "MigctlRolledBack"


def test_double_failure_says_needs_attention_once_with_backoff() -> None:
    kube = FakeKube(node_with(GOOD), lambda c: "failed")
    kube.node["metadata"]["labels"]["nvidia.com/mig.config"] = TARGET.config
    kube.node["metadata"]["labels"]["nvidia.com/mig.config.state"] = "failed"
    a = actuator(kube)
    assert a.drive("n") == "rolled-back"
    ann = kube.node["metadata"]["annotations"]
    assert "failed too" in ann["migctl.io/last-error"] and ann["migctl.io/failures"] == "1"
    assert float(ann["migctl.io/backoff-until"]) > 1_800_000_000.0 + 500
    assert [e["reason"] for e in kube.events].count("MigctlNeedsAttention") == 1
    assert a.drive("n") == "idle"  # nothing left to do: no second Event, no retry
    assert [e["reason"] for e in kube.events].count("MigctlNeedsAttention") == 1


def test_release_of_a_draining_node_does_not_touch_the_label_or_back_off() -> None:
    kube = FakeKube(node_with({**GOOD, "migctl.io/phase": "draining"}), lambda c: "success")
    a = actuator(kube)
    assert a.release("n", "released: test") == "rolled-back"
    meta = kube.node["metadata"]
    assert released(kube) and meta["labels"]["nvidia.com/mig.config"] == "all-1g.10gb"
    assert "migctl.io/failures" not in meta["annotations"]


def test_foreign_label_is_not_fought() -> None:
    kube = FakeKube(node_with(GOOD), lambda c: "pending")
    kube.node["metadata"]["labels"]["nvidia.com/mig.config"] = "someone-elses"
    assert actuator(kube).drive("n") == "rolled-back"
    assert kube.node["metadata"]["labels"]["nvidia.com/mig.config"] == "someone-elses"
    assert "someone else" in kube.node["metadata"]["annotations"]["migctl.io/last-error"]


def test_a_good_applying_node_finishes() -> None:
    gpus = TARGET.gpus
    kube = FakeKube(node_with(GOOD), lambda c: "success")
    kube.node["metadata"]["labels"].update({"nvidia.com/mig.config": TARGET.config,
                                            "nvidia.com/mig-3g.40gb.count": "2"})  # fmt: skip
    kube.node["status"]["allocatable"] = {"nvidia.com/mig-3g.40gb": "2"}
    assert Target.from_json(GOOD["migctl.io/target"]).gpus == gpus
    assert actuator(kube).drive("n") == "succeeded"
    assert released(kube) and "migctl.io/layout" in kube.node["metadata"]["annotations"]
