"""What the queue takes before the plan: free instances as they are, in kube-scheduler's queue order.

Why: with the queue gate (`core/queue_gate.py`) nothing binds between reconciles, so every pod a free instance
could serve as it is is still pending when the plan is made. The plan's first term is pods placed, and left to
it, a free instance an older pod could take as it is gets re-cut into several instances for younger, smaller
pods. On MISO 2x4 A100 that made the `3g.20gb` pods wait 770 s on average against 330 s without the gate
(seed 44; docs/queue-gate.md). Without the gate kube-scheduler would have bound those pods at once. The claims
give them that back: each reconcile the queue takes what exists first, and the plan decides only what is left.

At each reconcile, the pending pods that ask only for MIG profiles (gated or not), in kube-scheduler's queue
order (priority, then creation):
* a pod takes free instances of its profiles on the first node it fits (selectors, affinity, taints, CPU and
  memory) where they are all free (a `Claim`). Which GPU's instance it gets is the device plugin's choice, not
  migctl's: the claim counts it on the first GPU with one free, as the simulator's device plugin does. A
  released pod that kube-scheduler has found unschedulable claims nothing: something migctl does not model keeps
  it off (anti-affinity, topology spread, volumes), and a claim would hold an instance it never takes. Nor does
  a pod that carries another component's scheduling gate (Kueue's, say): it is not bound when migctl lifts its own;
* a pod asking for one instance that no free instance serves holds the first GPU (nodes it fits, in order)
  whose free part an in-place re-cut turns into its profile by merging smaller free instances: the cheapest
  such re-cut destroys only free instances with less memory than its profile (a `1g.10gb` beside a free slice
  becomes the `1g.20gb` an older pod waits for). While it holds, no younger pod claims, on that node, a profile
  the re-cut destroys: the device plugin picks the GPU within a node, so a hold can only be kept node-wide. The
  plan decides what becomes of the held instances; those it leaves go to the queue after the plan
  (`queue_gate.lifts`). A re-cut that would split a larger free instance younger pods could take as it is
  holds nothing: it keeps larger pods waiting to serve a smaller one (measured to lose, docs/queue-gate.md).
  Nor does any hold stand when some GPU makes the profile without destroying anything: the plan serves it there.
  Holds are for in-place nodes only: a stock node's busy GPU is never re-cut;
* the plan sees the claimed pods bound (`claimed`), and the controller releases them, pinned to their node.

A node with claims does not start a change in the same reconcile that destroys a free instance of a profile
claimed there (`collisions`): the device plugin may hand the claimed pod that very instance. The change waits
for the next reconcile, which sees the pods bound.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from migctl.core.hardware.geometry import ModelGeometry, Placement, geometry
from migctl.core.inplace.reach import Around, around, reach
from migctl.core.model.cluster import Gpu, Node, Pod, Resources, Snapshot
from migctl.core.model.placement import static_misfit
from migctl.core.model.plan import Plan

Unit = tuple[int | None, str]  # (GPU index, None where per-GPU usage is unknown; profile)


@dataclass(frozen=True)
class Claim:
    """`pod` takes free instances on `node`: `units`, one per instance; `gated`: it carries the gate."""

    pod: str
    node: str
    units: tuple[Unit, ...]
    gated: bool


@dataclass(frozen=True)
class Claims:
    """A reconcile's claims, in queue order, and its holds: (node, GPU index, holder pod)."""

    claims: tuple[Claim, ...] = ()
    holds: tuple[tuple[str, int, str], ...] = ()


NONE = Claims()


def queue_order(pods: Iterable[Pod]) -> list[Pod]:
    """Pending pods in kube-scheduler's queue order: priority, then creation."""
    return sorted((p for p in pods if p.pending), key=lambda p: (-p.priority, p.created, p.key))


def wants(pod: Pod) -> Counter[str] | None:
    """The instances `pod` asks for, by profile; None when it asks for anything but MIG profiles (whole GPUs,
    VRAM: neither the gate nor the claims are for those) or for nothing."""
    want: Counter[str] = Counter()
    for d in pod.gpu:
        if d.kind != "profile" or not d.profile:
            return None
        want[d.profile] += d.count
    return want or None


