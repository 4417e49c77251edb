"""The static-MIG DRA executor (controller/dra.py) against the in-memory cluster of fake_cluster.py and a fake clock.

SIMULATED at their real interfaces only: the node agent (inplace_agent.SimAgent: the node's `in-place-target` in,
`in-place-status` out) and NVIDIA's kubelet plugin (`Plugin` below: the node's ResourceSlices in NVIDIA's static
shape, tests/nvidia_slices.py). Like the real plugin, the fake publishes the MIG devices the hardware holds only
when it restarts, deletes its slices while it restarts, and keeps the pool generation at 1 across the reshape (so
an executor waiting for a higher generation would hang here). The cluster tier runs the same executor against a
real API server and scheduler (tests/cluster/test_dra_static.py).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from dataclasses import dataclass, field

import pytest

from migctl.config import Config
from migctl.controller.actuator import STEPS, Actuator
from migctl.controller.configmap import ConfigMapWriter
from migctl.controller.dra import DRA_STEPS, landed
from migctl.controller.events import EventSink
from migctl.controller.executors import BEGIN, EXECUTORS, owner
from migctl.controller.metrics import Metrics
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import Placement
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.nodestate import DRA_APPLYING, DRA_PHASES, PHASES, Target
from migctl.reconcile.paths import DRA_STATIC, PATHS, path_of
from migctl.wire import inplace as wire
from migctl.wire.names import (
    FAILURES,
    IN_PLACE_TARGET,
    LAST_ERROR,
    LAYOUT,
    NVIDIA_DRA_DRIVER,
    PHASE,
    PHASE_SINCE,
    PLAN_ID,
    RESHAPE_TAINT,
)
from tests.nvidia_slices import node_slices
from tests.unit.controller.inplace_agent import SimAgent
from tests.unit.fake_cluster import FakeClock, FakeCluster, Obj

CATALOG = load_catalog()
MODEL = CATALOG.model("h100-80gb")
ALL_1G = [Placement("1g.10gb", i, 1) for i in range(7)]
NODE = "n1"
GPU0 = {"3g.40gb": 1, "1g.10gb": 3}  # GPU 0 re-cut; GPU 1 stays 7x 1g.10gb
TARGET_GPUS = {0: GpuConfig.mig(GPU0), 1: GpuConfig.mig({"1g.10gb": 7})}


class Crash(Exception):  # noqa: N818 - a signal
    """The controller process dies at a step: nothing after it is written."""


def place(counts: dict[str, int]) -> list[Placement]:
    """Where the (simulated) agent puts a target's instances: largest first, each at its first free placement."""
    used: set[int] = set()
    out = []
    for name, n in sorted(counts.items(), key=lambda kv: -MODEL.profile(kv[0]).memory_mib):
        for _ in range(n):
            start, size = next((s, z) for s, z in MODEL.profile(name).placements if not used & set(range(s, s + z)))
            used |= set(range(start, start + size))
            out.append(Placement(name, start, size))
    return out


@dataclass
class Plugin:
    """NVIDIA's static-MIG kubelet plugin at its API objects: publishes `hardware` when (re)started; while
    restarting, the node has no slices for `down_reads` reads of them; `dead`: never comes back."""

    cluster: FakeCluster
    hardware: list[list[Placement]] = field(default_factory=lambda: [list(ALL_1G), list(ALL_1G)])
    down_reads: int = 3
    dead: bool = False
    restarts: int = 0
    _down: int = 0

    def publish(self) -> None:
        self.cluster.resource_slices.clear()
        for s in node_slices(NODE, MODEL, len(self.hardware), mode="static", static_layouts=self.hardware):
            self.cluster.add_dra(s)  # generation 1, every time: the real slice controller does not raise it

    def restart(self) -> None:
        self.restarts += 1
        self.cluster.resource_slices.clear()
        self._down = -1 if self.dead else self.down_reads

    def reads(self) -> None:
        """One read of the node's slices by the controller: a restarting plugin comes back after a few."""
        if self._down > 0:
            self._down -= 1
            if self._down == 0:
                self.publish()


