"""One situation, two executors: the simulator's reconcile and the live controller's, each on its own reading of the
same cluster, must reach the same `Outcome` at every reconcile of a run.

How: the simulator runs a trace (`sim.run.simulate`) and drives the cluster. At each of its reconciles, the test
renders the simulated cluster as the Kubernetes objects a live cluster would hold (Nodes with GFD's labels, the node
agent's inventory annotation `migctl.io/gpus`, the device plugin's allocatable, migctl's taint and guard-rail
annotations; Pods bound or pending, gated or not) into the in-memory API of tests/unit/fake_cluster.py, and runs the
live controller's own `_reconcile_once` on them: its cache reading, snapshot adapter, node facts and the shared step.
The live controller holds its own batching windows across the run, as it would live. It starts no worker (it is a
shadow: the simulator moves the cluster), and it is told which nodes are in flight (the simulator's windows).

SIMULATED: the kubelet, the device plugin, GFD and the node agent, at their interface only (node labels, status,
the inventory annotation); kube-scheduler is the simulator's. What this holds: both executors read one cluster the
same way (the simulator's `snapshot` against the adapter) and hand the step the same facts, and the step's
decisions agree reconcile by reconcile. What it does not hold: that the two executors carry out an Outcome alike
(each executor's own tests do).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from migctl.config import Config, ControllerSettings
from migctl.controller.loop import Controller as LiveController
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.naming import resource_name
from migctl.core.model.cluster import Snapshot
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.reconcile import step as step_module
from migctl.reconcile.step import Outcome
from migctl.sim import controller as sim_controller
from migctl.sim.controller import EPOCH_S, Controller, InPlaceController, created, node_name, pod_name
from migctl.sim.mig import Sim
from migctl.sim.run import simulate
from migctl.sim.timing import InPlaceTime
from migctl.sim.workloads import Job
from migctl.wire.names import (
    ACTUATION,
    DEPLOY_MIG_MANAGER,
    GPU_INDEX,
    GPUS,
    HOSTNAME,
    IN_PLACE,
    LAST_ATTEMPT,
    LAST_CHANGE,
    QUEUE_GATE,
    VRAM,
)
from tests.unit.fake_cluster import FakeCache, FakeCluster
from tests.unit.kube_builders import PRODUCTS

CATALOG = load_catalog()
A100 = CATALOG.model("a100-40gb")
GIB = 1024
ALL_1G = (("1g.5gb", 7),)
Obj = dict[str, Any]


def _inventory(sim: Sim, n: int) -> Inventory:
    """The node agent's inventory of simulated node `n`: each instance where it sits and whether it is busy (the
    stock path's runs do not track placements: the instances go where mig-parted puts them, the busy ones first)."""
    cl = sim.cl
    model = cl.shapes.model
    profiles = {p.name: p for p in model.profiles}
    gpus = []
    for gid in cl.by_node[n]:
        g = cl.gpus[gid]
        if g.spots is not None:
            spots = sorted(((p, j is not None) for p, j in g.spots.items()), key=lambda s: s[0].start)
        else:
            busy = Counter(g.used)
            spots = []
            for p in cl.shapes.geo.place(tuple(sorted(g.layout.items()))):
                spots.append((p, busy[p.profile] > 0))
                busy[p.profile] -= 1
        devices = tuple(
            MigDevice(profile=p.profile, profile_id=profiles[p.profile].profile_id or 0, gi=k + 1, start=p.start,
                      size=p.size, memory_mib=profiles[p.profile].memory_mib, uuid=f"MIG-{n}-{g.index}-{p.start}",
                      busy=held)
            for k, (p, held) in enumerate(spots)
        )
        gpus.append(
            GpuInfo(index=g.index, uuid=f"GPU-{n}-{g.index}", name=model.nvml_names[0], memory_mib=model.memory_mib,
                    mig_capable=True, mig_enabled=True, mig_pending=True, busy=any(d.busy for d in devices),
                    instances=devices)
        )
    return Inventory(gpus=tuple(gpus))


def _node(sim: Sim, policy: Controller, n: int, taint: str) -> Obj:
    cl = sim.cl
    alloc: Counter[str] = Counter()
    for gid in cl.by_node[n]:
        for p, c in cl.gpus[gid].layout.items():
            alloc[resource_name(p)] += c
    labels = {"nvidia.com/gpu.product": PRODUCTS[cl.shapes.model.id], "nvidia.com/gpu.count": str(len(cl.by_node[n])),
              HOSTNAME: node_name(n)}  # fmt: skip
    if policy.in_place:
        labels |= {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"}
    annotations = {GPUS: _inventory(sim, n).to_annotation()}
    record = policy.records.get(n)
    if record is not None:  # as the actuator writes them, on the live controller's clock
        for key, t in ((LAST_ATTEMPT, record.last_attempt), (LAST_CHANGE, record.last_change)):
            if t is not None:
                annotations[key] = repr(EPOCH_S + t)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name(n), "uid": f"node-{n}", "labels": labels, "annotations": annotations},
        "spec": {"taints": [] if cl.node_open(n) else [{"key": taint, "value": "true", "effect": "NoSchedule"}]},
        "status": {"allocatable": {"cpu": str(10**6), "memory": str(2**62), "pods": str(10**6),
                                   **{k: str(v) for k, v in alloc.items()}}},
    }


