"""`migctl` in the simulator: the real planner behind the live controller's own reconcile step.

The same settings model as `migctl run` drives it (`migctl.config.ControllerSettings`, `PlannerSettings`) and the
same pure decisions (`migctl.reconcile.decide`), so the simulated controller waits, batches and refuses
exactly where the live one would:
* every arrival or departure, and the end of a reconfiguration, triggers a reconcile `debounce_s` later (a
  trigger already pending is kept); the periodic resync (every `resync_interval_s`) is simulated only where it
  can change the plan: at the first resync after a guard rail on some node expires while pods wait (any other
  resync sees the same snapshot as the reconcile before it, and plans the same);
* a reconcile builds a snapshot as the adapter would from a live cluster (`snapshot`) and each node's facts as
  the controller reads them from Node objects (`Controller.facts`), then calls the live controller's own step
  (`migctl.reconcile.step`) and carries out its `Outcome`: the queue's claims bound, the changes that start,
  the gates lifted;
* a started node is tainted and paused node-wide (`Sim.reconfigure`); the pods the change is for start when
  it ends, and its `last_change` starts the dwell.
Between reconciles kube-scheduler binds pending pods to free instances of their profile (`bind_free`).
`settle_s` has no effect here: the pods a change is for bind the moment it ends, so none is left to plan twice.

Without departures (openb, the FGD packing protocol) there is no timeline: each round plans and applies at once.
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime, timedelta

from migctl.config import ControllerSettings
from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.model.cluster import Gpu, GpuDemand, Instance, Node, Pod, Resources, Snapshot, Taint
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan
from migctl.core.queue_claims import NONE
from migctl.reconcile.decide import Windows
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.guards import NodeRecord
from migctl.reconcile.paths import IN_PLACE_PATH, STOCK, Path
from migctl.reconcile.step import Clock, DraFacts, Facts, Outcome, step
from migctl.sim import gate
from migctl.sim.mig import Policy, Sim
from migctl.sim.scheduler import bind_free
from migctl.sim.state import Placement
from migctl.sim.timing import InPlaceTime
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, IN_PLACE

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)  # trace time 0 as a creationTimestamp
EPOCH_S = EPOCH.timestamp()
NAMESPACE = "sim"


def node_name(n: int) -> str:
    return f"n{n:05d}"


def pod_name(ji: int) -> str:
    """Zero-padded, so name order is arrival order (the planner breaks creation-time ties by key)."""
    return f"j{ji:07d}"


def created(arrival_s: float) -> str:
    """A trace arrival as Kubernetes writes creationTimestamp (RFC 3339, whole seconds, UTC)."""
    return (EPOCH + timedelta(seconds=math.floor(arrival_s))).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_of(pod_key: str) -> int:
    return int(pod_key.rsplit("/j", 1)[1])


def _pod(sim: Sim, ji: int, node: str | None, gpu_index: int | None, gated: bool = False) -> Pod:
    """The pod as the adapter reads it after migctl's webhook: its smallest profile by name (full instances for
    whole-GPU pods), the webhook's need annotation, priority, creation time = arrival, and for a running pod its
    node and GPU. A pod asks for one profile, so the planner, like kube-scheduler, serves it with that one."""
    job, full = sim.jobs[ji], sim.cl.shapes.full
    profile = sim.cl.shapes.smallest(job)
    if profile is None:  # larger than any instance of this model: the webhook finds no profile, nothing serves it
        demand = GpuDemand("vram", job.num_gpu, vram_mib=job.vram_mib)
    else:
        demand = GpuDemand("profile", job.num_gpu, profile=profile)
    return Pod(
        NAMESPACE,
        pod_name(ji),
        priority=job.priority,
        node=node,
        phase="Running" if node else "Pending",
        gpu=(demand,),
        need_mib=min(full.memory_mib if job.whole else job.vram_mib, full.memory_mib),
        unschedulable=node is None,
        created=created(job.arrival),
        gpu_index=gpu_index,
        gated=gated,
    )


def snapshot(sim: Sim, taint: str, in_place: bool = False, lifted: set[int] | None = None) -> Snapshot:
    """The cluster as `snapshot_from_objects` would build it: nodes with per-GPU layouts and usage (the node
    agent's inventory), running pods with their node and GPU, pending pods; nodes in a reconfiguration carry
    migctl's taint (the guard rails' holds are added by `reconcile.freeze`). `in_place`: every node is opted into the
    in-place path and the agent reports each instance where it sits (`Gpu.instances`). `lifted`: the queue gate
    is on, and these pending pods no longer carry it (`sim/gate.py`)."""
    cl = sim.cl
    on_node: dict[int, list[tuple[int, int | None]]] = {}
    for ji, units in sim.running.items():
        gids = {gid for gid, _ in units}
        n = cl.gpus[units[0][0]].node
        on_node.setdefault(n, []).append((ji, cl.gpus[units[0][0]].index if len(gids) == 1 else None))
    pods: list[Pod] = []
    nodes = []
    for n, ids in enumerate(cl.by_node):
        name = node_name(n)
        running = sorted(on_node.get(n, []))
        node_pods = [_pod(sim, ji, name, idx) for ji, idx in running]
        pods.extend(node_pods)
        free: dict[str, int] = {}
        gpus = []
        for gid in ids:
            g = cl.gpus[gid]
            held = None
            if in_place and g.spots is not None:
                held = tuple(
                    Instance(p.profile, p.start, p.size, j is not None)
                    for p, j in sorted(g.spots.items(), key=lambda kv: (kv[0].start, kv[0].profile))
                )
            gpus.append(Gpu(g.index, GpuConfig.mig(dict(g.layout)), dict(g.used), False, held))
            for p, c in g.free.items():
                free[p] = free.get(p, 0) + c
        paused = not cl.node_open(n)
        reason = "migctl is reconfiguring it" if paused else ""
        nodes.append(
            Node(
                name=name,
                taints=(Taint(taint, "true", "NoSchedule"),) if paused else (),
                allocatable=Resources(10**9, 2**62, 10**6),
                used=Resources(pods=len(node_pods)),
                model=cl.shapes.model,
                gpus=tuple(gpus),
                mig_free=free,
                usage_known=True,
                frozen_reason=reason,
                gpu_pods=tuple((p.key, p.priority, p.gpu_index) for p in node_pods),
                in_place=in_place,
            )
        )
    pods.extend(_pod(sim, ji, None, None, lifted is not None and gate.held(sim, ji, lifted)) for ji in sim.pending)
    return Snapshot(tuple(nodes), tuple(pods))


def _fingerprint(snap: Snapshot) -> object:
    """Everything of a simulator snapshot the planner reads (the rest is the same in every snapshot of a run)."""
    nodes = tuple(
        (
            n.frozen_reason,
            bool(n.taints),
            tuple((g.config, tuple(sorted((g.used or {}).items())), g.instances) for g in n.gpus),
        )
        for n in snap.nodes
    )
    return nodes, tuple((p.key, p.node, p.gpu_index) for p in snap.pods)


class Controller(Policy):
    name = "migctl"
    times_itself = True
    in_place = False  # the stock path: every change is a relabel through mig-manager

    def __init__(self, planner: PlannerSettings | None = None, controller: ControllerSettings | None = None) -> None:
        self.planner = planner or PlannerSettings()
        self.settings = controller or ControllerSettings()
        self.windows = Windows(self.settings)
        self.records: dict[int, NodeRecord] = {}  # what the actuator would have written on each node
        self.trigger_at: float | None = None  # debounced reconcile
        self.batch_at: float | None = None  # the batching window closes
        self.resync_at: float | None = None  # the next resync that can matter
        self.burst_at: float | None = None  # a burst lands: plan the pods it held
        self.last_plan: Plan | None = None
        self._memo: tuple[object, Plan] | None = None
        self.gate = self.settings.queue_gate
        self.lifted: set[int] = set()  # pending pods whose queue gate the controller lifted
        self.claims = NONE  # the last reconcile's claims (`core/queue_claims.py`)

    @property
    def path(self) -> Path:
        """The path of this policy's nodes (each path has its own guard rails)."""
        return IN_PLACE_PATH if self.in_place else STOCK

    def wake(self, sim: Sim) -> float | None:
        times = [t for t in (self.trigger_at, self.batch_at, self.burst_at) if t is not None]
        self.resync_at = self._next_resync(sim) if sim.pending else None
        if self.resync_at is not None:
            times.append(self.resync_at)
        return min(times) if times else None

    def _next_resync(self, sim: Sim) -> float | None:
        """The first resync tick (an interval job: multiples of resync_interval_s) at or after the next moment a
        cooldown or minimum dwell ends."""
        s, now = self.path.rails(self.settings), sim.now
        ends = [
            t
            for r in self.records.values()
            for t in (
                None if r.last_attempt is None else r.last_attempt + s.cooldown_s,
                None if r.last_change is None else r.last_change + s.min_dwell_s,
            )
            if t is not None and t > now
        ]
        if not ends:
            return None
        every = self.settings.resync_interval_s
        return math.ceil(min(ends) / every) * every

    def finished(self, sim: Sim, node: int) -> None:
        self.records[node] = NodeRecord(node_name(node), last_attempt=sim.now, last_change=sim.now)  # on success

    def step(self, sim: Sim) -> None:
        now = sim.now
        if sim.packing:  # the planner places every pod of the round itself, as before the timeline existed
            self._reconcile(sim, guarded=False)
            return
        if self.gate:
            gate.bind_ungated(sim, self.lifted)
        else:
            bind_free(sim)
        if sim.real_event and self.trigger_at is None:
            self.trigger_at = now + self.settings.debounce_s
        due = [t for t in (self.trigger_at, self.batch_at, self.resync_at, self.burst_at) if t is not None and t <= now]
        if not due:
            return
        if self.trigger_at is not None and self.trigger_at <= now:
            self.trigger_at = None
        if self.batch_at is not None and self.batch_at <= now:
            self.batch_at = None
        if self.resync_at is not None and self.resync_at <= now:
            self.resync_at = None
        if self.burst_at is not None and self.burst_at <= now:
            self.burst_at = None
        self._reconcile(sim, guarded=True)

    def snapshot(self, sim: Sim, lifted: set[int] | None) -> Snapshot:
        """The adapter's snapshot of the simulated cluster (`snapshot`); DRA policies tag their nodes."""
        return snapshot(sim, self.planner.reconfigure_taint, self.in_place, lifted)

    def dra_facts(self, sim: Sim) -> DraFacts | None:
        """What the fences on DynamicMIG nodes read (`reconcile.step.DraFacts`); None: the cluster has none."""
        return None

    def steer(self, sim: Sim, out: Outcome) -> None:
        """Carry out `out.fences` (DynamicMIG nodes only; `policies/dra.py`)."""

    def facts(self, sim: Sim) -> dict[str, NodeFacts]:
        """Each node as the controller reads its Node object: opted into the in-place path (with the GPU
        Operator's mig-manager off) or not, what the actuator recorded of it, and migctl's taint while a change
        holds it."""
        labels = {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"} if self.in_place else {}
        out = {}
        for n in range(len(sim.cl.by_node)):
            name = node_name(n)
            out[name] = NodeFacts(name, labels, {}, tainted=n in sim.windows, known=self.records.get(n))
        return out

    def _plan(self, sim: Sim, snap: Snapshot) -> Plan:
        key = _fingerprint(snap)
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]  # the same snapshot as the last reconcile: the pure planner plans the same
        t0 = time.perf_counter()
        result = plan(snap, self.planner)
        sim.plan_s.append(time.perf_counter() - t0)
        self._memo = (key, result)
        return result

    def _reconcile(self, sim: Sim, guarded: bool) -> None:
        """One reconcile: the live controller's own step (`reconcile/step.py`) on the simulated cluster, then its
        `Outcome` carried out here. Unguarded (the packing rounds): plan and apply at once, as before the timeline."""
        now = sim.now
        gated = self.gate and guarded
        snap = self.snapshot(sim, self.lifted if gated else None)
        if not guarded:
            result = self.last_plan = self._plan(sim, snap)
            self._carry_out(sim, result, [n.name for n in result.nodes if n.changed], gated=False)
            return
        in_flight = frozenset(node_name(n) for n in sim.windows)
        facts = Facts(snap, self.facts(sim), in_flight, self.settings.paused, gated, dra=self.dra_facts(sim))
        out = step(facts, self.windows, self.settings, Clock(now, EPOCH_S + now), lambda s: self._plan(sim, s))
        self.last_plan, self.claims = out.plan, out.claims
        self.steer(sim, out)
        self._bind_claims(sim, out)
        if out.burst_until is not None:  # a burst still arriving: its wasteful pods wait until it has landed
            self.burst_at = out.burst_until - EPOCH_S + 0.01
        if not out.ready:
            self.batch_at = None if out.batch_due is None else out.batch_due + 0.01
        elif out.batch_due is not None:
            self.batch_at = out.batch_due + 0.01
        starts = [] if self.settings.dry_run else [a.node for a in out.starts]
        if gated:  # the gates this plan lifts, before the started nodes close
            gate.apply(sim, [(job_of(lift.pod), lift) for lift in out.lifts], self.lifted)
            if out.lifts:  # each lift patches a pending pod: a pod event, so the live controller looks again
                self.trigger_at = self.trigger_at or now + self.settings.debounce_s
        self._carry_out(sim, out.plan, starts, gated)
        if gated:
            gate.bind_ungated(sim, self.lifted)

    def _carry_out(self, sim: Sim, result: Plan, starts: list[str], gated: bool) -> None:
        """Start the changes `starts` names (their pods start when the change ends); without the gate, a pod
        the plan serves with a free instance as it is binds now, as kube-scheduler would bind it anyway."""
        cl = sim.cl
        changed_gpus = {(int(n.name[1:]), g.index) for n in result.nodes for g in n.gpus if g.changed}
        units: dict[int, list[tuple[int, str]]] = {}
        for a in result.assignments:
            assert a.gpu is not None, "the simulator's nodes always report per-GPU usage"
            units.setdefault(job_of(a.pod), []).append((cl.by_node[int(a.node[1:])][a.gpu], a.profile))
        by_node: dict[int, list[Placement]] = {}
        for ji, u in units.items():
            n = cl.gpus[u[0][0]].node
            if any((n, cl.gpus[gid].index) in changed_gpus for gid, _ in u):
                by_node.setdefault(n, []).append(Placement(ji, u))
            elif not gated and ji in sim.pending and all(cl.open(gid) and cl.gpus[gid].free[p] > 0 for gid, p in u):
                sim.start(Placement(ji, u))  # a free instance kube-scheduler would bind it to anyway
        changed = {n.name: n for n in result.nodes if n.changed}
        for name in starts:
            n = int(name[1:])
            layouts = {cl.by_node[n][g.index]: g.target.layout for g in changed[name].gpus if g.changed}
            mine = [pl for pl in by_node.get(n, []) if pl.job in sim.pending]
            sim.reconfigure(n, layouts, mine, self.window_s(sim, layouts))
            self.records.setdefault(n, NodeRecord(name))

    def _bind_claims(self, sim: Sim, out: Outcome) -> None:
        """The queue's claims (`core/queue_claims.py`), bound now: kube-scheduler binds a released pod within a
        second, on the instance the device plugin hands out (the lowest free one of the claim's GPU). `out.whole`
        is the snapshot with them bound, as the plan saw it."""
        cl = sim.cl
        for c in out.claims.claims:
            ji = job_of(c.pod)
            units = []
            for index, profile in c.units:
                assert index is not None, "the simulator's nodes always report per-GPU usage"
                units.append((cl.by_node[int(c.node[1:])][index], profile))
            if c.gated:
                self.lifted.add(ji)
            sim.start(Placement(ji, units))

    def window_s(self, sim: Sim, layouts: dict[int, CanonicalLayout]) -> float | None:
        """How long a change holds its node; None: a relabel, drawn by the simulator (`ReconfigTime`)."""
        return None