def claim(snapshot: Snapshot) -> Claims:
    """The claims and holds of `snapshot` (module docstring)."""
    gpus = {(n.name, g.index): g for n in snapshot.nodes for g in n.gpus}  # as the claims so far leave them
    node_free = {n.name: Counter({p: c for p, c in n.mig_free.items() if c > 0}) for n in snapshot.nodes}
    used = {n.name: n.used for n in snapshot.nodes}  # CPU, memory and pods, with the claims so far
    blocked: dict[str, set[str]] = {}  # node -> profiles a hold keeps from younger pods
    claims: list[Claim] = []
    holds: list[tuple[str, int, str]] = []
    for pod in queue_order(snapshot.pods):
        want = wants(pod)
        if want is None or pod.other_gates or (pod.unschedulable and not pod.gated):
            continue  # not bound once released: held by another gate, or kube-scheduler could not bind it
        got = _take(snapshot, pod, want, gpus, node_free, blocked, used)
        if got is not None:
            claims.append(got)
            continue
        if sum(want.values()) != 1:
            continue
        (profile,) = want
        held = {(n, i) for n, i, _ in holds}
        hold = _hold(snapshot, pod, profile, [g for g in gpus.items() if g[0] not in held])
        if hold is not None:
            (name, index), destroyed = hold
            holds.append((name, index, pod.key))
            blocked.setdefault(name, set()).update(destroyed)
    return Claims(tuple(claims), tuple(holds))


def _free(gpu: Gpu) -> Counter[str]:
    """A GPU's free instances by profile; empty where its usage is unknown."""
    if gpu.used is None or not gpu.config.mig_enabled:
        return Counter()
    return +(Counter(dict(gpu.config.layout)) - Counter(dict(gpu.used)))


def _take(
    snapshot: Snapshot,
    pod: Pod,
    want: Counter[str],
    gpus: dict[tuple[str, int], Gpu],
    node_free: dict[str, Counter[str]],
    blocked: dict[str, set[str]],
    used: dict[str, Resources],
) -> Claim | None:
    """The claim of `pod` on the first node where it fits (`first_node`), on the GPUs with its instances free
    (taken: `gpus`, `node_free` and `used` are updated)."""
    node = first_node(snapshot, pod, want, node_free, used, blocked)
    if node is None:
        return None
    units: list[Unit] = []
    for profile, count in sorted(want.items()):
        for _ in range(count):
            gpu = next((gpus[k] for x in node.gpus if _free(gpus[k := (node.name, x.index)])[profile] > 0), None)
            if gpu is not None:
                gpus[(node.name, gpu.index)] = _bind_gpu(gpu, Counter({profile: 1}))
            units.append((None if gpu is None else gpu.index, profile))
    return Claim(pod.key, node.name, tuple(units), pod.gated)


def first_node(
    snapshot: Snapshot,
    pod: Pod,
    want: Counter[str],
    free: dict[str, Counter[str]],
    used: dict[str, Resources] | None = None,
    blocked: dict[str, set[str]] | None = None,
) -> Node | None:
    """The first node where `pod` passes kube-scheduler's static rules (and, with `used`, its CPU, memory and pod
    count fit) and `free` holds every instance it asks for, none of a profile `blocked` keeps there. The
    instances are taken from `free`, the requests added to `used`. Both of the queue's passes ask this: the
    claims before the plan, and the lifts after it (`queue_gate.lifts`)."""
    for node in snapshot.nodes:
        have = free.get(node.name)
        if have is None or any(have[p] < c for p, c in want.items()):
            continue
        if blocked is not None and blocked.get(node.name, set()) & set(want):
            continue
        if static_misfit(pod, node) is not None:
            continue
        if used is not None and not pod.requests.fits_in(node.allocatable - used[node.name]):
            continue
        have.subtract(want)
        if used is not None:
            used[node.name] = used[node.name] + pod.requests
        return node
    return None


def _hold(
    snapshot: Snapshot, pod: Pod, profile: str, gpus: list[tuple[tuple[str, int], Gpu]]
) -> tuple[tuple[str, int], tuple[str, ...]] | None:
    """The GPU `pod` holds ((node, index), the profiles of the free instances its re-cut destroys): the first of
    the nodes it fits whose free part an in-place re-cut turns into `profile` by destroying only free instances
    with less memory. None when no such GPU exists, or when some GPU can make it without destroying anything (the
    plan serves it there: no younger pod need wait)."""
    nodes = {n.name: n for n in snapshot.nodes if static_misfit(pod, n) is None}
    first = None
    for (name, index), gpu in gpus:
        node = nodes.get(name)
        if node is None or node.model is None or not node.model.has_profile(profile):
            continue
        destroyed = _recut(node, gpu, profile)
        if destroyed is None:
            continue
        if not destroyed:
            return None
        mib = node.model.profile(profile).memory_mib
        if first is None and all(node.model.profile(p).memory_mib < mib for p in destroyed):
            first = ((name, index), destroyed)
    return first


def _recut(node: Node, gpu: Gpu, profile: str) -> tuple[str, ...] | None:
    """The free instances (profiles) the in-place re-cut of `gpu` that makes `profile` destroys, of the re-cut
    that destroys the fewest; None when the in-place path cannot make it there now (a stock node, a node a guard
    rail holds, MIG off, the instances unknown, or no room)."""
    if node.model is None or not node.in_place or node.frozen_reason or gpu.instances is None:
        return None
    if not gpu.config.mig_enabled:
        return None
    where = around(node, gpu) or ((), tuple(sorted((i.placement for i in gpu.instances), key=_start)))
    return _cheapest_destroy(geometry(node.model), where, profile)