class World:
    """One DRA node (2x H100, static MIG, 7x 1g.10gb each), its plugin and agent, and a controller's actuator."""

    def __init__(self, answer: str | None = "applied", **settings: float) -> None:
        node = {"kind": "Node", "metadata": {"name": NODE, "labels": {}, "annotations": {}},
                "spec": {}, "status": {"allocatable": {"cpu": "8"}}}  # fmt: skip
        self.cluster = FakeCluster([node])
        self.plugin = Plugin(self.cluster)
        self.plugin.publish()
        self.agent = SimAgent(self.cluster, answer=answer, advertise=False)
        self.clock = FakeClock(tick=0.5)
        self.settings = {"poll_interval_s": 0.0001, "dra_fence_settle_s": 2, "dra_drain_timeout_s": 10,
                         "dra_agent_timeout_s": 20, "dra_advertise_timeout_s": 20, **settings}  # fmt: skip
        self.crash_at: str | None = None
        self.seen_steps: list[str] = []
        self.fences_at: dict[str, list[Obj]] = {}
        self.tainted_at: list[str] = []
        original = self.cluster.list_node_resource_slices

        def list_slices(node: str, driver: str) -> list[Obj]:
            self.plugin.reads()
            return original(node, driver)

        self.cluster.list_node_resource_slices = list_slices  # type: ignore[method-assign]

    def hook(self, node: str, step: str) -> None:
        self.seen_steps.append(step)
        self.fences_at[step] = list(self.cluster.taint_rules.values())
        if self.cluster.nodes[node].get("spec", {}).get("taints"):
            self.tainted_at.append(step)
        if step == "dra-target-written" and self.agent.answer is not None:
            self.agent.act(node)
            if self.agent.answer == "applied":  # the real agent re-cuts, then deletes its node's plugin pod
                target = self.agent.seen[-1]
                for i, counts in target.gpus.items():
                    self.plugin.hardware[i] = place(dict(counts))
                self.plugin.restart()
        if step == self.crash_at:
            raise Crash(step)

    def actuator(self) -> Actuator:
        cfg = Config.model_validate({"controller": self.settings})
        writer = ConfigMapWriter(self.cluster, "ns", "cm", cfg.gpu_operator, set)
        return Actuator(kube=self.cluster, config=cfg, configmaps=writer, events=EventSink(self.cluster, "test"),
                        metrics=Metrics(), ledger=EvictionLedger(), stop=threading.Event(), hook=self.hook,
                        clock=self.clock)  # fmt: skip

    def target(self, keep: tuple[str, ...] = ()) -> Target:
        return Target("p0000000001", config_name(TARGET_GPUS), TARGET_GPUS, keep=keep, pods=("ns/want",),
                      started=self.clock.now)  # fmt: skip

    def begin(self, a: Actuator, target: Target | None = None) -> str:
        return BEGIN[DRA_STATIC.name](a, NODE, target or self.target(), lambda node: True)

    @property
    def annotations(self) -> dict[str, str]:
        return dict(self.cluster.nodes[NODE]["metadata"].get("annotations") or {})

    def claim(self, name: str, device: str, pod: str | None) -> None:
        status: Obj = {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": NVIDIA_DRA_DRIVER, "pool": NODE, "device": device}]}}}  # fmt: skip
        if pod is not None:
            status["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u-" + pod}]
        self.cluster.add_dra({"kind": "ResourceClaim", "metadata": {"name": name, "namespace": "ns"}, "status": status})


def sample(a: Actuator, name: str, labels: dict[str, str] | None = None) -> float:
    return a.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def slice_counts(w: World, minor: int) -> Counter[str]:
    devices = [d for s in w.cluster.resource_slices.values() for d in s["spec"].get("devices") or []]
    return Counter(d["attributes"]["profile"]["string"] for d in devices if d["name"].startswith(f"gpu-{minor}-"))


