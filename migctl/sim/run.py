"""`simulate`: one policy over one trace (docs/simulation.md §2); the event loop over `Sim` (`mig.py`).

Kept apart from `mig.py` so that the policies (which import `Sim` and `Policy`) and the registry that names
them (`migctl.sim.policies`) form no import cycle."""

from __future__ import annotations

import heapq
import time
from collections.abc import Sequence

import numpy as np

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.core.model.settings import PlannerSettings
from migctl.sim.dra import DraTime
from migctl.sim.mig import ARRIVE, DEPART, DONE, WAKE, Policy, RunResult, Sample, Sim
from migctl.sim.policies import make_policy
from migctl.sim.state import Cluster
from migctl.sim.timing import NVML_CREATE_S, InPlaceTime, ReconfigTime
from migctl.sim.workloads import Job


def simulate(
    jobs: Sequence[Job],
    node_gpus: Sequence[int],
    model: GpuModel,
    policy: str | Policy,
    *,
    reconfig: ReconfigTime | None = None,
    reconfig_s: float | None = None,
    batch: int = 32,
    departures: bool = True,
    drop_unplaced: bool = False,
    seed: int = 0,
    create_s: float = NVML_CREATE_S,
    initial: CanonicalLayout | None = None,
    planner: PlannerSettings | None = None,
    controller: ControllerSettings | None = None,
    in_place: InPlaceTime | None = None,
    dra: DraTime | None = None,
) -> RunResult:
    """Run one policy over `jobs`. `reconfig_s` is shorthand for a fixed reconfiguration time; `initial` is the
    layout every GPU starts with when `policy` is a Policy object (a name brings its own);
    `planner` and `controller` are the settings a named migctl policy runs with (defaults when None); `in_place`
    the timing of `migctl-inplace`'s changes (`InPlaceTime`: NVML operations, re-advertise window); `dra` the DRA
    policies' fence latency and plugin restart (`DraTime`)."""
    if batch < 1:  # without departures each round takes up to `batch` arrivals: 0 would never take one
        raise ValueError(f"batch must be >= 1 (arrivals per planning round), got {batch}")
    timing = reconfig or (ReconfigTime(reconfig_s, 0.0) if reconfig_s is not None else ReconfigTime())
    jobs = sorted(jobs, key=lambda j: j.arrival)  # job id = arrival rank (pod names and tie-breaks follow it)
    if isinstance(policy, str):
        cl, pol = make_policy(
            policy, jobs, node_gpus, model, planner, controller, seed=seed, in_place=in_place, dra=dra
        )
    else:
        cl, pol = Cluster(node_gpus, model, initial, track=policy.tracks_placements), policy
    sim = Sim(jobs, cl, timing, np.random.default_rng(seed), not departures, create_s)
    shapes = cl.shapes
    for i, j in enumerate(jobs):
        sim.push(j.arrival, ARRIVE, i)
    sim.arrivals_left = len(jobs)
    arrived_mib = arrived_pods = 0
    samples: list[Sample] = []
    end_internal = end_unusable = -1
    wakes: set[float] = set()
    ev = sim._events
    while ev:
        now = ev[0][0]
        cl.now = now
        count = 0
        real = False
        while ev and (ev[0][0] == now if departures else count < batch):
            _, kind, _, x = heapq.heappop(ev)
            real |= kind != WAKE
            if kind == DEPART:
                pol.released(sim, x, sim._depart(x))
            elif kind == DONE:
                sim._finish(x)
                pol.finished(sim, x)
            elif kind == ARRIVE:
                sim.pending.append(x)
                arrived_mib += sim.demand(x)
                arrived_pods += 1
                sim.arrivals_left -= 1
                count += 1
            else:
                wakes.discard(now)
        sim.real_event = real
        if real:
            sim.last_event = now
        sim.pending.sort(key=lambda i: (-jobs[i].priority, i))
        timed = bool(sim.pending) and not pol.times_itself
        t0 = time.perf_counter()
        pol.step(sim)
        if timed:
            sim.plan_s.append(time.perf_counter() - t0)
        if drop_unplaced:
            sim.pending.clear()
        w = pol.wake(sim)
        if w is not None and w > now and w not in wakes and not sim.packing:
            wakes.add(w)
            sim.push(w, WAKE, -1)
        unusable = sum(shapes.unusable(canonical(g.layout)) for g in cl.gpus if g.used.total())
        used_mib = sum(cl.instance_mib(g.used) for g in cl.gpus)
        samples.append(
            Sample(
                now,
                arrived_mib,
                sim.placed_mib,
                used_mib,
                sim.internal,
                unusable,
                arrived_pods,
                len(sim.start_at),
                sim.running_mib,
                len(sim.pending) + sim.waiting(),
            )
        )
        if sim.arrivals_left == 0 and end_internal < 0:
            end_internal, end_unusable = sim.internal, unusable
    wait = [sim.start_at[i] - jobs[i].arrival for i in sorted(sim.start_at)]
    return RunResult(
        pol.name,
        cl.total_mib,
        len(cl.gpus),
        len(jobs),
        len(sim.start_at),
        sim.placed_mib,
        arrived_mib,
        max(end_internal, 0),
        max(end_unusable, 0),
        sim.reconfigs,
        0,
        wait,
        sim.plan_s,
        samples,
        departures,
        sum(n.windows for n in cl.nodes),
        sum(n.paused_s for n in cl.nodes),
        jobs[0].arrival if jobs else 0.0,
        jobs[-1].arrival if jobs else 0.0,
        sim.window_log,
    )
