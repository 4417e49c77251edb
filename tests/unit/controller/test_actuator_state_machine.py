"""The actuator's state machine against the in-memory cluster of fake_cluster.py (merge patches, resourceVersion
checks) and a stand-in mig-manager that answers every label change at once: whatever phase annotations a node
carries (fuzzed), one `drive` ends with the node untainted and free of phase annotations, and never raises.

Not Kubernetes: the cluster tier (test_crash_points.py, test_actuator_faults.py) runs the same paths against a
real kube-apiserver; this tier is here to cover many more inputs, fast.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.config import Config
from migctl.controller.actuator import Actuator
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.nodestate import PHASE_ANNOTATIONS, LeftAlone, Target
from tests.unit.fake_cluster import FakeCluster, Obj
from tests.unit.reconcile.test_nodestate import GOOD, TARGET, annotations

TAINT = "migctl.io/reconfiguring"


class FakeKube(FakeCluster):
    """One node "n" of the shared in-memory cluster; mig-manager answers `answer(config)` to every label change."""

    def __init__(self, node: Obj, answer: Callable[[str], str]) -> None:
        super().__init__([{"kind": "Node", **node}])
        self.answer = answer

    @property
    def node(self) -> Obj:
        return self.nodes["n"]

    def mig_manager(self, name: str, config: str) -> None:
        self.nodes[name]["metadata"]["labels"]["nvidia.com/mig.config.state"] = self.answer(config)


def actuator(kube: FakeKube) -> Actuator:
    cfg = Config.model_validate({"controller": {"poll_interval_s": 0.001, "eviction_timeout_s": 5,
                                                "mig_manager_timeout_s": 5, "verify_timeout_s": 5}})  # fmt: skip
    clock = itertools.count(1_800_000_000.0, 1.0)  # one second per reading: every timeout passes quickly
    writer = ConfigMapWriter(kube, "ns", "cm", cfg.gpu_operator, set)
    return Actuator(kube=kube, config=cfg, configmaps=writer, events=EventSink(kube, "test"), metrics=Metrics(),
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
    """... unless another migctl version wrote them: then the node is left exactly as it was (versioned state)."""
    kube = FakeKube(node_with(ann), lambda c: answer)
    before = copy.deepcopy(kube.node)
    try:
        outcome = actuator(kube).drive("n")
    except LeftAlone:
        assert kube.node == before and [e["reason"] for e in kube.events] == ["MigctlNeedsAttention"]
        return
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