def _pod(sim: Sim, ji: int, node: str | None, gpu: int | None, gated: bool) -> Obj:
    job, shapes = sim.jobs[ji], sim.cl.shapes
    profile = shapes.smallest(job)
    ask = {resource_name(profile): str(job.num_gpu)} if profile else {VRAM: f"{job.vram_mib}Mi"}
    need = min(shapes.full.memory_mib if job.whole else job.vram_mib, shapes.full.memory_mib)
    annotations = {VRAM: f"{need}Mi"} | ({GPU_INDEX: str(gpu)} if gpu is not None else {})
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": ask, "limits": ask}}], "priority": job.priority}
    status: Obj = {"phase": "Running" if node else "Pending"}
    if node:
        spec["nodeName"] = node
    else:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    if gated:
        spec["schedulingGates"] = [{"name": QUEUE_GATE}]
    meta = {"name": pod_name(ji), "namespace": "sim", "uid": f"uid-{ji}", "annotations": annotations,
            "creationTimestamp": created(job.arrival)}  # fmt: skip
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def render(sim: Sim, policy: Controller) -> list[Obj]:
    """The simulated cluster as a live one's objects."""
    taint = policy.planner.reconfigure_taint
    cl = sim.cl
    objects = [_node(sim, policy, n, taint) for n in range(len(cl.by_node))]
    for ji, units in sorted(sim.running.items()):
        gids = {gid for gid, _ in units}
        first = cl.gpus[units[0][0]]
        objects.append(_pod(sim, ji, node_name(first.node), first.index if len(gids) == 1 else None, False))
    gated = policy.gate
    for ji in sorted(sim.pending):
        objects.append(_pod(sim, ji, None, None, gated and ji not in policy.lifted))
    return objects


