"""The DRA policies (docs/simulation.md, "DRA clusters"): NVIDIA's DynamicMIG alone, migctl steering it with
fences, and migctl's DRA path on static-MIG nodes.

* `dra-dynamicmig`: every node runs DynamicMIG; kube-scheduler's first fit (`sim/dra.py`) places each pod's claim
  the moment it fits, the driver makes the partition there and destroys it when the pod ends. No planner.
* `migctl-dra`: the same nodes and allocator, plus migctl's controller: every reconcile calls the live step
  (`reconcile.step.step`) with the DRA facts the adapter would read (pools, classes, pending claims, allocated
  devices, migctl's fences), and the fences of its `Outcome` are honoured by first fit `DraTime.fence_s` after
  they are written (the scheduler's informer). DynamicMIG is never actuated: the plan's "re-cuts" there are the
  placements its fences steer first fit to. Without departures (openb's packing rounds) fences apply at once and
  the round's claims are allocated after its reconcile, as if the claims waited for it.
* `migctl-dra-static`: static-MIG DRA nodes opted into migctl's agent (the `dra` path): the in-place machinery
  (`InPlaceController`) with the DRA path's window. DeviceTaintRules fence only the GPUs a change re-cuts, for the
  fence latency, the controller's settle time (`dra_fence_settle_s`) and the agent's NVML operations; then the
  kubelet plugin restarts (`DraTime.restart_s`), and while it is down no new pod of the node can start (kubelet
  cannot prepare a claim without it), so the restart holds the whole node for new pods. Running pods keep running.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Literal

from migctl.config import ControllerSettings
from migctl.core.dra.devices import DeviceId
from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.step import DraFacts, Outcome
from migctl.sim import gate
from migctl.sim.controller import Controller, InPlaceController, pod_name
from migctl.sim.dra import NAMESPACE, DraTime, DynamicNodes, node_name
from migctl.sim.mig import Policy, Sim
from migctl.sim.timing import InPlaceTime


def _tagged(snap: Snapshot, mode: Literal["static", "dynamic"]) -> Snapshot:
    """The snapshot with every node served by NVIDIA's DRA driver in `mode` (the adapter's `Node.dra`)."""
    return dataclasses.replace(snap, nodes=tuple(dataclasses.replace(n, dra=mode) for n in snap.nodes))


class DynamicMig(Policy):
    """NVIDIA's DynamicMIG with no planner: first fit on every free placement, in device-name order."""

    name = "dra-dynamicmig"
    tracks_placements = True

    def __init__(self) -> None:
        self._nodes: DynamicNodes | None = None

    def nodes(self, sim: Sim) -> DynamicNodes:
        if self._nodes is None:
            self._nodes = DynamicNodes(sim.cl)
        return self._nodes

    def step(self, sim: Sim) -> None:
        self.nodes(sim).allocate(sim)

    def released(self, sim: Sim, job: int, units: Sequence[tuple[int, str]]) -> None:
        self.nodes(sim).destroy(units)


class DraController(Controller):
    """`migctl-dra`: migctl's controller over DynamicMIG nodes; it steers first fit with fences, never actuates."""

    name = "migctl-dra"
    in_place = True  # the snapshot gives every partition where it sits (the adapter reads it from the names)
    tracks_placements = True

    def __init__(
        self,
        planner: PlannerSettings | None = None,
        controller: ControllerSettings | None = None,
        timing: DraTime | None = None,
    ) -> None:
        super().__init__(planner, controller)
        self.timing = timing or DraTime()
        self._nodes: DynamicNodes | None = None
        self.written: dict[str, tuple[str, ...]] = {}  # node -> devices migctl's DeviceTaintRules fence
        self.honoured: dict[str, tuple[str, ...]] = {}  # node -> devices first fit skips now
        self.due: list[tuple[float, str, tuple[str, ...]]] = []  # fence changes the scheduler has not seen yet
        self.fences_written = 0  # DeviceTaintRules created over the run
        self.most_fences = 0  # the most one node held at once
        self.capped = 0  # reconciles where the cap stopped a node's fences

    def nodes(self, sim: Sim) -> DynamicNodes:
        if self._nodes is None:
            self._nodes = DynamicNodes(sim.cl)
        return self._nodes

    def wake(self, sim: Sim) -> float | None:
        times = [t for t, _, _ in self.due]
        base = super().wake(sim)
        if base is not None:
            times.append(base)
        return min(times) if times else None

    def _eligible(self, sim: Sim) -> Callable[[int], bool]:
        """Pods kube-scheduler may take: every pending one, or with the queue gate those it no longer holds."""
        return lambda ji: not (self.gate and gate.held(sim, ji, self.lifted))

    def step(self, sim: Sim) -> None:
        now = sim.now
        for _, node, names in [d for d in self.due if d[0] <= now]:
            self.honoured[node] = names
        self.due = [d for d in self.due if d[0] > now]
        if not sim.packing:  # the scheduler is first: it allocates the moment a claim fits
            self.nodes(sim).allocate(sim, self.honoured, self._eligible(sim))
        super().step(sim)  # binding free instances finds none on DynamicMIG nodes; then the reconcile when due
        self.nodes(sim).allocate(sim, self.honoured, self._eligible(sim))  # lifted pods; packing: after its fences

    def _reconcile(self, sim: Sim, guarded: bool) -> None:
        super()._reconcile(sim, True)  # packing rounds too: the fences come out of the live step only

    def released(self, sim: Sim, job: int, units: Sequence[tuple[int, str]]) -> None:
        self.nodes(sim).destroy(units)

    def snapshot(self, sim: Sim, lifted: set[int] | None) -> Snapshot:
        return _tagged(super().snapshot(sim, lifted), "dynamic")

    def facts(self, sim: Sim) -> dict[str, NodeFacts]:
        """DynamicMIG nodes, not opted into migctl's agent (the path refuses that: the driver destroys partitions
        it did not create)."""
        return {n: NodeFacts(n, {}, {}, known=f.known, dra="dynamic") for n, f in super().facts(sim).items()}

    def dra_facts(self, sim: Sim) -> DraFacts:
        nodes = self.nodes(sim)
        queue = {}
        for ji in sim.pending:
            spec = nodes.claim(sim, ji)
            if spec is not None:
                queue[f"{NAMESPACE}/{pod_name(ji)}"] = (spec,)
        allocated: frozenset[DeviceId] = frozenset().union(*(nodes.allocated(n) for n in range(len(sim.cl.by_node))))
        cap = self.settings.dra_max_fences_per_node
        return DraFacts(nodes.pools, nodes.classes, queue, allocated, dict(self.written), cap)

    def steer(self, sim: Sim, out: Outcome) -> None:
        """Write the fences the step says (a node it no longer steers keeps none); first fit honours them
        `fence_s` later (at once in packing rounds)."""
        wanted = {node: tuple(sorted(fp.fenced)) for node, fp in out.fences.items()}
        self.capped += sum(1 for fp in out.fences.values() if fp.capped)
        for node in sorted(set(wanted) | set(self.written)):
            names = wanted.get(node, ())
            if names == self.written.get(node, ()):
                continue
            self.fences_written += len(set(names) - set(self.written.get(node, ())))
            self.most_fences = max(self.most_fences, len(names))
            self.written[node] = names
            if sim.packing or self.timing.fence_s == 0:
                self.honoured[node] = names
            else:
                self.due.append((sim.now + self.timing.fence_s, node, names))


