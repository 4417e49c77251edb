"""The queue gate: which of the pods that carry migctl's scheduling gate kube-scheduler may bind now.

Why: kube-scheduler binds a pending pod to a free instance of its profile within a second of the instance
freeing, before a reconcile can look. On a busy node that decides the layout: the instance that an older pod
needs re-cut is taken by the next pod that fits it as it is, and the plan never sees it free (docs/queue-gate.md,
with the figures). With the gate (`spec.schedulingGates`, added by migctl's webhook) nothing binds before a
reconcile has looked: there the queue first claims what its pods can take as it is (`core/queue_claims.py`),
the plan re-cuts what is left and starts its changes, and only then are the rest released onto what is free.

Who is released is kube-scheduler's own order, not a second objective: the plan decides layouts, the queue
decides who gets what exists. At each reconcile:
* a pod the plan serves with a change on a node whose change starts now: released, pinned to that node; migctl's
  taint keeps it off until the change has made its instance (`STARTED`);
* a pod the queue claimed before the plan (`core/queue_claims.py`): released, pinned to its node (`CLAIMED`);
* then every pending pod that asks only for MIG profiles, gated or not, in kube-scheduler's queue order
  (priority, then creation), takes free instances of its profiles on the first node it fits (the scheduler's
  static rules: selectors, affinity, taints; its CPU, memory and pod count), leaving out the GPUs the plan re-cuts
  and the nodes whose change starts: a gated pod that finds them is released, pinned to that node (`FREE`); an
  ungated one (already released, or never gated) only takes them first, as kube-scheduler will bind it;
* a gated pod held longer than `max_hold_s` (from its creation) is released without a pin, whatever the plan
  says (`OVERDUE`): no plan holds a pod for longer, and a bug here holds nobody for long;
* every other gated pod stays: nothing it asks for is free.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from enum import StrEnum

from migctl.core.model.cluster import Pod, Resources, Snapshot
from migctl.core.model.plan import Plan
from migctl.core.queue_claims import NONE, Claims, first_node, queue_order, wants


class Why(StrEnum):
    """Why a gate is lifted: the code (a metric label, what tests and behaviour read); `TEXT` says it in words."""

    CLAIMED = "claimed"
    FREE = "free"
    STARTED = "started"
    OVERDUE = "overdue"
    RELEASED = "released"  # migctl is paused or in dry run
    UNPLANNED = "unplanned"  # the snapshot does not hold the pod


CLAIMED, FREE, STARTED, OVERDUE, RELEASED, UNPLANNED = Why  # the rule's own names for them
TEXT = {
    CLAIMED: "an instance of its profile is free, claimed before the plan",
    FREE: "an instance of its profile is free",
    STARTED: "its node's change starts",
    OVERDUE: "held longer than queue_gate_max_hold_s",
    RELEASED: "migctl is paused or in dry run: it holds nobody",
    UNPLANNED: "migctl does not plan it (opted out, or its spec cannot be read)",
}

GpuKey = tuple[str, int | None]  # (node, GPU index; None: a node whose per-GPU usage is unknown)


@dataclass(frozen=True)
class Lift:
    """Release `pod` (`namespace/name`); `node`: pin it there (None: no pin); `why`: the rule that released it."""

    pod: str
    node: str | None
    why: Why

    @property
    def text(self) -> str:
        return TEXT[self.why]


def gated(pods: Iterable[Pod]) -> list[Pod]:
    """The pending pods that carry the gate, in queue order."""
    return [p for p in queue_order(pods) if p.gated]


def lifts(
    snapshot: Snapshot,
    plan: Plan,
    starting: Collection[str],
    now_s: float,
    max_hold_s: float,
    claims: Claims = NONE,
) -> list[Lift]:
    """The gated pods of `snapshot` to release now (module docstring). `plan` was made from this snapshot, or from
    it less the pods the burst rule holds; `claims`: the queue's claims, already bound in `snapshot`
    (`queue_claims.claimed`); `starting`: the nodes whose change starts with this plan."""
    changed: set[GpuKey] = {(n.name, g.index) for n in plan.nodes for g in n.gpus if g.changed}
    planned: dict[str, list[GpuKey]] = {}
    for a in plan.assignments:
        planned.setdefault(a.pod, []).append((a.node, a.gpu))
    free = _free(snapshot, changed, starting)
    used = {n.name: n.used for n in snapshot.nodes}  # CPU, memory and pods, with the lifts so far
    out = [Lift(c.pod, c.node, CLAIMED) for c in claims.claims if c.gated]
    for pod in queue_order(snapshot.pods):
        mine = planned.get(pod.key, [])
        if pod.gated and mine and mine[0][0] in starting and any(k in changed for k in mine):
            out.append(Lift(pod.key, mine[0][0], STARTED))
            continue
        node = _take(free, used, snapshot, pod)
        if not pod.gated:
            continue
        if node is not None:
            out.append(Lift(pod.key, node, FREE))
            continue
        created = pod.created_s
        if created is None or now_s - created >= max_hold_s:
            out.append(Lift(pod.key, None, OVERDUE))
    return out


def _free(snapshot: Snapshot, changed: set[GpuKey], starting: Collection[str]) -> dict[str, Counter[str]]:
    """Per node, the free instances by profile that the queue may take: none on a node whose change starts (it is
    being tainted), none on a GPU the plan re-cuts (its free instances are about to go)."""
    out: dict[str, Counter[str]] = {}
    for node in snapshot.nodes:
        if node.name in starting:
            continue
        free = Counter({p: c for p, c in node.mig_free.items() if c > 0})
        for gpu in node.gpus:
            if (node.name, gpu.index) in changed:
                free -= Counter(dict(gpu.config.layout)) - Counter(dict(gpu.used or {}))
        out[node.name] = free
    return out


def _take(free: dict[str, Counter[str]], used: dict[str, Resources], snapshot: Snapshot, pod: Pod) -> str | None:
    """The first node where `pod` fits (kube-scheduler's static rules, its CPU, memory and pod count) and `free`
    holds all the instances it asks for (taken from `free`); None when there is none, or when it asks for anything
    but MIG profiles (whole GPUs, VRAM: the gate does not hold those)."""
    want = wants(pod)
    node = None if want is None else first_node(snapshot, pod, want, free, used)
    return None if node is None else node.name


def release_all(pods: Iterable[Pod]) -> list[Lift]:
    """Every gated pod released without a pin: migctl is paused or only reports (dry run), and holds nobody."""
    return [Lift(p.key, None, RELEASED) for p in gated(pods)]
