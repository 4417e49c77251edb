"""`python -m bench.fifo_gate simulate ...`: `migctl simulate` with kube-scheduler binding in queue order across
profiles, as a queue gate would make it. An analysis, not a product mechanism: migctl has no such gate yet
(docs/simulation.md §4.3).

Why: on a node the queue keeps full, a `1g.10gb` that frees is bound to the next small pod within a second,
so an older pod that needs a re-cut of that instance (a `1g.20gb` beside it) waits until the queue of small
pods drains. A gate that migctl's webhook adds and its controller lifts (Kubernetes' `spec.schedulingGates`)
would let migctl hold younger pods back. This script measures what that would give before anyone builds it.

The rule, replacing `migctl.sim.scheduler.bind_free` for every migctl policy of the run: pending pods in queue
order (priority, then arrival); a pod binds to a free instance of its profile on an open GPU that no older pod
holds; a pod that finds none holds the first GPU with free instances whose free part a re-cut could turn into
its profile without moving an instance in use (`scheduler.relayout`, `free-slices`), so younger pods do not
take that GPU's free instances and the next reconcile can re-cut it. Approximations: the gate is lifted at the
event that frees the instance (the live controller would lift it `debounce_s` later), and no gate is ever
left unlifted.

    MIGCTL_SIM_DATA=../shared/data python -m bench.fifo_gate simulate --workload miso --cluster 1x4 \\
        --model h100-80gb --seeds 42-44 --policies migctl-inplace
"""

from __future__ import annotations

import sys

import migctl.sim.controller as sim_controller
from migctl.sim.mig import Sim
from migctl.sim.scheduler import bind_one, multi_gpu, relayout


def bind_in_order(sim: Sim) -> None:
    """`bind_free` with the queue order kept across profiles (module docstring)."""
    cl = sim.cl
    held: set[int] = set()
    for ji in list(sim.pending):
        if bind_one(sim, ji, held) or multi_gpu(sim.jobs[ji]):
            continue
        p = cl.shapes.smallest(sim.jobs[ji])
        if p is None:
            continue
        for g, s in enumerate(cl.gpus):
            if g not in held and s.free.total() > 0 and relayout(cl, g, p, "free-slices") is not None:
                held.add(g)
                break


def main() -> None:
    sim_controller.bind_free = bind_in_order  # type: ignore[assignment]
    from migctl.cli import main as cli

    sys.argv = ["migctl", *sys.argv[1:]]
    cli()


if __name__ == "__main__":
    main()
