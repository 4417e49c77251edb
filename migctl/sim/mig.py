"""Discrete-event simulation of a MIG cluster under one layout policy (docs/simulation.md §2).

Jobs arrive, wait in a queue, get an instance (or `num_gpu` full instances on one node), run for their duration
and leave. At every event time (departures first, then ends of reconfigurations, then arrivals, then the
policy's own wake-ups) the policy looks at the cluster and acts through `Sim`:
* `start`: bind a pending job to free instances on GPUs that are open (no window);
* `create`: cut an instance on one GPU through NVML (HAMi-like agents): the GPU is closed for `create_s`;
* `reconfigure`: change the layouts of some GPUs of one node the way mig-manager does: the whole node is closed
  for a time drawn from `ReconfigTime`, and the jobs the change is for start when it ends.
The policies live in `policies/` (one file per competitor, one registry) and `controller.py` (migctl with the
controller's batching and guard rails, on either actuation path); `run.py` runs one of them over a trace.

Without departures (the FGD protocol on openb) the run is a packing check, not a timeline: `batch` arrivals form
one round, every change applies at once, and a re-cut only adds its drawn time to the pods' pending time.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from migctl.core.hardware.geometry import CanonicalLayout
from migctl.sim.names import MIG_POLICIES
from migctl.sim.state import Cluster, Placement
from migctl.sim.timing import NVML_CREATE_S, ReconfigTime
from migctl.sim.workloads import Job

DEPART, DONE, ARRIVE, WAKE = 0, 1, 2, 3


class Policy:
    """What a layout policy does at each event time. Subclasses override `step` and, if they need them, the hooks."""

    name = "policy"
    times_itself = False  # True: the policy appends its own planning times to `Sim.plan_s`
    tracks_placements = False  # True: the cluster knows where each instance sits (`Cluster(track=True)`)

    def step(self, sim: Sim) -> None:
        raise NotImplementedError

    def wake(self, sim: Sim) -> float | None:
        """When to be called again without an event (a batching window closing, a periodic resync). The run
        ends when no event is left, so a periodic wake-up must stop by itself."""
        return None

    def released(self, sim: Sim, job: int, units: Sequence[tuple[int, str]]) -> None:
        """A job left (its instances are already free)."""

    def finished(self, sim: Sim, node: int) -> None:
        """A node-wide reconfiguration ended (layouts applied, its jobs started)."""


@dataclass
class Sample:
    """Cluster figures after an event time (MiB unless stated)."""

    time: float
    arrived_mib: int
    placed_mib: int
    used_instance_mib: int
    internal_mib: int
    unusable_mib: int
    arrived_pods: int
    placed_pods: int
    running_mib: int = 0  # demand of the pods running now
    queued: int = 0  # pods arrived and not started (pending, or waiting for a reconfiguration)


@dataclass
class RunResult:
    policy: str
    total_mib: int
    gpus: int
    jobs: int
    placed: int
    placed_mib: int
    arrived_mib: int
    internal_mib: int  # at the end of arrivals: Σ(instance − demand) of running pods
    unusable_mib: int  # at the end of arrivals: memory the layouts leave unreachable
    reconfigs: int  # GPU layout changes
    evictions: int
    wait_s: list[float]
    plan_s: list[float]
    samples: list[Sample]
    departures: bool = False
    windows: int = 0  # node-wide reconfigurations (each pauses every GPU of its node)
    paused_s: float = 0.0  # node-seconds spent in them
    first_arrival: float = 0.0
    last_arrival: float = 0.0
    window_log: list[tuple[int, float, float]] = field(default_factory=list)  # (node, start, end)


@dataclass
class _Window:
    end: float
    layouts: dict[int, CanonicalLayout]
    placements: list[Placement]


@dataclass
class Sim:
    """The run's mutable state, and the only way a policy changes the cluster."""

    jobs: list[Job]
    cl: Cluster
    timing: ReconfigTime
    rng: np.random.Generator
    packing: bool  # no departures: rounds, changes apply at once
    create_s: float = NVML_CREATE_S
    pending: list[int] = field(default_factory=list)  # arrived, not started, not reserved; priority then arrival
    running: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    start_at: dict[int, float] = field(default_factory=dict)
    windows: dict[int, _Window] = field(default_factory=dict)  # node -> reconfiguration in progress
    window_log: list[tuple[int, float, float]] = field(default_factory=list)  # (node, start, end) of each
    arrivals_left: int = 0
    real_event: bool = True  # this step follows an arrival, departure or end of reconfiguration (not a wake-up)
    last_event: float = 0.0  # time of the latest such event
    reconfigs: int = 0
    plan_s: list[float] = field(default_factory=list)
    placed_mib: int = 0
    running_mib: int = 0
    internal: int = 0
    _events: list[tuple[float, int, int, int]] = field(default_factory=list)
    _seq: int = 0

    @property
    def now(self) -> float:
        return self.cl.now

    def demand(self, ji: int) -> int:
        j = self.jobs[ji]
        return (self.cl.shapes.full_mib if j.whole else j.vram_mib) * j.num_gpu

    def push(self, t: float, kind: int, payload: int) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, payload))

    def _started(self, pl: Placement, start: float) -> None:
        ji = pl.job
        self.start_at[ji] = start
        self.running[ji] = pl.gpus
        d = self.demand(ji)
        self.placed_mib += d
        self.running_mib += d
        per_unit = d // self.jobs[ji].num_gpu
        mem = self.cl.shapes.mem
        self.internal += sum(mem[p] - min(mem[p], per_unit) for _, p in pl.gpus)
        dur = self.jobs[ji].duration
        if not self.packing and dur is not None:
            self.push(start + dur, DEPART, ji)

    def _take(self, ji: int) -> None:
        self.pending.remove(ji)

    def start(self, pl: Placement) -> None:
        """Bind a pending job to free instances now (no layout change)."""
        assert not pl.layouts, "start() binds to existing instances; use create() or reconfigure()"
        assert self.packing or all(self.cl.open(gid) for gid, _ in pl.gpus), "placed inside a window"
        self._take(pl.job)
        self.cl.apply(pl)
        self._started(pl, self.jobs[pl.job].arrival if self.packing else self.now)

    def create(self, pl: Placement) -> None:
        """Cut the placement's instances on its GPUs through NVML (no component restart): only those GPUs close."""
        assert self.packing or all(self.cl.open(gid) for gid, _ in pl.gpus), "placed inside a window"
        self._take(pl.job)
        self.cl.apply(pl)
        self.reconfigs += len(pl.layouts)
        delay = self.create_s if pl.layouts else 0.0
        if not self.packing and pl.layouts:
            for gid in pl.layouts:
                self.cl.gpus[gid].ready_at = self.now + delay
            self.push(self.now + delay, WAKE, -1)  # the GPU opens again: look at the queue then
        self._started(pl, (self.jobs[pl.job].arrival if self.packing else self.now) + delay)

    def reconfigure(
        self,
        node: int,
        layouts: dict[int, CanonicalLayout],
        placements: Sequence[Placement],
        duration: float | None = None,
    ) -> float:
        """Relabel one node (mig-manager): no pod lands on any of its GPUs until the drawn time has passed; the
        placements (on its GPUs, old or new instances) start when it ends. Returns the drawn time. `duration`:
        the caller drew the window itself (the in-place path: NVML operations and the re-advertise window)."""
        assert layouts, "a reconfiguration changes at least one GPU"
        assert all(self.cl.gpus[g].node == node for g in layouts), "layouts of another node"
        assert all(self.cl.gpus[g].node == node for pl in placements for g, _ in pl.gpus), "pods on another node"
        dur = self.timing.draw(self.rng) if duration is None else duration
        self.reconfigs += len(layouts)
        ns = self.cl.nodes[node]
        ns.windows += 1
        ns.paused_s += dur
        for pl in placements:
            self._take(pl.job)
        if self.packing:
            for gid, lay in layouts.items():
                self.cl.relayout(gid, lay)
            for pl in placements:
                self.cl.apply(pl, relayout=False)
                self._started(pl, self.jobs[pl.job].arrival + dur)
            return dur
        assert self.cl.node_open(node) and node not in self.windows, f"node {node} is already reconfiguring"
        ns.ready_at = self.now + dur
        self.window_log.append((node, self.now, self.now + dur))
        self.windows[node] = _Window(self.now + dur, dict(layouts), list(placements))
        self.push(self.now + dur, DONE, node)
        return dur

    def _finish(self, node: int) -> None:
        """The window ends: each GPU takes its layout, all or nothing (a tracked GPU that can no longer reach
        it keeps its old layout, and the pods placed on it wait again); the others' pods start."""
        w = self.windows.pop(node)
        failed = set()
        for gid, lay in w.layouts.items():
            if self.cl.gpus[gid].spots is not None and self.cl.spots_after(gid, lay) is None:
                failed.add(gid)
                continue
            self.cl.relayout(gid, lay)
        for pl in w.placements:
            if failed & {gid for gid, _ in pl.gpus}:
                self.pending.append(pl.job)
                continue
            self.cl.apply(pl, relayout=False)
            self._started(pl, self.now)

    def _depart(self, ji: int) -> list[tuple[int, str]]:
        units = self.running.pop(ji, [])
        self.cl.release(units, ji)
        d = self.demand(ji)
        self.running_mib -= d
        per_unit = d // self.jobs[ji].num_gpu
        mem = self.cl.shapes.mem
        self.internal -= sum(mem[p] - min(mem[p], per_unit) for _, p in units)
        return units

    def waiting(self) -> int:
        return sum(len(w.placements) for w in self.windows.values())


__all__ = ["MIG_POLICIES", "Policy", "RunResult", "Sample", "Sim"]
