"""The in-place path end to end with the REAL node agent: the controller's target answered by migctl's own in-place
loop, which changes the (fake) GPUs through NVML, reads what is in use from a (fake) kubelet over gRPC, publishes
its inventory and flips the device-plugin label through migctl's Kubernetes client against the real API server.

Real: kube-apiserver, kube-scheduler, kwok, the controller (`Controller`, the in-process loop of `migctl run`), the
agent's loop, apply engine, journal, usage reader, inventory publisher and NVML/PodResources/Kubernetes adapters
(tests/cluster/real_agent.py says how they are wired). SIMULATED, at their real interfaces (real_agent.py):
the GPUs (pynvml's interface, tests/unit/fake_nvml_mig.py, A100-40GB), the kubelet (a gRPC PodResources v1 server
on a unix socket; what it lists follows the pods bound to the node), and the NVIDIA device plugin (allocatable
changes only after the `nvidia.com/device-plugin.config` label flips). NVML never shows a process: an instance is in
use only because the kubelet handed it to a pod (allocated-but-not-started as NVML sees it).
"""

from __future__ import annotations

import bisect
import json
import time

import pytest
from kubernetes import client

from migctl.controller.loop import Controller
from migctl.core.model.gpu_config import GpuConfig
from migctl.wire import inplace as wire
from migctl.wire.names import (
    ACTUATION,
    DEPLOY_MIG_MANAGER,
    DEVICE_PLUGIN_CONFIG,
    GPUS,
    IN_PLACE_STATUS,
    IN_PLACE_TARGET,
)

from .gpunodes import create_gpu_node
from .real_agent import MODEL, RealAgentRig, real_agent
from .test_controller_e2e import GROUP, TAINT, mig_pod, node_view, running_on, seed_configmap, settled
from .test_in_place import TaintWatch, events_on, in_place_config, running
from .waiting import wait_for

pytestmark = pytest.mark.cluster

SMALL = {"1g.5gb": 7}


def a100_in_place_node(core: client.CoreV1Api, namespace: str, node_names: list[str], suffix: str,
                       gpus: list[GpuConfig]) -> str:  # fmt: skip
    """An A100-40GB kwok node opted into the in-place path (mig-manager off), its layout recorded as the GPUs are."""
    name = f"{namespace}-{suffix}"
    labels = {GROUP: namespace, ACTUATION: "in-place", DEPLOY_MIG_MANAGER: "false", DEVICE_PLUGIN_CONFIG: "migctl-a"}
    create_gpu_node(core, name, MODEL, gpus, labels=labels)
    layout = {"config": "seed", "gpus": {str(i): {"mig": True, "layout": dict(g.layout)} for i, g in enumerate(gpus)}}
    core.patch_node(name, {"metadata": {"annotations": {"migctl.io/layout": json.dumps(layout)}}})
    node_names.append(name)
    return name


def inventory_published(core: client.CoreV1Api, node: str) -> bool:
    return GPUS in node_view(core, node)[1]


def busy_published(core: client.CoreV1Api, node: str, uuid: str) -> bool:
    inv = json.loads(node_view(core, node)[1].get(GPUS, "{}"))
    return any(d.get("uuid") == uuid and d.get("busy") for g in inv.get("gpus", []) for d in g["instances"])


def pods(core: client.CoreV1Api, namespace: str, profile: str, *names: str) -> None:
    for name in names:
        core.create_namespaced_pod(namespace, mig_pod(name, namespace, profile))


def all_running(core: client.CoreV1Api, namespace: str, node: str, *names: str, timeout: float = 60) -> None:
    for name in names:
        assert wait_for(f"{name} running", lambda p=name: running_on(core, namespace, p), timeout=timeout) == node


def mutated_only_while_tainted(rig: RealAgentRig, watch: TaintWatch) -> list[float]:
    """Times of mutating NVML calls NOT enclosed by taint samples on both sides (the node was, or may have been,
    open to new pods while the GPU changed)."""
    times = [t for t, _ in watch.samples]
    bad = []
    for t in rig.fake.times:
        k = bisect.bisect(times, t)
        if k == 0 or k == len(times) or not (watch.samples[k - 1][1] and watch.samples[k][1]):
            bad.append(t)
    return bad


