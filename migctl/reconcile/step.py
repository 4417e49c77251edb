"""One reconcile, as one pure function: the live controller and the simulator both call `step`, so the order of
its decisions is written once and a test holds the two to it (tests/unit/reconcile/test_parity.py).

The order, each on the result of the one before:
  1. refusals and guard rails freeze nodes for the planner (`decide.frozen_nodes`, `freeze`);
  2. with the queue gate on and migctl acting, the queue claims what free instances serve as they are, and the
     plan is made with those pods bound (`core/queue_claims.py`);
  3. the burst rule leaves out the wasteful pods of a burst still arriving (`decide.hold_burst`);
  4. the planner plans;
  5. each path's batching window says whether its changes may start (`decide.Windows`), and `decide.decide`
     turns the plan into starts and holds; a start that could destroy an instance a claimed pod may get waits
     a reconcile (`queue_claims.collisions`);
  6. the queue gate's lifts (`core/queue_gate.py`): everyone when migctl does not act (paused, dry run), else
     what the rule releases, plus the gated pods the snapshot does not hold;
  7. on DynamicMIG nodes, the fences that make the DRA allocator's first fit take the plan's placements
     (`core/dra/fences.py`): what the plan reserves there, the pending claims in the scheduler's queue order.
What the executors do with the `Outcome` (workers and Events live, the model's state in the simulator) is theirs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from migctl.config import ControllerSettings
from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec
from migctl.core.dra.devices import DeviceId, Mode, NodePool
from migctl.core.dra.fences import FencePlan, plan_fences
from migctl.core.dra.reservations import reservations
from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.queue_claims import NONE, Claims, claim, claimed, collisions, queue_order
from migctl.core.queue_gate import UNPLANNED, Lift, lifts, release_all
from migctl.reconcile.decide import Action, Start, Windows, decide, freeze, frozen_nodes, hold_burst, routes
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.paths import STOCK, Path
from migctl.reconcile.reasons import Reason


@dataclass(frozen=True)
class Clock:
    """`now`: the controller's clock (guard rails, batching windows, a target's start); `wall`: seconds since the
    epoch as pods' creation times count them (the burst rule, the queue gate's longest hold). Live they are one
    reading; the simulator keeps trace time and maps it onto a fixed epoch."""

    now: float
    wall: float

    @staticmethod
    def at(t: float) -> Clock:
        return Clock(t, t)


@dataclass(frozen=True)
class Facts:
    """What one reconcile reads. `snapshot`: the adapter's reading (pods that in-flight changes are for already
    left out); `in_flight`: nodes a worker is changing now; `gate`: the queue gate holds pods for this executor;
    `strays`: gated pods the snapshot does not hold (opted out, unreadable): released, since no plan serves them."""

    snapshot: Snapshot
    nodes: Mapping[str, NodeFacts]
    in_flight: frozenset[str] = frozenset()
    paused: bool = False
    gate: bool = False
    protected_pods: frozenset[str] = frozenset()
    evictions_last_hour: int = 0
    strays: tuple[str, ...] = ()
    dra: DraFacts | None = None


@dataclass(frozen=True)
class DraFacts:
    """What the fences on DynamicMIG nodes read beyond the snapshot. `queue`: each pending pod's claims still to
    allocate, by pod key; `fences`: per node, the devices migctl's DeviceTaintRules fence now; `cap`: the most
    fences one node may hold (`controller.dra_max_fences_per_node`)."""

    pools: Mapping[str, NodePool] = field(default_factory=dict)
    classes: Mapping[str, DeviceClassSpec] = field(default_factory=dict)
    queue: Mapping[str, tuple[ClaimSpec, ...]] = field(default_factory=dict)
    allocated: frozenset[DeviceId] = frozenset()
    fences: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    cap: int = 32


def plan_id(plan: Plan) -> str:
    """A digest of the plan, not a clock: the same plan has the same id on every replica and every restart."""
    return "p" + hashlib.sha256(json.dumps(plan.to_dict(), sort_keys=True).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class Outcome:
    """What a reconcile decided. `whole`: the snapshot before the burst rule, with the claims bound (the queue
    gate's rule needs every gated pod); `planned`: what the planner saw; `actions`: starts and holds, only for
    the paths whose window closed (`ready`); `burst_until` (wall clock) and `batch_due` (controller clock): when
    to look again; `report_unplaced`: the plan is final enough to tell the pods it leaves out."""

    plan: Plan
    plan_id: str
    planned: Snapshot
    whole: Snapshot
    claims: Claims
    refused: Mapping[str, Reason]
    actions: tuple[Action, ...] = ()
    lifts: tuple[Lift, ...] = ()
    ready: frozenset[str] = frozenset()
    burst_until: float | None = None
    batch_due: float | None = None
    report_unplaced: bool = False
    frozen: Mapping[str, str] = field(default_factory=dict)
    fences: Mapping[str, FencePlan] = field(default_factory=dict)  # DynamicMIG node -> its fences now

    @property
    def starts(self) -> tuple[Start, ...]:
        return tuple(a for a in self.actions if isinstance(a, Start))


def step(
    facts: Facts,
    windows: Windows,
    settings: ControllerSettings,
    clock: Clock,
    planner: Callable[[Snapshot], Plan],
) -> Outcome:
    """One reconcile (module docstring). `windows` is the executor's state across reconciles; `planner` is the
    pure planner (`core.planner.plan` with the executor's settings, or a memo of it)."""
    acting = not (facts.paused or settings.dry_run)
    nodes = list(facts.nodes.values())
    refused, frozen = frozen_nodes(nodes, clock.now, settings, facts.in_flight)
    whole = freeze(facts.snapshot, frozen)
    claims = claim(whole) if facts.gate and acting else NONE
    whole = claimed(whole, claims)
    planned, burst_until = hold_burst(whole, clock.wall)
    plan = planner(planned)

    demand = frozenset(p.key for p in planned.pending)
    route = routes(nodes, settings)
    ready, batch_due, report = windows.observe(plan, route, demand, clock.now)
    pid = plan_id(plan) if ready else ""
    actions: list[Action] = []
    if ready:
        actions = [
            a
            for a in decide(
                plan,
                pid,
                planned,
                facts.nodes,
                settings,
                clock.now,
                in_flight=facts.in_flight,
                evictions_last_hour=facts.evictions_last_hour,
                paused=facts.paused,
                protected_pods=facts.protected_pods,
            )
            if a.path.name in ready
        ]
        if claims.claims:  # a change that could destroy the instance a claimed pod gets waits for it to be bound
            wait = collisions(whole, plan, claims)
            actions = [a for a in actions if not (isinstance(a, Start) and a.node in wait)]

    lifted: list[Lift] = []
    if facts.strays or any(p.gated for p in facts.snapshot.pods):
        if not acting:
            lifted = release_all(whole.pods)
        else:
            starting = {a.node for a in actions if isinstance(a, Start)}
            lifted = lifts(whole, plan, starting, clock.wall, settings.queue_gate_max_hold_s, claims)
        lifted += [Lift(key, None, UNPLANNED) for key in facts.strays]
    fences = steer(facts, plan, planned, route) if facts.dra is not None and acting else {}
    return Outcome(
        plan=plan,
        plan_id=pid,
        planned=planned,
        whole=whole,
        claims=claims,
        refused=refused,
        actions=tuple(actions),
        lifts=tuple(lifted),
        ready=ready,
        burst_until=burst_until,
        batch_due=batch_due,
        report_unplaced=report,
        frozen=frozen,
        fences=fences,
    )


def steer(facts: Facts, plan: Plan, planned: Snapshot, route: Mapping[str, Path]) -> dict[str, FencePlan]:
    """Per DynamicMIG node, the fences that make first fit take the plan's placements; a node whose plan reserves
    nothing keeps no fence (its existing ones are lifted)."""
    dra = facts.dra
    assert dra is not None
    by_name = {n.name: n for n in planned.nodes}
    plans = {n.name: n for n in plan.nodes}
    queue = [dra.queue[p.key] for p in queue_order(planned.pending) if p.key in dra.queue]
    out: dict[str, FencePlan] = {}
    for name, pool in sorted(dra.pools.items()):
        node = by_name.get(name)
        if node is None or not route.get(name, STOCK).steers or pool.mode is not Mode.DYNAMIC:
            continue
        node_plan = plans.get(name)
        wanted = reservations(node, node_plan) if node_plan is not None else ()
        out[name] = plan_fences(
            pool, queue, dra.classes, wanted, allocated=dra.allocated, fences=dra.fences.get(name, ()), cap=dra.cap
        )
    return out