def ended_clean(w: World) -> None:
    """No fence left, never a node taint, no phase annotation."""
    assert not w.cluster.taint_rules
    assert not w.tainted_at and not w.cluster.nodes[NODE].get("spec", {}).get("taints")
    assert PHASE not in w.annotations and PLAN_ID not in w.annotations


# -- the table ------------------------------------------------------------------------------------------------


def test_every_phase_has_one_executor_and_every_actuating_path_has_one() -> None:
    owned = [p for e in EXECUTORS.values() for p in e.phases]
    assert sorted(owned) == sorted(PHASES) and len(owned) == len(set(owned))
    assert set(EXECUTORS) == {p.name for p in PATHS.values() if p.actuates} == set(BEGIN)
    assert all(EXECUTORS[name].path is PATHS[name] for name in EXECUTORS)
    assert {owner(p).path for p in DRA_PHASES} == {DRA_STATIC}
    assert set(DRA_STEPS) <= set(STEPS)  # MIGCTL_FAILPOINT can stop at each


def test_a_static_dra_node_takes_the_dra_path_whatever_its_labels() -> None:
    from migctl.config.selector import LabelSelector

    assert path_of({}, LabelSelector.parse(""), "static") is DRA_STATIC


# -- success, and what is fenced ----------------------------------------------------------------------------


def test_a_change_fences_only_the_changed_gpu_waits_for_the_slices_and_lifts_the_fences() -> None:
    w = World()
    a = w.actuator()
    w.claim("other-gpu", "gpu-1-mig-1g10gb-19-2", "late")  # lands on the unchanged GPU meanwhile: no matter
    assert w.begin(a) == "succeeded"
    assert w.seen_steps == list(DRA_STEPS)
    fenced = w.fences_at["dra-drained"]
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in fenced) == sorted(
        f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)
    )  # one rule per device of GPU 0, none on GPU 1
    taints = {(r["spec"]["taint"]["key"], r["spec"]["taint"]["effect"]) for r in fenced}
    assert taints == {(RESHAPE_TAINT, "NoSchedule")}  # never NoExecute: nothing running is evicted
    assert {r["spec"]["deviceSelector"]["pool"] for r in fenced} == {NODE}
    assert len(w.fences_at["dra-advertised"]) == 7  # held until the slices list the new devices
    ended_clean(w)
    assert w.plugin.restarts == 1 and slice_counts(w, 0) == Counter(GPU0) and slice_counts(w, 1) == {"1g.10gb": 7}
    assert all(s["spec"]["pool"]["generation"] == 1 for s in w.cluster.resource_slices.values())
    layout = json.loads(w.annotations[LAYOUT])["gpus"]
    assert layout["0"]["layout"] == GPU0 and layout["1"]["layout"] == {"1g.10gb": 7}
    assert wire.decode_target(w.annotations[IN_PLACE_TARGET]).gpus[0] == GPU0  # the agent's record stays
    assert a.outcomes == [(NODE, "succeeded", "")]
    assert sample(a, "migctl_dra_window_seconds_count") == 1 and sample(a, "migctl_dra_window_seconds_sum") > 0
    assert sample(a, "migctl_dra_changes_total", {"result": "applied"}) == 1
    assert "MigctlReconfigured" in w.cluster.reasons()
    node_writes = [c for c in w.cluster.calls if c.startswith("patch_node")]
    assert node_writes[-1].endswith("(end (dra))") and sum("end (dra)" in c for c in node_writes) == 1


def test_the_settle_time_is_waited_even_with_nothing_landed() -> None:
    w = World(dra_fence_settle_s=6)
    a = w.actuator()
    fenced_at: list[float] = []
    original = w.hook

    def hook(node: str, step: str) -> None:
        if step in ("dra-fenced", "dra-drained"):
            fenced_at.append(w.clock.now)
        original(node, step)

    a.hook = hook
    assert w.begin(a) == "succeeded"
    assert fenced_at[1] - fenced_at[0] >= 6


