"""The actuator's forward path and its ways out, step by step, against the in-memory cluster of fake_cluster.py
(the Kubernetes seam's fake; mig-manager, device plugin and GFD SIMULATED at their labels and node status) and
a fake clock. No API server: the cluster tier runs the same paths against a real one (test_actuator_faults.py,
test_crash_points.py)."""

from __future__ import annotations

import threading

import pytest

from migctl.config import Config
from migctl.controller.actuator import STEPS, Actuator
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.core.migparted.config import parse
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.nodestate import PHASE_ANNOTATIONS, Target
from tests.unit.fake_cluster import MIG_CONFIG, MIG_STATE, FakeClock, FakeCluster, Obj
from tests.unit.kube_builders import gpu_node, mig_parted, pod

TAINT = "migctl.io/reconfiguring"
BEFORE = {0: {"1g.5gb": 7}}
AFTER = {0: GpuConfig.mig({"3g.20gb": 2})}
NS, CM = "migctl", "migctl-mig-config"


def setup(*, evict: bool = True, **controller: float) -> tuple[FakeCluster, Actuator, Target, list[str]]:
    node = gpu_node("n1", layouts=BEFORE)
    objects = [node, mig_parted(BEFORE), pod("old", {"nvidia.com/mig-1g.5gb": 1}, node="n1")]
    cluster = FakeCluster(objects)
    clock = FakeClock(tick=1.0)  # one second per reading: every timeout passes within a few hundred polls
    settings = {"poll_interval_s": 0.0001, "eviction_timeout_s": 30, "mig_manager_timeout_s": 60,
                "verify_timeout_s": 30, "configmap_namespace": NS, "configmap_name": CM, **controller}  # fmt: skip
    cfg = Config.model_validate({"controller": settings})
    steps: list[str] = []
    writer = ConfigMapWriter(cluster, NS, CM, cfg.gpu_operator, set, hook=lambda n, s: steps.append(s))
    actuator = Actuator(kube=cluster, config=cfg, configmaps=writer, events=EventSink(cluster, "test"),
                        metrics=Metrics(), ledger=EvictionLedger(), stop=threading.Event(),
                        hook=lambda n, s: steps.append(s), clock=clock)  # fmt: skip
    target = Target(
        plan_id="p1",
        config=config_name(AFTER),
        gpus=AFTER,
        evict=("ns/old",) if evict else (),
        keep=() if evict else ("ns/old",),
        pods=("ns/new",),
        previous_config=node["metadata"]["labels"][MIG_CONFIG],
        started=clock.now,
    )
    return cluster, actuator, target, steps


def unchanged(node: Obj) -> bool:
    return True


def released(node: Obj) -> bool:
    ann = node["metadata"].get("annotations") or {}
    return not any(t["key"] == TAINT for t in node["spec"].get("taints") or []) and not any(
        k in ann for k in PHASE_ANNOTATIONS
    )


def test_forward_path_taints_evicts_writes_relabels_waits_verifies_untaints_in_that_order() -> None:
    cluster, actuator, target, steps = setup()
    assert actuator.start("n1", target, unchanged) == "succeeded"
    assert steps == ["tainted", "evicted", "drained", "configmap-merged", "configmap-written", "labelled",
                     "success-seen", "mig-manager-succeeded", "verified"]  # fmt: skip
    assert [s for s in STEPS if s in steps] == steps  # the documented order
    assert cluster.calls == [
        "patch_node n1 (taint)",
        "evict ns/old",
        f"create_configmap {NS}/{CM}",
        "patch_node n1 (phase applying)",
        "patch_node n1 (phase verifying)",
        "patch_node n1 (untaint)",
    ]
    node = cluster.nodes["n1"]
    assert released(node)
    assert node["metadata"]["labels"][MIG_CONFIG] == target.config
    assert node["status"]["allocatable"]["nvidia.com/mig-3g.20gb"] == "2"
    assert '"config": "' + target.config in node["metadata"]["annotations"]["migctl.io/layout"]
    written = parse(cluster.configmaps[f"{NS}/{CM}"]["data"]["config.yaml"], "written")
    assert target.config in written.mig_configs
    assert "ns/old" not in cluster.pods
    assert cluster.reasons()[-1] == "MigctlReconfigured"
    assert actuator.metrics.succeeded._value.get() == 1