def test_pending_pods_run_after_the_real_agent_recuts_an_idle_gpu_inside_a_short_window(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(1) and (3): two pending 3g.20gb pods, an idle in-place A100 of 1g.5gb x7. The controller taints the node and
    writes the target; the real agent destroys the seven 1g.5gb and creates 3g.20gb x2 through (fake) NVML, flips
    the device-plugin label once and answers `applied`; the (simulated) device plugin lists the new instances; the
    controller untaints. The pods run, each on an instance the kubelet could hand it. Every NVML mutation happened
    while the node was tainted, the taint came off once and only after allocatable listed 3g.20gb x2, and was on no
    longer than the window the metric reports.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    node = a100_in_place_node(core, namespace, node_names, "ipa", [GpuConfig.mig(SMALL)])
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, [GpuConfig.mig(SMALL)]) as rig, TaintWatch(core, node) as watch:
        wait_for("inventory published", lambda: inventory_published(core, node))
        with running(ctl):
            pods(core, namespace, "3g.20gb", "big-1", "big-2")
            all_running(core, namespace, node, "big-1", "big-2")
            wait_for("node settled", lambda: settled(core, node))
            wait_for("Reconfigured Event", lambda: events_on(core, node, "MigctlReconfigured"))
            window = ctl.metrics.in_place_window._sum.get()
        time.sleep(0.3)  # a last kubelet sync of the bound pods
    assert sorted((p, s) for _, p, s, _, _ in rig.fake.instances()) == [("3g.20gb", 0), ("3g.20gb", 4)]
    assert rig.unadmitted == set() and rig.lost == set()
    assert sorted(u for held in rig.held.values() for _, u in held) == sorted(u for *_, u in rig.fake.instances())
    assert rig.flips == ["migctl-b"] and rig.caps == 1 and rig.journal_empty()
    ann = node_view(core, node)[1]
    status = wire.decode_status(ann[IN_PLACE_STATUS])
    assert status.state == "applied" and [(h.profile, h.start) for h in status.gpus[0]] == [("3g.20gb", 0),
                                                                                          ("3g.20gb", 4)]  # fmt: skip
    assert TAINT not in node_view(core, node)[2]
    assert rig.fake.times and mutated_only_while_tainted(rig, watch) == []
    offs = watch.untainted_with()
    assert len(offs) == 1 and offs[0].get("nvidia.com/mig-3g.20gb") == "2", offs
    seen = watch.tainted_seconds()
    print(f"in-place window with the real agent: metric {window:.2f} s, taint seen {seen:.2f} s (plugin lag 0.5 s)")
    assert 0 < seen <= window + 0.5 and window < 10, (seen, window)


def test_an_instance_allocated_to_a_pod_is_never_touched_while_the_free_part_is_recut(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(2): a two-GPU in-place A100 node of 1g.5gb x7 each. A running pod `small` holds the 1g.5gb at slice 1 of
    GPU 0 per PodResources; NVML shows no process on it (allocated-but-not-started). Two pending 3g.20gb pods need
    a re-cut: they run. The instance `small` holds keeps its MIG UUID and placement, and the fake NVML's record of
    every mutating call never names its span on GPU 0; every pod runs, each on an instance the kubelet could hand it.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    gpus = [GpuConfig.mig(SMALL), GpuConfig.mig(SMALL)]
    node = a100_in_place_node(core, namespace, node_names, "ipb", gpus)
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, gpus) as rig:
        held = rig.pin(namespace, "small", 0, 1)
        pods(core, namespace, "1g.5gb", "small")
        all_running(core, namespace, node, "small")
        wait_for("kubelet lists small", lambda: rig.held.get((namespace, "small")) == [("nvidia.com/mig-1g.5gb", held)])
        wait_for("the agent publishes small's instance busy", lambda: busy_published(core, node, held))
        with running(ctl):
            big = ("big-1", "big-2")
            pods(core, namespace, "3g.20gb", *big)
            all_running(core, namespace, node, *big)
            wait_for("node settled", lambda: settled(core, node))
        time.sleep(0.3)
    assert (0, "1g.5gb", 1, 1, held) in rig.fake.instances()  # same instance, same place
    assert [m for m in rig.fake.mutations if m[1] == 0 and m[2] == (1, 1)] == []  # never destroyed nor moved
    assert running_on(core, namespace, "small") == node and rig.held[(namespace, "small")][0][1] == held
    assert rig.unadmitted == set() and rig.lost == set()
    changed = sorted({m[1] for m in rig.fake.mutations})
    per_gpu = {i: dict(c.layout) for i, c in rig.gpu_configs().items()}
    print(f"GPUs changed by the real agent: {changed}; now {per_gpu}")
    assert 1 in changed  # the idle GPU was re-cut (the planner's choice between the two is not asserted)