def test_a_gpu_already_as_targeted_is_not_fenced_and_nothing_is_fenced_when_none_changes() -> None:
    w = World()
    gpus = {0: GpuConfig.mig({"1g.10gb": 7}), 1: GpuConfig.mig({"1g.10gb": 7})}
    target = Target("p0000000002", config_name(gpus), gpus, started=w.clock.now)
    assert w.begin(w.actuator(), target) == "succeeded"
    assert w.fences_at["dra-drained"] == [] and not w.cluster.taint_rules


# -- the agent's answers ------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer", ["blocked", "failed"])
def test_agent_blocked_or_failed_lifts_the_fences_backs_off_and_removes_the_target(answer: str) -> None:
    w = World(answer=answer)
    w.agent.message = "GPU 0 1g.10gb@2 in use by ns/x"
    a = w.actuator()
    assert w.begin(a) == "rolled-back"
    assert len(w.fences_at["dra-target-written"]) == 7
    ended_clean(w)
    ann = w.annotations
    assert IN_PLACE_TARGET not in ann and ann[FAILURES] == "1"
    assert answer in ann[LAST_ERROR] and "in use by ns/x" in ann[LAST_ERROR]
    assert w.plugin.restarts == 0 and slice_counts(w, 0) == {"1g.10gb": 7}
    assert sample(a, "migctl_dra_changes_total", {"result": answer}) == 1
    assert sample(a, "migctl_dra_window_seconds_count") == 1
    assert "MigctlRolledBack" in w.cluster.reasons()


def test_a_silent_agent_times_out_with_the_fences_lifted_and_the_node_flagged() -> None:
    w = World(answer=None)
    a = w.actuator()
    assert w.begin(a) == "rolled-back"
    ended_clean(w)
    assert "no answer from the node agent" in w.annotations[LAST_ERROR]
    assert sample(a, "migctl_dra_changes_total", {"result": "timeout"}) == 1
    assert "MigctlNeedsAttention" in w.cluster.reasons()


# -- claims in the race window ------------------------------------------------------------------------------


def test_a_claim_that_landed_on_a_fenced_device_after_planning_stops_the_change_at_the_drain_timeout() -> None:
    w = World()
    a = w.actuator()
    original = w.hook

    def race(node: str, step: str) -> None:
        original(node, step)
        if step == "dra-fenced":  # allocated before the scheduler saw the fence (KEP-5055: taints are racy)
            w.claim("raced", "gpu-0-mig-1g10gb-19-3", "raced")
            w.claim("unused", "gpu-0-mig-1g10gb-19-5", None)  # allocated, no pod yet: about to be used

    a.hook = race
    start = w.clock.now
    assert w.begin(a) == "rolled-back"
    assert "dra-drained" not in w.seen_steps and not w.agent.seen  # the agent was never asked
    ended_clean(w)
    why = w.annotations[LAST_ERROR]
    assert "ns/raced on gpu-0-mig-1g10gb-19-3 (pod ns/raced)" in why and "ns/unused" in why and "not yet used" in why
    assert 10 <= w.clock.now - start < 20 and w.annotations[FAILURES] == "1"
    assert sample(a, "migctl_dra_changes_total", {"result": "drain-timeout"}) == 1


def test_a_claim_that_goes_within_the_drain_timeout_only_delays_the_change() -> None:
    w = World()
    a = w.actuator()
    w.claim("raced", "gpu-0-mig-1g10gb-19-3", "raced")
    looks = itertools.count()
    original = w.cluster.list_resource_claims

    def claims() -> list[Obj]:
        if next(looks) == 6:
            w.cluster.resource_claims.clear()  # its pod ended; kcm deleted the claim
        return original()

    w.cluster.list_resource_claims = claims  # type: ignore[method-assign]
    assert w.begin(a) == "succeeded"
    ended_clean(w)