class DraStaticController(InPlaceController):
    """`migctl-dra-static`: the in-place machinery on static-MIG DRA nodes, with the DRA path's per-GPU fence and
    the plugin restart as its window (module docstring)."""

    name = "migctl-dra-static"

    def __init__(
        self,
        planner: PlannerSettings | None = None,
        controller: ControllerSettings | None = None,
        timing: InPlaceTime | None = None,
        dra: DraTime | None = None,
    ) -> None:
        super().__init__(planner, controller, timing)
        self.dra = dra or DraTime()
        self._fenced_s: dict[int, float] = {}  # node -> seconds only its changed GPUs are held, for the change now

    def snapshot(self, sim: Sim, lifted: set[int] | None) -> Snapshot:
        """Tagged static; a fenced GPU's free devices are not free: no claim may take them (the adapter leaves
        tainted devices out of the free ones; the node, in flight, is frozen for the planner anyway)."""
        snap = _tagged(super().snapshot(sim, lifted), "static")
        cl, nodes = sim.cl, []
        for n, node in enumerate(snap.nodes):
            closed = {cl.gpus[gid].index: cl.gpus[gid] for gid in cl.by_node[n] if not cl.open(gid)}
            if not closed or not cl.node_open(n):
                nodes.append(node)
                continue
            free = dict(node.mig_free)
            for g in closed.values():
                for p, c in g.free.items():
                    free[p] -= c
            gpus = tuple(
                dataclasses.replace(g, used=dict(g.config.layout)) if g.index in closed else g for g in node.gpus
            )
            nodes.append(dataclasses.replace(node, gpus=gpus, mig_free={p: c for p, c in free.items() if c > 0}))
        return dataclasses.replace(snap, nodes=tuple(nodes))

    def facts(self, sim: Sim) -> dict[str, NodeFacts]:
        return {n: dataclasses.replace(f, dra="static") for n, f in super().facts(sim).items()}

    def window_s(self, sim: Sim, layouts: dict[int, CanonicalLayout]) -> float | None:
        """Fence latency + settle time + the agent's NVML operations (the changed GPUs only), then the restart."""
        instances = sum(sim.cl.operations(gid, lay) for gid, lay in layouts.items())
        nvml = dataclasses.replace(self.timing, readvertise_s=0.0).draw(instances, sim.rng)
        fenced = self.dra.fence_s + self.settings.dra_fence_settle_s + nvml
        self._fenced_s[sim.cl.gpus[next(iter(layouts))].node] = fenced
        return fenced + self.dra.restart(sim.rng)

    def _carry_out(self, sim: Sim, result: Plan, starts: list[str], gated: bool) -> None:
        before = set(sim.windows)
        super()._carry_out(sim, result, starts, gated)
        for n in sorted(set(sim.windows) - before):
            fenced = self._fenced_s.pop(n)
            sim.cl.narrow(n, sorted(sim.windows[n].layouts), sim.now + fenced)
            sim.cl.nodes[n].paused_s -= fenced  # the node as a whole is held only while its plugin restarts
        self._fenced_s.clear()  # packing rounds apply at once: nothing to narrow


__all__ = ["DraController", "DraStaticController", "DynamicMig", "node_name"]