def test_an_agent_killed_between_a_destroy_and_a_create_converges_after_a_restart(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(4): the agent dies (fake NVML failpoint: AgentKilled, like SIGKILL, at its first GPU-instance create, after
    the destroys) mid-change. A new agent run on the same state directory undoes the half-done change from its
    journal, re-advertises, then applies the still unanswered target. The pods run, the journal is empty, the taint is
    off, and the controller records the change with an Event.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    node = a100_in_place_node(core, namespace, node_names, "ipc", [GpuConfig.mig(SMALL)])
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, [GpuConfig.mig(SMALL)]) as rig:
        wait_for("inventory published", lambda: inventory_published(core, node))
        rig.fake.kill_at_gi_create = 1
        with running(ctl):
            pods(core, namespace, "3g.20gb", "big-1", "big-2")
            wait_for("agent killed", lambda: rig.agents[0].killed, timeout=30)
            destroyed = [m for m in rig.fake.mutations if m[0] == "destroy-gi"]
            assert destroyed and not rig.journal_empty()  # killed mid-change: GPU instances gone, the journal left
            assert TAINT in node_view(core, node)[2]
            restarted = rig.start_agent()
            all_running(core, namespace, node, "big-1", "big-2")
            wait_for("node settled", lambda: settled(core, node))
            msgs = wait_for("Reconfigured Event", lambda: events_on(core, node, "MigctlReconfigured"))
        time.sleep(0.3)
    assert any("rolled back" in n or "undid" in n or "undo" in n for n in restarted.notes), restarted.notes
    assert sorted((p, s) for _, p, s, _, _ in rig.fake.instances()) == [("3g.20gb", 0), ("3g.20gb", 4)]
    assert rig.journal_empty() and TAINT not in node_view(core, node)[2]
    assert wire.decode_status(node_view(core, node)[1][IN_PLACE_STATUS]).state == "applied"
    assert rig.unadmitted == set() and rig.lost == set() and msgs


def test_an_instance_allocated_after_the_plan_blocks_the_change_and_is_never_touched(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(2), the agent's own check: an idle in-place A100 of 1g.5gb x7, two pending 3g.20gb pods. The controller plans
    on the published inventory (all idle) and writes the target 3g.20gb x2; just before the agent applies it, the
    (simulated) kubelet hands the 1g.5gb at slice 2 to a pod the planner could not know of (listed by PodResources
    only; NVML shows no process). The real agent answers `blocked`, naming the instance and its pod, and changes
    nothing on that GPU (all or nothing); the controller untaints and records it with an Event. That instance is
    never destroyed or moved, whatever the controller plans next.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    node = a100_in_place_node(core, namespace, node_names, "ipd", [GpuConfig.mig(SMALL)])
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, [GpuConfig.mig(SMALL)]) as rig:
        wait_for("inventory published", lambda: inventory_published(core, node))
        held: list[str] = []

        def allocate_once_the_target_is_written() -> None:
            if not held and IN_PLACE_TARGET in node_view(core, node)[1]:
                held.append(rig.ghost("ml", "late", 0, 2))

        rig.before_tick = allocate_once_the_target_is_written
        with running(ctl):
            pods(core, namespace, "3g.20gb", "big-1", "big-2")
            msgs = wait_for("RolledBack Event", lambda: events_on(core, node, "MigctlRolledBack"), timeout=40)
            wait_for("node settled", lambda: settled(core, node))
            mutations_when_blocked = list(rig.fake.mutations)
            time.sleep(3)  # whatever the controller tries next
        status = wire.decode_status(node_view(core, node)[1][IN_PLACE_STATUS])
    assert held and mutations_when_blocked == [] and rig.flips == [], mutations_when_blocked
    assert (0, "1g.5gb", 2, 1, held[0]) in rig.fake.instances()
    assert [m for m in rig.fake.mutations if m[2] == (2, 1)] == []
    print(f"after the blocked answer: {status.state} {status.message!r}; later mutations {rig.fake.mutations}")
    assert TAINT not in node_view(core, node)[2] and msgs
    assert ctl.metrics.in_place_changes.labels("blocked")._value.get() >= 1