def test_claims_of_pods_the_plan_kept_do_not_hold_the_change() -> None:
    claims = [
        {"metadata": {"name": "c", "namespace": "ns"}, "status": {
            "allocation": {"devices": {"results": [
                {"driver": NVIDIA_DRA_DRIVER, "pool": NODE, "device": "gpu-0-mig-1g10gb-19-6"}]}},
            "reservedFor": [{"resource": "pods", "name": "kept", "uid": "u"}]}},
        {"metadata": {"name": "admin", "namespace": "ns"}, "status": {"allocation": {"devices": {"results": [
            {"driver": NVIDIA_DRA_DRIVER, "pool": NODE, "device": "gpu-0-mig-1g10gb-19-1", "adminAccess": True}]}}}},
        {"metadata": {"name": "elsewhere", "namespace": "ns"}, "status": {"allocation": {"devices": {"results": [
            {"driver": NVIDIA_DRA_DRIVER, "pool": "n2", "device": "gpu-0-mig-1g10gb-19-1"}]}}}},
    ]  # fmt: skip
    fenced = {f"gpu-0-mig-1g10gb-19-{i}" for i in range(7)}
    assert landed(claims, NODE, fenced, keep=("ns/kept",)) == []
    assert landed(claims, NODE, fenced, keep=()) == ["ns/c on gpu-0-mig-1g10gb-19-6 (pod ns/kept)"]


# -- the plugin that does not come back -----------------------------------------------------------------------


def test_slices_never_republished_time_out_lift_the_fences_and_record_what_the_agent_reported() -> None:
    w = World()
    w.plugin.dead = True
    a = w.actuator()
    assert w.begin(a) == "rolled-back"
    ended_clean(w)
    why = w.annotations[LAST_ERROR]
    assert "did not list the new MIG devices" in why and "no ResourceSlice" in why
    assert json.loads(w.annotations[LAYOUT])["gpus"]["0"]["layout"] == GPU0  # the GPUs did change
    assert w.annotations[FAILURES] == "1"
    assert sample(a, "migctl_dra_changes_total", {"result": "timeout"}) == 1


def test_slices_that_come_back_with_the_old_devices_are_not_taken_for_the_new_ones() -> None:
    w = World()
    a = w.actuator()
    original = w.hook

    def stale(node: str, step: str) -> None:
        original(node, step)
        if step == "dra-target-written":
            w.plugin.hardware[0] = list(ALL_1G)  # a plugin that republishes what it had (same generation)

    a.hook = stale
    assert w.begin(a) == "rolled-back"
    assert "GPU 0: slices list {'1g.10gb': 7}" in w.annotations[LAST_ERROR]
    ended_clean(w)


# -- crashes and resumes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("step", DRA_STEPS)
def test_a_controller_killed_at_each_step_is_resumed_to_the_end_by_the_next(step: str) -> None:
    w = World()
    w.crash_at = step
    with pytest.raises(Crash):
        w.begin(w.actuator())
    assert w.annotations[PHASE] in DRA_PHASES  # left in flight
    w.crash_at = None
    w.seen_steps.clear()
    resumed = w.actuator()
    assert resumed.drive(NODE) == "succeeded"
    assert sample(resumed, "migctl_reconfigurations_started_total") == 0  # resumed, not started again
    assert len(w.agent.seen) == 1  # the target was written once and applied once
    ended_clean(w)
    assert slice_counts(w, 0) == Counter(GPU0)
    assert json.loads(w.annotations[LAYOUT])["gpus"]["0"]["layout"] == GPU0


def test_a_crash_halfway_through_fencing_is_resumed_with_every_fence() -> None:
    w = World()
    original = w.cluster.create_device_taint_rule
    made = itertools.count()

    def create(body: Obj) -> str:
        if next(made) == 3:
            raise Crash("killed while fencing")
        return original(body)

    w.cluster.create_device_taint_rule = create  # type: ignore[method-assign]
    with pytest.raises(Crash):
        w.begin(w.actuator())
    assert len(w.cluster.taint_rules) == 3
    w.cluster.create_device_taint_rule = original  # type: ignore[method-assign]
    assert w.actuator().drive(NODE) == "succeeded"
    assert len(w.fences_at["dra-drained"]) == 7
    ended_clean(w)