class InPlaceController(Controller):
    """`migctl-inplace`: every node opted into the in-place path (`migctl.io/actuation=in-place`).

    The protocol of the in-place path, as the controller and the agent run it: the controller taints the node
    (pods bound but not yet started: none here, the simulator starts a bound pod at once) and writes the target;
    the agent re-cuts each GPU all or nothing through NVML, instances in use staying where they sit
    (`migctl.core.inplace.reach.reach`), and flips the device plugin's config label; the controller removes the
    taint once allocatable lists the new instances. No pod lands on the node meanwhile: the window is the
    agent's NVML operations plus the re-advertise window (`InPlaceTime`). The controller's guard rails are the
    same settings as `migctl run` reads (`ControllerSettings`), decided by `controller/guards.py`. The queue gate
    is on (`controller.queue_gate`, recommended with the in-place path) unless the config sets it."""

    name = "migctl-inplace"
    in_place = True
    tracks_placements = True

    def __init__(
        self,
        planner: PlannerSettings | None = None,
        controller: ControllerSettings | None = None,
        timing: InPlaceTime | None = None,
    ) -> None:
        super().__init__(planner, controller)
        self.timing = timing or InPlaceTime()
        # the in-place configuration docs/queue-gate.md recommends; a config that sets queue_gate decides
        self.gate = self.settings.queue_gate if "queue_gate" in self.settings.model_fields_set else True

    def window_s(self, sim: Sim, layouts: dict[int, CanonicalLayout]) -> float | None:
        instances = sum(sim.cl.operations(gid, lay) for gid, lay in layouts.items())
        return self.timing.draw(instances, sim.rng)