def test_an_agent_killed_mid_change_and_back_only_after_the_controller_gave_up_restores_the_previous_layout(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(4), the other end: the agent dies between a destroy and a create (as above) and stays down past the
    controller's agent timeout. The controller gives up: taint off, target dropped, a MigctlNeedsAttention Event.
    The pods are withdrawn; when the agent comes back on the same state directory it undoes the half-done change from
    its journal: the GPU is exactly at its previous layout (same profiles and placements), the journal is empty, and
    the re-advertise makes allocatable list the recreated instances again.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    node = a100_in_place_node(core, namespace, node_names, "ipe", [GpuConfig.mig(SMALL)])
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, [GpuConfig.mig(SMALL)]) as rig:
        before = sorted((p, s, z) for _, p, s, z, _ in rig.fake.instances())
        wait_for("inventory published", lambda: inventory_published(core, node))
        rig.fake.kill_at_gi_create = 1
        with running(ctl):
            pods(core, namespace, "3g.20gb", "big-1", "big-2")
            wait_for("agent killed", lambda: rig.agents[0].killed, timeout=30)
            assert len(rig.fake.instances()) < len(before) and not rig.journal_empty()
            msgs = wait_for("NeedsAttention Event", lambda: events_on(core, node, "MigctlNeedsAttention"), timeout=30)
            wait_for("node settled", lambda: settled(core, node))
            for name in ("big-1", "big-2"):
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            killed_at = len(rig.fake.mutations)
            restarted = rig.start_agent()
            wait_for("journal undone", rig.journal_empty, timeout=20)
            wait_for("re-advertised", lambda: rig.flips, timeout=20)
            wait_for("allocatable back", lambda: allocatable_of(core, node).get("nvidia.com/mig-1g.5gb") == "7")
            _, ann, taints = node_view(core, node)
    assert restarted.notes and "undid an interrupted change" in restarted.notes[0], restarted.notes
    assert sorted((p, s, z) for _, p, s, z, _ in rig.fake.instances()) == before
    assert TAINT not in taints and IN_PLACE_TARGET not in ann and msgs
    print(f"the restarted agent's undo made {len(rig.fake.mutations) - killed_at} NVML mutations on an untainted node")


def allocatable_of(core: client.CoreV1Api, node: str) -> dict[str, str]:
    return dict(core.read_node(node).status.allocatable or {})


def test_the_free_part_of_a_busy_gpu_is_recut_around_the_allocated_instance(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """(2) with the planner's re-cut of busy GPUs: ONE in-place A100 of 1g.5gb x7, the 1g.5gb at slice 1 held by the
    running pod `small` per PodResources (no NVML process). A pending 3g.20gb pod fits only if the free part of that
    busy GPU is re-cut. It runs; the held instance keeps its MIG UUID and placement and no mutating NVML call names
    its span; every mutation happened while the node was tainted.
    SIMULATED (real_agent.py): the GPUs (fake pynvml), the kubelet (gRPC PodResources), the device plugin (label flip
    -> allocatable). Real: the API server, scheduler, kwok, the controller and the whole agent."""
    seed_configmap(core, namespace)
    node = a100_in_place_node(core, namespace, node_names, "ipf", [GpuConfig.mig(SMALL)])
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with real_agent(api, node, [GpuConfig.mig(SMALL)]) as rig, TaintWatch(core, node) as watch:
        held = rig.pin(namespace, "small", 0, 1)
        pods(core, namespace, "1g.5gb", "small")
        all_running(core, namespace, node, "small")
        wait_for("the agent publishes small's instance busy", lambda: busy_published(core, node, held))
        with running(ctl):
            pods(core, namespace, "3g.20gb", "big")
            all_running(core, namespace, node, "big")
            wait_for("node settled", lambda: settled(core, node))
        time.sleep(0.3)
    print(f"busy GPU re-cut around the held instance: mutations {rig.fake.mutations}; now {rig.fake.instances()}")
    assert (0, "1g.5gb", 1, 1, held) in rig.fake.instances()  # same instance, same place
    assert [m for m in rig.fake.mutations if m[2] == (1, 1)] == []  # never destroyed nor moved
    assert ("3g.20gb", 4) in [(p, s) for _, p, s, _, _ in rig.fake.instances()]
    assert rig.fake.times and mutated_only_while_tainted(rig, watch) == []
    assert running_on(core, namespace, "small") == node and rig.unadmitted == set() and rig.lost == set()