def sync(cluster: FakeCluster, objects: list[Obj]) -> None:
    """Make `cluster` hold exactly `objects`; an unchanged object keeps its resourceVersion, a changed one gets a
    new one, as on the API server (the live conversion memo reuses a reading while uid and version stay)."""
    stores = {"Node": cluster.nodes, "Pod": cluster.pods}
    wanted: dict[tuple[str, str], Obj] = {}
    for o in objects:
        meta = o["metadata"]
        wanted[(o["kind"], f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"])] = o
    for kind, store in stores.items():
        for key in list(store):
            if (kind, key) not in wanted:
                del store[key]
    for (kind, key), o in wanted.items():
        old = stores[kind].get(key)
        if old is not None:
            kept = {**old, "metadata": {k: v for k, v in old["metadata"].items() if k != "resourceVersion"}}
            if kept == o:
                continue
        cluster.add(o)


class Shadow(LiveController):
    """The live controller on the rendered cluster: it reconciles, and starts nothing (no actuator, no lifts)."""

    in_flight: set[str]

    def _busy(self) -> set[str]:
        return set(self.in_flight)


def _live(settings: ControllerSettings, gate: bool) -> Shadow:
    """`gate`: the policy's queue gate (the in-place policy turns it on unless its config says otherwise)."""
    cfg = Config.model_validate({"controller": {**settings.model_dump(), "queue_gate": gate}})
    cluster = FakeCluster([])
    live = Shadow(cfg, None, catalog=CATALOG, identity="shadow", connect=lambda stop: cluster,
                  cache=FakeCache(cluster))  # fmt: skip
    live._leading = True  # leading, but never `_started_leading`: no actuator, so no worker and no lift happen
    live.in_flight = set()
    return live


def _snapshot_key(s: Snapshot) -> object:
    nodes = [
        (n.name, n.frozen_reason, sorted(t.key for t in n.taints), n.model.id if n.model else None, n.usage_known,
         n.in_place, sorted(n.gpu_pods), {p: c for p, c in n.mig_free.items() if c},
         [(g.index, g.config, {p: c for p, c in (g.used or {}).items() if c}, g.instances) for g in n.gpus])
        for n in s.nodes
    ]  # fmt: skip
    pods = [
        (p.key, p.node, p.phase, p.gpu, p.need_mib, p.priority, p.created, p.gpu_index, p.gated, p.unschedulable)
        for p in s.pods
    ]
    return nodes, sorted(pods)


def _outcome_key(o: Outcome, now: float) -> object:
    """What an executor acts on, with times as seconds from the reconcile (the two clocks differ by the epoch)."""
    return (
        sorted((a.pod, a.node, a.gpu, a.profile) for a in o.plan.assignments),
        sorted((u.pod, u.reason) for u in o.plan.unplaced),
        [(a.node, a.path.name, type(a).__name__, a.reason.code) for a in o.actions],
        [(x.pod, x.node, x.why) for x in o.lifts],
        o.claims,
        sorted(o.ready),
        o.report_unplaced,
        {n: r.code for n, r in o.refused.items()},
        None if o.batch_due is None else round(o.batch_due - now, 6),
        None if o.burst_until is None else round(o.burst_until - (EPOCH_S + now), 6),
    )


def run_in_parity(policy: Controller, jobs: list[Job], nodes: list[int]) -> int:
    """Run `policy` over `jobs`, checking every reconcile against the live controller; the reconciles checked."""
    live = _live(policy.settings, policy.gate)
    cluster = FakeCluster([])
    live.kube, live.cache = cluster, FakeCache(cluster)
    checked = 0
    real_step = step_module.step

    def both(facts: Any, windows: Any, settings: Any, clock: Any, planner: Callable[[Snapshot], Any]) -> Outcome:
        nonlocal checked
        sim = policy.current
        live.in_flight = {node_name(n) for n in sim.windows}  # the simulator's nodes in a change, read off it
        sync(cluster, render(sim, policy))
        live.clock = lambda: EPOCH_S + clock.now
        live._reconcile_once()
        mine = real_step(facts, windows, settings, clock, planner)
        theirs = live.last_outcome
        assert theirs is not None
        assert _snapshot_key(theirs.whole) == _snapshot_key(mine.whole), f"at {clock.now:.2f} s"
        assert _outcome_key(theirs, EPOCH_S + clock.now) == _outcome_key(mine, clock.now), f"at {clock.now:.2f} s"
        checked += 1
        return mine

    sim_controller.step = both  # type: ignore[assignment]
    try:
        simulate(jobs, nodes, A100, policy, initial=ALL_1G)
    finally:
        sim_controller.step = real_step
    return checked


class _Tracked:
    """A policy that remembers the Sim it runs on (the renderer reads it)."""

    current: Sim

    def _reconcile(self, sim: Sim, guarded: bool) -> None:
        self.current = sim
        super()._reconcile(sim, guarded)  # type: ignore[misc]


class TrackedStock(_Tracked, Controller):
    pass


class TrackedInPlace(_Tracked, InPlaceController):
    pass


def _trace() -> list[Job]:
    """Small and large pods coming and going on two nodes of two A100s: claims, re-cuts, holds and waits."""
    sizes = [3, 7, 15, 3, 3, 7, 15, 3, 7, 3, 15, 3, 35, 3, 7]
    return [
        Job(f"j{i}", s * GIB, arrival=9.0 * i, duration=60.0 + 37 * (i % 4), priority=10 * (i % 3 == 0))
        for i, s in enumerate(sizes * 2)
    ]


@pytest.mark.parametrize(
    "make",
    [
        lambda: TrackedInPlace(timing=InPlaceTime(5.0, 0.0)),
        lambda: TrackedStock(controller=ControllerSettings(max_concurrent_nodes=1)),
        lambda: TrackedInPlace(controller=ControllerSettings(queue_gate=False, in_place_max_concurrent_nodes=1),
                               timing=InPlaceTime(5.0, 0.0)),
    ],
    ids=["in-place-gated", "stock-one-at-a-time", "in-place-ungated"],
)
def test_the_simulator_and_the_live_controller_reach_the_same_outcome_at_every_reconcile(
    make: Callable[[], Controller],
) -> None:
    assert run_in_parity(make(), _trace(), [2, 2]) >= 10


def test_the_check_sees_a_simulator_that_builds_other_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness can fail: a simulator that forgets which nodes are in flight (so a second node starts beside
    one still changing, past max_concurrent_nodes 1) is caught."""
    original = sim_controller.Facts

    def forgetful(snapshot: Any, nodes: Any, in_flight: Any = frozenset(), *rest: Any, **kw: Any) -> Any:
        return original(snapshot, nodes, frozenset(), *rest, **kw)

    monkeypatch.setattr(sim_controller, "Facts", forgetful)
    with pytest.raises(AssertionError, match="at "):
        run_in_parity(TrackedStock(controller=ControllerSettings(max_concurrent_nodes=1)), _trace(), [2, 2])


def test_the_check_sees_a_simulator_that_skips_the_queues_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    original = sim_controller.Facts
    monkeypatch.setattr(sim_controller, "Facts", lambda *a, **kw: original(*a[:4]))  # gate off
    with pytest.raises(AssertionError, match="at "):
        run_in_parity(TrackedInPlace(timing=InPlaceTime(5.0, 0.0)), _trace(), [2, 2])


def test_rendered_objects_are_plain_json() -> None:
    policy = TrackedStock()
    simulate(_trace()[:3], [1], A100, policy, initial=ALL_1G)
    json.dumps(render(policy.current, policy))
