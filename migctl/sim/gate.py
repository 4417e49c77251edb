"""The queue gate in the simulator (`controller.queue_gate`; the rule is `migctl.core.queue_gate`'s).

A gated pod is one the webhook would gate: it asks for a MIG profile by name. kube-scheduler binds a gated pod
only once the controller has lifted its gate, at a reconcile. A lifted pod binds as kube-scheduler and the
device plugin would: on the node the lift pins it to, the first GPU there with a free instance of its profile
(the device plugin, not migctl, picks the instance), or without a pin wherever `bind_one` finds one.
"""

from __future__ import annotations

from migctl.core.queue_gate import SERVED, STARTED, Lift
from migctl.sim.mig import Sim
from migctl.sim.scheduler import bind_one, multi_gpu
from migctl.sim.state import Placement


def held(sim: Sim, ji: int, lifted: set[int]) -> bool:
    """Whether job `ji` carries the gate now."""
    return ji not in lifted and sim.cl.shapes.smallest(sim.jobs[ji]) is not None


def bind_ungated(sim: Sim, lifted: set[int]) -> None:
    """`scheduler.bind_free` for the pods that carry no gate."""
    for ji in list(sim.pending):
        if not held(sim, ji, lifted):
            bind_one(sim, ji)


def apply(sim: Sim, lifts: list[tuple[int, Lift]], units: dict[int, list[tuple[int, str]]], lifted: set[int]) -> None:
    """Lift the gates: a pod served by free instances binds on its pinned node now; one whose node's change
    starts binds when it ends (it is among the change's placements); the others bind where kube-scheduler finds
    an instance (`bind_ungated`)."""
    cl = sim.cl
    for ji, lift in lifts:
        lifted.add(ji)
        if lift.reason == STARTED or ji not in sim.pending:
            continue
        u = units.get(ji)
        if lift.node is None:
            continue
        if u is not None and len(u) > 1:  # several units: the planner's instances, all on the pinned node
            if all(cl.open(gid) and cl.gpus[gid].free[p] > 0 for gid, p in u):
                sim.start(Placement(ji, u))
            continue
        if multi_gpu(sim.jobs[ji]):
            continue
        p = cl.shapes.smallest(sim.jobs[ji])
        if p is None:
            continue
        node = int(lift.node[1:])
        gid = next((g for g in cl.by_node[node] if cl.gpus[g].free[p] > 0 and cl.open(g)), None)
        if gid is not None:
            sim.start(Placement(ji, [(gid, p)]))