def test_a_resume_whose_agent_died_times_out_from_the_recorded_phase_start_with_the_fences_lifted() -> None:
    w = World(answer=None)
    w.crash_at = "dra-target-written"
    with pytest.raises(Crash):
        w.begin(w.actuator())
    assert w.annotations[PHASE] == DRA_APPLYING and len(w.cluster.taint_rules) == 7
    since = float(w.annotations[PHASE_SINCE])
    w.crash_at = None
    w.clock.now = since + 19.9  # 20 s agent timeout: a fresh wait would poll ~40 times
    assert w.actuator().drive(NODE) == "rolled-back"
    assert w.clock.now - since < 25
    ended_clean(w)
    assert "no answer from the node agent" in w.annotations[LAST_ERROR]


def test_release_lifts_the_fences_without_a_backoff() -> None:
    w = World(answer=None)
    w.crash_at = "dra-target-written"
    with pytest.raises(Crash):
        w.begin(w.actuator())
    assert w.actuator().release(NODE, "left migctl's node_selector") == "rolled-back"
    ended_clean(w)
    ann = w.annotations
    assert "node_selector" in ann[LAST_ERROR] and FAILURES not in ann and IN_PLACE_TARGET not in ann


def test_unreadable_phase_annotations_on_a_dra_node_end_with_the_fences_lifted_not_a_relabel() -> None:
    w = World()
    w.crash_at = "dra-fenced"
    with pytest.raises(Crash):
        w.begin(w.actuator())
    w.cluster.nodes[NODE]["metadata"]["annotations"][PHASE_SINCE] = "yesterday"
    assert w.actuator().drive(NODE) == "rolled-back"
    ended_clean(w)
    assert "unreadable phase annotations" in w.annotations[LAST_ERROR]
    assert not any("relabel" in c for c in w.cluster.calls)
    assert "nvidia.com/mig.config" not in w.cluster.nodes[NODE]["metadata"]["labels"]


def test_a_node_whose_slices_are_missing_at_the_start_is_not_fenced() -> None:
    w = World()
    w.cluster.resource_slices.clear()
    a = w.actuator()
    assert w.begin(a) == "rolled-back"
    assert "no ResourceSlice" in w.annotations[LAST_ERROR] and "nothing changed" in w.annotations[LAST_ERROR]
    assert not w.agent.seen
    ended_clean(w)


def test_a_crash_while_lifting_after_a_drain_timeout_resumes_fenced_again_never_half_fenced() -> None:
    w = World()
    original = w.hook

    def race(node: str, step: str) -> None:
        original(node, step)
        if step == "dra-fenced" and "raced" not in str(w.cluster.resource_claims):
            w.claim("raced", "gpu-0-mig-1g10gb-19-3", "raced")

    delete = w.cluster.delete_device_taint_rule
    deletes = itertools.count()

    def dying_delete(name: str, uid: str = "") -> bool:
        if next(deletes) == 2:
            raise Crash("killed while lifting")
        return delete(name, uid)

    w.cluster.delete_device_taint_rule = dying_delete  # type: ignore[method-assign]
    first = w.actuator()
    first.hook = race
    with pytest.raises(Crash):
        w.begin(first)
    assert len(w.cluster.taint_rules) == 5 and w.annotations[PHASE] == "dra-draining"  # some lifted, still draining
    w.cluster.delete_device_taint_rule = delete  # type: ignore[method-assign]
    assert w.actuator().drive(NODE) == "rolled-back"
    assert len(w.fences_at["dra-fenced"]) == 7  # fenced whole again before anything else was looked at
    assert not w.agent.seen and "ns/raced" in w.annotations[LAST_ERROR]
    ended_clean(w)