@lru_cache(maxsize=4096)
def _cheapest_destroy(geo: ModelGeometry, where: Around, profile: str) -> tuple[str, ...] | None:
    """The profiles of the free instances the re-cut that makes `profile` around `where`'s instances in use
    destroys, of the re-cut that destroys the fewest; None when no re-cut makes it."""
    must = Counter(p.profile for p in where[0])
    must[profile] += 1
    best: tuple[str, ...] | None = None
    for f in geo.completions(must):
        moved = reach(geo, where, f.layout)
        if moved is not None and (best is None or len(moved.destroy) < len(best)):
            best = tuple(p.profile for p in moved.destroy)
    return best


def _start(p: Placement) -> tuple[int, str]:
    return (p.start, p.profile)


def claimed(snapshot: Snapshot, claims: Claims) -> Snapshot:
    """`snapshot` as it will be once the claimed pods are bound: each running on its node, on the GPUs of its
    units, each taking the free instance of its profile that starts lowest there (the simulator's device
    plugin). The plan is made on this."""
    if not claims.claims:
        return snapshot
    by_pod = {c.pod: c for c in claims.claims}
    by_node: dict[str, list[tuple[Pod, Claim]]] = {}
    pods = []
    for pod in snapshot.pods:
        c = by_pod.get(pod.key)
        if c is None:
            pods.append(pod)
            continue
        gpus = {g for g, _ in c.units}
        index = next(iter(gpus)) if len(gpus) == 1 else None
        bound = dataclasses.replace(
            pod, node=c.node, phase="Running", unschedulable=False, gated=False, gpu_index=index
        )  # fmt: skip
        pods.append(bound)
        by_node.setdefault(c.node, []).append((bound, c))
    nodes = tuple(_bind(n, by_node[n.name]) if n.name in by_node else n for n in snapshot.nodes)
    return dataclasses.replace(snapshot, nodes=nodes, pods=tuple(pods))


def _bind(node: Node, bound: list[tuple[Pod, Claim]]) -> Node:
    """`node` with the claimed pods `bound` on it."""
    taken: Counter[str] = Counter()
    per_gpu: dict[int, Counter[str]] = {}
    requests = Resources()
    for pod, c in bound:
        requests = requests + pod.requests
        for index, profile in c.units:
            taken[profile] += 1
            if index is not None:
                per_gpu.setdefault(index, Counter())[profile] += 1
    gpus = tuple(_bind_gpu(g, per_gpu[g.index]) if g.index in per_gpu else g for g in node.gpus)
    mig_free = {p: c - taken[p] for p, c in node.mig_free.items()}
    gpu_pods = node.gpu_pods + tuple((p.key, p.priority, p.gpu_index) for p, _ in bound)
    return dataclasses.replace(
        node, gpus=gpus, mig_free=mig_free, used=node.used + requests, gpu_pods=gpu_pods
    )  # fmt: skip


def _bind_gpu(gpu: Gpu, take: Counter[str]) -> Gpu:
    used = Counter(dict(gpu.used or {})) + take
    if gpu.instances is None:
        return dataclasses.replace(gpu, used=dict(used))
    left = Counter(take)
    flip = set()
    for inst in sorted(gpu.instances, key=lambda i: (i.start, i.profile)):
        if not inst.in_use and left[inst.profile] > 0:
            left[inst.profile] -= 1
            flip.add(inst)
    instances = tuple(dataclasses.replace(i, in_use=True) if i in flip else i for i in gpu.instances)
    return dataclasses.replace(gpu, used=dict(used), instances=instances)


def collisions(snapshot: Snapshot, plan: Plan, claims: Claims) -> set[str]:
    """Nodes with claims whose change (`plan`, made on `snapshot` with the claims bound) leaves fewer instances of
    a claimed profile on some GPU than it has now: the device plugin may hand a claimed pod the very instance the
    change destroys, so such a change waits for the next reconcile (module docstring)."""
    claimed_profiles: dict[str, set[str]] = {}
    for c in claims.claims:
        claimed_profiles.setdefault(c.node, set()).update(p for _, p in c.units)
    if not claimed_profiles:
        return set()
    now = {(n.name, g.index): Counter(dict(g.config.layout)) for n in snapshot.nodes for g in n.gpus}
    out = set()
    for node in plan.nodes:
        profiles = claimed_profiles.get(node.name)
        if not profiles or not node.changed:
            continue
        for g in node.gpus:
            before = now.get((node.name, g.index), Counter())
            after = Counter(dict(g.target.layout))
            if g.changed and any(after[p] < before[p] for p in profiles):
                out.add(node.name)
                break
    return out