def test_a_pod_the_plan_keeps_is_not_evicted() -> None:
    cluster, actuator, target, _ = setup(evict=False)
    assert actuator.start("n1", target, unchanged) == "succeeded"
    assert "ns/old" in cluster.pods and not any(c.startswith("evict") for c in cluster.calls)


def test_mig_manager_failure_rolls_back_to_the_previous_config_and_backs_off() -> None:
    cluster, actuator, target, steps = setup()
    cluster.fail_configs.add(target.config)
    assert actuator.start("n1", target, unchanged) == "rolled-back"
    node = cluster.nodes["n1"]
    assert released(node)
    assert node["metadata"]["labels"][MIG_CONFIG] == target.previous_config
    assert node["metadata"]["labels"][MIG_STATE] == "success"  # mig-manager applied the old config again
    ann = node["metadata"]["annotations"]
    assert ann["migctl.io/failures"] == "1" and "mig-manager reported" in ann["migctl.io/last-error"]
    assert float(ann["migctl.io/backoff-until"]) > actuator.clock()
    assert "rolling-back" in steps and "rollback-relabelled" in steps and "verified" not in steps
    assert "MigctlRolledBack" in cluster.reasons()


def test_mig_manager_that_never_answers_times_out_and_rolls_back() -> None:
    cluster, actuator, target, _ = setup(mig_manager_timeout_s=20)
    cluster.hang_configs.add(target.config)
    t0 = actuator.clock()
    assert actuator.start("n1", target, unchanged) == "rolled-back"
    assert actuator.clock() - t0 >= 20  # it waited the whole timeout (fake seconds), not less
    node = cluster.nodes["n1"]
    assert released(node) and node["metadata"]["labels"][MIG_CONFIG] == target.previous_config
    assert "no success from mig-manager within 20 s" in node["metadata"]["annotations"]["migctl.io/last-error"]


def test_eviction_refused_by_a_disruption_budget_rolls_back_without_touching_the_label() -> None:
    cluster, actuator, target, steps = setup(eviction_timeout_s=10)
    cluster.blocked.add("ns/old")
    assert actuator.start("n1", target, unchanged) == "rolled-back"
    node = cluster.nodes["n1"]
    assert released(node) and node["metadata"]["labels"][MIG_CONFIG] == target.previous_config
    assert "ns/old" in cluster.pods and "drained" not in steps
    assert not any("configmap" in c for c in cluster.calls)  # the GPUs were never touched
    assert "PodDisruptionBudget" in node["metadata"]["annotations"]["migctl.io/last-error"]


def test_capacity_that_never_appears_fails_verification_and_rolls_back() -> None:
    cluster, actuator, target, steps = setup(verify_timeout_s=15)
    cluster.no_capacity_configs.add(target.config)
    assert actuator.start("n1", target, unchanged) == "rolled-back"
    node = cluster.nodes["n1"]
    assert released(node)
    assert "capacity never matched" in node["metadata"]["annotations"]["migctl.io/last-error"]
    assert "mig-manager-succeeded" in steps and "verified" not in steps


def test_a_node_changed_since_planning_is_not_started() -> None:
    from migctl.controller.actuator import NodeChanged

    cluster, actuator, target, steps = setup()
    with pytest.raises(NodeChanged):
        actuator.start("n1", target, lambda node: False)
    assert cluster.calls == [] and steps == [] and released(cluster.nodes["n1"])


def test_a_crash_after_the_taint_resumes_from_the_node_annotations() -> None:
    """A hook that stops the process after a step (as a crash would); a fresh drive finishes the change."""
    cluster, actuator, target, _ = setup()

    class Crash(Exception):  # noqa: N818 - a stand-in for the process dying
        pass

    def crash(node: str, step: str) -> None:
        if step == "drained":
            raise Crash

    actuator.hook = crash
    with pytest.raises(Crash):
        actuator.start("n1", target, unchanged)
    assert cluster.nodes["n1"]["metadata"]["annotations"]["migctl.io/phase"] == "draining"
    actuator.hook = None
    assert actuator.drive("n1") == "succeeded"
    assert released(cluster.nodes["n1"])
