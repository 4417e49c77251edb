"""The controller's in-place path against the real control plane: pods that need new instances run after a change
the node agent makes, the node is tainted only for the short window, the window is measured; and each fault that is
the controller's ends with no taint, an Event, and the previous or the target layout.

Real: kube-apiserver, kube-scheduler, kwok, Leases, `migctl run` processes (failpoints). SIMULATED: the node agent
in its in-place mode and the NVIDIA device plugin (sim_in_place.py), at their real interface: the node's annotations,
its `nvidia.com/device-plugin.config` label and its allocatable. No mig-manager runs: nothing else changes the node.
The GPUs are idle (the planner re-cuts idle GPUs; re-cutting the free part of busy ones is the planner's, merged later).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from migctl.adapters.kube import Stopped
from migctl.config import Config
from migctl.controller.inplace import IN_PLACE_STEPS
from migctl.controller.loop import Controller
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.wire import inplace as wire
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, DEVICE_PLUGIN_CONFIG, IN_PLACE_STATUS, IN_PLACE_TARGET

from .controller_process import ControllerProcess
from .controlplane import ControlPlane
from .gpunodes import create_gpu_node
from .sim_in_place import SimInPlaceAgent
from .test_controller_e2e import GROUP, TAINT, config_for, mig_pod, node_view, running_on, seed_configmap, settled
from .waiting import wait_for

pytestmark = pytest.mark.cluster

BEFORE = {"1g.10gb": 7}
AFTER = {0: GpuConfig.mig({"3g.40gb": 2})}  # what two pending 3g.40gb pods on an idle H100 get
IN_PLACE_TIMEOUTS = {"in_place_admission_timeout_s": 5.0, "in_place_agent_timeout_s": 5.0,
                     "in_place_advertise_timeout_s": 5.0}  # fmt: skip


def in_place_config(namespace: str, **controller: Any) -> Config:
    return config_for(namespace, **{**IN_PLACE_TIMEOUTS, **controller})


def in_place_node(core: client.CoreV1Api, namespace: str, node_names: list[str], **labels: str) -> str:
    """An H100 node opted into the in-place path (mig-manager off), its layout recorded, no mig.config label."""
    name = f"{namespace}-ip"
    create_gpu_node(core, name, gpus=[GpuConfig.mig(BEFORE)], labels={
        GROUP: namespace, ACTUATION: "in-place", DEPLOY_MIG_MANAGER: "false", DEVICE_PLUGIN_CONFIG: "migctl-a",
        **labels})  # fmt: skip
    layout = {"config": "seed", "gpus": {"0": {"mig": True, "layout": BEFORE}}}
    core.patch_node(name, {"metadata": {"annotations": {"migctl.io/layout": json.dumps(layout)}}})
    node_names.append(name)
    return name


def layout_of(core: client.CoreV1Api, node: str) -> dict[str, int]:
    return dict(json.loads(node_view(core, node)[1]["migctl.io/layout"])["gpus"]["0"]["layout"])


def big_pods(core: client.CoreV1Api, namespace: str) -> None:
    for pod in ("big-1", "big-2"):
        core.create_namespaced_pod(namespace, mig_pod(pod, namespace, "3g.40gb"))


def events_on(core: client.CoreV1Api, node: str, reason: str) -> list[str]:
    items = core.list_namespaced_event("default", field_selector=f"involvedObject.name={node}").items
    return [e.message for e in items if e.reason == reason]


class TaintWatch:
    """Samples the node's taint every 20 ms: how long it was tainted, as an outsider sees it."""

    def __init__(self, core: client.CoreV1Api, node: str) -> None:
        self.core, self.node = core, node
        self.samples: list[tuple[float, bool]] = []
        self.allocatable: list[tuple[bool, dict[str, str]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TaintWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            node = self.core.read_node(self.node)
            tainted = any(t.key == TAINT for t in node.spec.taints or [])
            self.samples.append((time.monotonic(), tainted))
            self.allocatable.append((tainted, dict(node.status.allocatable or {})))

    def untainted_with(self) -> list[dict[str, str]]:
        """Allocatable at each moment the taint was seen to come off."""
        a = self.allocatable
        return [b[1] for prev, b in itertools.pairwise(a) if prev[0] and not b[0]]

    def tainted_seconds(self) -> float:
        return sum(b[0] - a[0] for a, b in itertools.pairwise(self.samples) if a[1])


@contextmanager
def running(ctl: Controller) -> Iterator[Controller]:
    ctl.start(sync_timeout=20)
    try:
        yield ctl
    finally:
        ctl.stop()


def test_pods_that_need_new_instances_run_after_a_short_in_place_window(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Two pending 3g.40gb pods, an idle in-place H100 of 1g.10gb x7: migctl taints, writes the target, the agent
    applies it and flips the device-plugin label, allocatable lists 3g.40gb x2, migctl untaints. The pods run; the
    taint was on only for the window the metric reports; mig-manager's label was never written."""
    seed_configmap(core, namespace)
    node = in_place_node(core, namespace, node_names)
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with SimInPlaceAgent(api, [node]) as sim, TaintWatch(core, node) as watch, running(ctl):
        big_pods(core, namespace)
        for pod in ("big-1", "big-2"):
            assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
        wait_for("node settled", lambda: settled(core, node))
        body = urllib.request.urlopen(f"http://127.0.0.1:{ctl.metrics_port}/metrics", timeout=5).read().decode()
    labels, ann, taints = node_view(core, node)
    assert TAINT not in taints and "nvidia.com/mig.config" not in labels
    assert layout_of(core, node) == {"3g.40gb": 2}
    target = wire.decode_target(ann[IN_PLACE_TARGET])
    assert sim.applied == [(node, target.plan)] and len(sim.flips) == 1  # applied once, re-advertised once
    assert wire.decode_status(ann[IN_PLACE_STATUS]).state == "applied"
    assert 'migctl_in_place_changes_total{result="applied"} 1.0' in body
    assert "migctl_in_place_window_seconds_count 1.0" in body
    window = float(next(ln.split()[-1] for ln in body.splitlines() if ln.startswith("migctl_in_place_window_s")
                        and "_sum" in ln))  # fmt: skip
    seen = watch.tainted_seconds()
    print(f"in-place window: metric {window:.2f} s, taint seen {seen:.2f} s (simulated agent, plugin lag 0.5 s)")
    assert 0 < seen <= window + 0.5 and window < 10, (seen, window)  # only the window, and seconds, not minutes
    offs = watch.untainted_with()  # the taint came off once, and only after allocatable listed the new instances
    assert len(offs) == 1 and offs[0].get("nvidia.com/mig-3g.40gb") == "2", offs
    assert wait_for("Reconfigured Event", lambda: events_on(core, node, "MigctlReconfigured"))


def test_a_busy_gpu_is_left_as_it_is_while_its_idle_neighbour_is_recut(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """A two-GPU in-place node; a running pod holds a 1g.10gb instance on GPU 0 (the agent's inventory says which).
    Two 3g.40gb pods: migctl re-cuts GPU 1 only, its target keeps GPU 0 exactly as it is, the agent never changes
    GPU 0, and the running pod keeps running."""
    seed_configmap(core, namespace)
    node = f"{namespace}-ip2"
    labels = {GROUP: namespace, ACTUATION: "in-place", DEPLOY_MIG_MANAGER: "false", DEVICE_PLUGIN_CONFIG: "migctl-a"}
    create_gpu_node(core, node, gpus=[GpuConfig.mig(BEFORE), GpuConfig.mig(BEFORE)], labels=labels)
    node_names.append(node)
    gpus = {str(i): {"mig": True, "layout": BEFORE} for i in (0, 1)}
    recorded_before = json.dumps({"config": "seed", "gpus": gpus})
    core.patch_node(node, {"metadata": {"annotations": {"migctl.io/layout": recorded_before}}})
    core.create_namespaced_pod(namespace, mig_pod("small", namespace, "1g.10gb"))
    assert wait_for("small running", lambda: running_on(core, namespace, "small")) == node
    sim = SimInPlaceAgent(api, [node])
    sim.busy = {node: {0: {"1g.10gb": 1}}}
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with sim, running(ctl):
        big_pods(core, namespace)
        for pod in ("big-1", "big-2"):
            assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
        wait_for("node settled", lambda: settled(core, node))
    target = wire.decode_target(node_view(core, node)[1][IN_PLACE_TARGET])
    assert dict(target.gpus[0]) == BEFORE and dict(target.gpus[1]) == {"3g.40gb": 2}
    assert sim.changed == [(node, 1)]  # GPU 0, which a pod uses, was never changed
    recorded = json.loads(node_view(core, node)[1]["migctl.io/layout"])["gpus"]
    assert recorded["0"]["layout"] == BEFORE and recorded["1"]["layout"] == {"3g.40gb": 2}
    assert running_on(core, namespace, "small") == node


def test_a_node_where_mig_manager_runs_is_refused_with_an_event(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    seed_configmap(core, namespace)
    node = in_place_node(core, namespace, node_names, **{DEPLOY_MIG_MANAGER: "true"})
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with SimInPlaceAgent(api, [node]) as sim, running(ctl):
        big_pods(core, namespace)
        msgs = wait_for("refusal Event", lambda: events_on(core, node, "MigctlInPlaceRefused"), timeout=20)
        assert f"{DEPLOY_MIG_MANAGER}=false" in msgs[0]
        time.sleep(2)
    assert TAINT not in node_view(core, node)[2] and not sim.applied


FAULTS = {
    # fault: (how to inject it, the result metric, the Event, the layout expected afterwards)
    "agent-failed": ({"answer": "failed"}, "failed", "MigctlRolledBack", BEFORE),
    "agent-blocked": ({"answer": "blocked"}, "blocked", "MigctlRolledBack", BEFORE),
    "agent-silent": ({"silent": True}, "timeout", "MigctlNeedsAttention", BEFORE),
    "device-plugin-not-back": ({"plugin_dead": True}, "timeout", "MigctlRolledBack", {"3g.40gb": 2}),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_each_fault_ends_untainted_with_an_event_and_a_known_layout(
    fault: str, api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    inject, result, reason, layout = FAULTS[fault]
    seed_configmap(core, namespace)
    node = in_place_node(core, namespace, node_names)
    ctl = Controller(in_place_config(namespace), api, identity="a")
    with SimInPlaceAgent(api, [node]) as sim, running(ctl):
        sim.answer = inject.get("answer")
        sim.silent = {node} if inject.get("silent") else set()
        sim.plugin_dead = {node} if inject.get("plugin_dead") else set()
        big_pods(core, namespace)
        wait_for("a change attempted", lambda: "migctl.io/last-error" in node_view(core, node)[1], timeout=40)
        wait_for("node settled", lambda: settled(core, node))
        msgs = wait_for(f"{reason} Event", lambda: events_on(core, node, reason), timeout=20)
        assert ctl.metrics.in_place_changes.labels(result)._value.get() == 1
    _, ann, taints = node_view(core, node)
    assert TAINT not in taints and ann["migctl.io/failures"] == "1" and IN_PLACE_TARGET not in ann
    assert layout_of(core, node) == layout, msgs


# -- the controller killed in each in-place phase (a real process), and leadership lost mid-change ---------------


@pytest.mark.parametrize("step", IN_PLACE_STEPS)
def test_controller_killed_in_each_in_place_phase_a_new_one_finishes(
    step: str, control_plane: ControlPlane, api: client.ApiClient, core: client.CoreV1Api, namespace: str,
    node_names: list[str], tmp_path: Path,
) -> None:  # fmt: skip
    """`migctl run` SIGKILLs itself at `step` (MIGCTL_FAILPOINT); a new controller resumes from the node's
    annotations (no second start, the agent applies the target once) and the pods run, with no taint left."""
    seed_configmap(core, namespace)
    node = in_place_node(core, namespace, node_names)
    cfg = in_place_config(namespace)
    proc = ControllerProcess(control_plane, cfg, tmp_path / "a", failpoint=step)
    try:
        with SimInPlaceAgent(api, [node]) as sim:
            big_pods(core, namespace)
            proc.wait_killed(timeout=45)
            _, ann, taints = node_view(core, node)
            if step != "in-place-advertised":
                assert TAINT in taints and ann["migctl.io/phase"].startswith("in-place-")
            ctl = Controller(cfg, api, identity="b")
            with running(ctl):
                for pod in ("big-1", "big-2"):
                    assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
                wait_for("node settled", lambda: settled(core, node))
            assert ctl.metrics.started._value.get() == 0  # resumed, not started again
            assert [n for n, _ in sim.applied] == [node]  # the agent applied the target once
    finally:
        proc.stop()
    assert layout_of(core, node) == {"3g.40gb": 2} and TAINT not in node_view(core, node)[2]


def test_leadership_lost_mid_change_the_next_leader_finishes(
    api: client.ApiClient, core: client.CoreV1Api, namespace: str, node_names: list[str]
) -> None:
    """Two replicas; the leader loses its Lease right after writing the agent's target (it stops acting and does not
    hand the Lease back). The other takes over after the lease expires and finishes the change from the annotations."""
    seed_configmap(core, namespace)
    node = in_place_node(core, namespace, node_names)
    died = threading.Event()
    replicas: dict[str, Controller] = {}

    def hook(name: str, at: str) -> None:
        if at == "in-place-target-written" and not died.is_set():
            next(c for c in replicas.values() if c.leading).halt()
            died.set()
            raise Stopped("leadership lost")

    for ident in ("a", "b"):
        replicas[ident] = Controller(in_place_config(namespace), api, identity=ident, hook=hook)
    with SimInPlaceAgent(api, [node]) as sim:
        for c in replicas.values():
            c.start(sync_timeout=20)
        try:
            leader = wait_for("a leader", lambda: [i for i, c in replicas.items() if c.leading])[0]
            follower = replicas["b" if leader == "a" else "a"]
            big_pods(core, namespace)
            wait_for("leader lost mid-change", died.is_set, timeout=30)
            replicas[leader].stop(release=False)
            wait_for("follower takes over", lambda: follower.leading, timeout=15)
            for pod in ("big-1", "big-2"):
                assert wait_for(f"{pod} running", lambda p=pod: running_on(core, namespace, p), timeout=40) == node
            wait_for("node settled", lambda: settled(core, node))
            assert follower.metrics.started._value.get() == 0
            assert follower.actuator is not None and (node, "succeeded", "") in follower.actuator.outcomes
            assert [n for n, _ in sim.applied] == [node]
        finally:
            for c in replicas.values():
                c.stop()
    assert config_name(AFTER) and layout_of(core, node) == {"3g.40gb": 2}
