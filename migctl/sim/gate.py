"""The queue gate in the simulator (`controller.queue_gate`; the rule is `migctl.core.queue_gate`'s).

A gated pod is one the webhook would gate: it asks for MIG profiles by name. kube-scheduler binds a gated pod
only once the controller has lifted its gate, at a reconcile. A lifted pod binds as kube-scheduler and the
device plugin would: a pinned one on its node, on the first GPU there with a free instance of its profile (the
device plugin, not migctl, picks the instance: the first GPU stands in for its choice), one whose node's change
starts when the change ends (it is among the change's placements), any other wherever `bind_one` finds room.
"""

from __future__ import annotations

from migctl.core.queue_gate import STARTED, Lift
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


def apply(sim: Sim, lifts: list[tuple[int, Lift]], lifted: set[int]) -> None:
    """Lift the gates of `lifts` (job, lift), and bind the pinned single-GPU pods on their node now."""
    cl = sim.cl
    for ji, lift in lifts:
        lifted.add(ji)
        p = cl.shapes.smallest(sim.jobs[ji])
        if lift.why == STARTED or lift.node is None or ji not in sim.pending or p is None or multi_gpu(sim.jobs[ji]):
            continue
        ids = cl.by_node[int(lift.node[1:])]
        gid = next((g for g in ids if cl.gpus[g].free[p] > 0 and cl.open(g)), None)
        if gid is not None:
            sim.start(Placement(ji, [(gid, p)]))
