"""The queue gate: which of the pods that carry migctl's scheduling gate kube-scheduler may bind now.

Why: kube-scheduler binds a pending pod to any free instance of its profile within a second, in its own queue
order, before a reconcile can look. On a busy node that decides who gets every instance that frees, and an
older pod that needs a re-cut of it waits behind the younger ones that fit as it is (docs/queue-gate.md, with
the figures). With the gate (`spec.schedulingGates`, added by migctl's webhook) the plan decides: a gated pod is
released once the plan serves it and what serves it is there, pinned to the node the plan chose.

The rule, one place for the live controller and the simulator:
* a pod the plan places on instances that exist now, on GPUs the plan leaves as they are: released, pinned;
* a pod the plan places on a node whose change starts now: released, pinned; migctl's taint keeps it off the
  node until the change has made its instance;
* any other gated pod that an instance the plan leaves unused serves: released without a pin, as kube-scheduler
  would bind it ungated (the plan left it out, the burst rule held it out of planning, or the change the plan
  serves it with does not start now: guard rails, the batching window);
* a pod gated longer than `max_hold_s` (from its creation): released without a pin, whatever the plan says,
  so a plan that never serves a pod (or a bug in this rule) holds nobody for long;
* every other gated pod stays: nothing serves it yet, or the change that will has not started.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.placement import static_misfit
from migctl.core.model.plan import Plan

SERVED = "its instance is free"
STARTED = "its node's change starts"
LEFTOVER = "an instance the plan leaves unused serves it"
OVERDUE = "held longer than queue_gate_max_hold_s"


@dataclass(frozen=True)
class Lift:
    """Release `pod` (`namespace/name`); `node`: pin it there (None: no pin); `reason`: one of the module's."""

    pod: str
    node: str | None
    reason: str


def gated(pods: Iterable[Pod]) -> list[Pod]:
    """The pending pods that carry the gate, in kube-scheduler's queue order (priority, then creation)."""
    return sorted((p for p in pods if p.gated and p.pending), key=lambda p: (-p.priority, p.created, p.key))


def lifts(snapshot: Snapshot, plan: Plan, starting: Collection[str], now_s: float, max_hold_s: float) -> list[Lift]:
    """The gated pods of `snapshot` to release now (module docstring). `plan` was made from this snapshot, or from
    it less the pods the burst rule holds; `starting`: the nodes whose change starts with this plan."""
    changed: set[tuple[str, int | None]] = {(n.name, g.index) for n in plan.nodes for g in n.gpus if g.changed}
    units: dict[str, list[tuple[str, int | None, str]]] = {}
    for a in plan.assignments:
        units.setdefault(a.pod, []).append((a.node, a.gpu, a.profile))
    left = _unused(snapshot, plan, changed, starting)
    out = []
    for pod in gated(snapshot.pods):
        mine = units.get(pod.key)
        if mine:
            node = mine[0][0]
            if all((n, g) not in changed for n, g, _ in mine):
                out.append(Lift(pod.key, node, SERVED))
                continue
            if node in starting:
                out.append(Lift(pod.key, node, STARTED))
                continue
        if _take(left, snapshot, pod) is not None:
            out.append(Lift(pod.key, None, LEFTOVER))
            continue
        created = pod.created_s
        if created is None or now_s - created >= max_hold_s:
            out.append(Lift(pod.key, None, OVERDUE))
    return out


def _unused(
    snapshot: Snapshot, plan: Plan, changed: set[tuple[str, int | None]], starting: Collection[str]
) -> dict[str, Counter[str]]:
    """Per node, the free instances by profile that the plan neither hands out nor re-cuts (none on a node whose
    change starts: it is tainted)."""
    left: dict[str, Counter[str]] = {}
    for node in snapshot.nodes:
        if node.name in starting:
            continue
        free = Counter({p: c for p, c in node.mig_free.items() if c > 0})
        for gpu in node.gpus:
            if (node.name, gpu.index) in changed:
                free -= Counter(dict(gpu.config.layout)) - Counter(dict(gpu.used or {}))
        left[node.name] = free
    for a in plan.assignments:
        if a.node in left and (a.node, a.gpu) not in changed:
            left[a.node][a.profile] -= 1
    return left


def _take(left: dict[str, Counter[str]], snapshot: Snapshot, pod: Pod) -> str | None:
    """The first node where `pod` passes the scheduler's static rules and the unused instances hold all it asks
    for (its profile demands; None for any other demand, which the gate does not hold): taken from `left`."""
    want: Counter[str] = Counter()
    for d in pod.gpu:
        if d.kind != "profile" or not d.profile:
            return None
        want[d.profile] += d.count
    if not want:
        return None
    for node in snapshot.nodes:
        free = left.get(node.name)
        if free is None or any(free[p] < c for p, c in want.items()) or static_misfit(pod, node) is not None:
            continue
        free.subtract(want)
        return node.name
    return None


def release_all(pods: Iterable[Pod], reason: str) -> list[Lift]:
    """Every gated pod released without a pin: migctl is paused or only reports (dry run), and holds nobody."""
    return [Lift(p.key, None, reason) for p in gated(pods)]
