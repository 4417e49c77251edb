"""The cluster as the VRAM-request decision sees it: GPU models, nodes grouped into GPU classes, capacity.

`offers_from_snapshot` summarises a snapshot per GPU model (live profile memory, the products seen, and per node:
free instances, free whole GPUs, idle GPUs migctl may reshape, taints and cordon). `OfferIndex` answers the two
questions a decision asks, at a cost per GPU class rather than per node:

- which nodes may this pod ever land on: the planner's own `placement.static_misfit` (selectors, affinity,
  taints, cordon), evaluated once per placement signature and remembered as the GPU classes it reaches;
- can a GPU class give the pod its instances: free now, or after reshaping idle GPUs into layouts the exact
  geometry (`geometry.is_valid`) accepts, never a count of memory slices.

A GPU class is a model's nodes in the same capacity state (free instances, free and idle GPUs): nodes of one
class answer every capacity question alike, so one check serves them all.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import product
from typing import Literal

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, canonical, geometry
from migctl.core.model.cluster import Node, Pod, Snapshot, Taint
from migctl.core.model.placement import NodeIndex, signature, tally
from migctl.core.model.settings import PlannerSettings
from migctl.wire import names

PRODUCT_LABEL = names.GPU_PRODUCT
WHOLE = "gpu"  # the `profile` of a whole-GPU choice
Capacity = Literal["free", "plannable", "none"]
CAPACITY_RANK: dict[Capacity, int] = {"free": 0, "plannable": 1, "none": 2}
# A pod asking for more instances than this is not packed onto idle GPUs (the search is exponential in it).
_MAX_PACKED = 32


@dataclass(frozen=True)
class NodeOffer:
    """What one node of a model can give a new pod now, or after migctl reshapes its idle GPUs."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    free: Mapping[str, int] = field(default_factory=dict)  # profile -> free instances now
    whole_free: int = 0  # free `nvidia.com/gpu` now
    idle: int = 0  # GPUs nothing runs on, on a node migctl may reconfigure
    idle_mig: int = 0  # ... of those, the ones that can hold MIG instances (MIG on, or mode changes allowed)
    idle_whole: int = 0  # ... the ones that can become a whole GPU (MIG off, or mode changes allowed)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False  # cordoned

    @cached_property
    def node(self) -> Node:
        """The fields `static_misfit` reads, as the core model it takes."""
        return Node(self.name, labels=self.labels, taints=self.taints, unschedulable=self.unschedulable)

    @cached_property
    def state(self) -> tuple[object, ...]:
        """Everything a capacity check reads: nodes with equal states form one GPU class."""
        free = tuple(sorted((p, n) for p, n in self.free.items() if n > 0))
        return (free, self.whole_free, self.idle, self.idle_mig, self.idle_whole)


@dataclass(frozen=True)
class ModelOffer:
    """One GPU model as present in the cluster (live memory applied) and its nodes."""

    model: GpuModel
    products: tuple[str, ...]  # `nvidia.com/gpu.product` values seen on its nodes
    nodes: tuple[NodeOffer, ...]


def _model_key(m: GpuModel) -> tuple[object, ...]:
    return (m.id, m.memory_mib, tuple((p.name, p.memory_mib) for p in m.profiles))


def offers_from_snapshot(snapshot: Snapshot, planner: PlannerSettings | None = None) -> tuple[ModelOffer, ...]:
    """Group the snapshot's MIG-capable nodes by model (and live memory: drivers may differ between nodes)."""
    planner = planner or PlannerSettings()
    groups: dict[tuple[object, ...], tuple[GpuModel, list[str], list[NodeOffer]]] = {}
    for n in snapshot.nodes:
        if n.model is None:
            continue
        # a cordoned node's idle GPUs serve no new pod (`static_misfit` keeps pods off it too): not counted
        may_reshape = n.may_reconfigure(planner) and not n.unschedulable
        idle = idle_mig = idle_whole = 0
        if may_reshape:
            for g in n.gpus:
                if g.busy is not False:
                    continue
                idle += 1
                if g.config.mig_enabled or planner.allow_mig_mode_change:
                    idle_mig += 1
                if not g.config.mig_enabled or planner.allow_mig_mode_change:
                    idle_whole += 1
        offer = NodeOffer(
            name=n.name,
            labels=dict(n.labels),
            free={p: c for p, c in n.mig_free.items() if c > 0},
            whole_free=n.whole_free,
            idle=idle,
            idle_mig=idle_mig,
            idle_whole=idle_whole,
            taints=n.taints,
            unschedulable=n.unschedulable,
        )
        key = _model_key(n.model)
        _, products, nodes = groups.setdefault(key, (n.model, [], []))
        product_label = n.labels.get(PRODUCT_LABEL, "")
        if product_label and product_label not in products:
            products.append(product_label)
        nodes.append(offer)
    return tuple(
        ModelOffer(model, tuple(sorted(products)), tuple(sorted(nodes, key=lambda o: o.name)))
        for model, products, nodes in sorted(groups.values(), key=lambda g: (g[0].id, g[0].memory_mib))
    )


@dataclass(frozen=True)
class Reach:
    """Where pods of one placement signature may land: per offer, (GPU class, first such node by name)."""

    classes: tuple[tuple[tuple[int, str], ...], ...]  # indexed like `OfferIndex.offers`, by node name
    why_not: str  # the scheduler-style tally of refusals, for a rejection

    @property
    def any(self) -> bool:
        return any(self.classes)


class OfferIndex:
    """The offers with their GPU classes, and memos of what decisions ask of them.

    Built once per cluster view (the webhook's refresh, one `migctl plan`), then read by every decision. The
    memos are keyed by placement signature and by instance counts, so a thousand pods of a few kinds cost a few
    passes over the nodes, not a thousand."""

    _MEMO_LIMIT = 4096  # signatures remembered; a long-lived webhook index starts over past this

    def __init__(self, offers: Sequence[ModelOffer]) -> None:
        self.offers = tuple(offers)
        self.classes: list[list[NodeOffer]] = []  # per offer: one representative node per GPU class
        self._class_of: list[dict[str, int]] = []  # per offer: node name -> class index
        for o in self.offers:
            reps: list[NodeOffer] = []
            ids: dict[tuple[object, ...], int] = {}
            of: dict[str, int] = {}
            for n in o.nodes:
                cid = ids.get(n.state)
                if cid is None:
                    cid = ids[n.state] = len(reps)
                    reps.append(n)
                of[n.name] = cid
            self.classes.append(reps)
            self._class_of.append(of)
        self._nodes = [NodeIndex([n.node for n in o.nodes]) for o in self.offers]  # per offer: the static rules
        self._reach: dict[tuple[object, ...], Reach] = {}
        self._capacity: dict[tuple[int, int, tuple[tuple[str, int], ...]], Capacity] = {}
        self.memo: dict[object, object] = {}  # for the decision's own results (`decide.decide`)

    def recall(self, key: object, make: Callable[[], object]) -> object:
        """One of the decision's results, made by `make` the first time `key` is asked; a long-lived index starts
        over past a bound (new pod kinds keep coming to a webhook)."""
        hit = self.memo.get(key)
        if hit is None:
            if len(self.memo) >= 16 * self._MEMO_LIMIT:
                self.memo.clear()
            hit = self.memo[key] = make()
        return hit

    def reach(self, pod: Pod) -> Reach:
        """The GPU classes the pod's nodeSelector, affinity and tolerations allow (nodes that are not cordoned)."""
        sig = signature(pod)
        hit = self._reach.get(sig)
        if hit is not None:
            return hit
        if len(self._reach) >= self._MEMO_LIMIT:
            self._reach.clear()
            self.memo.clear()
        reasons: Counter[str] = Counter()
        total = 0
        per_offer = []
        for i, o in enumerate(self.offers):
            seen: dict[int, str] = {}
            total += len(o.nodes)
            misfits, fitting = self._nodes[i].misfits(pod)
            reasons += misfits
            for j in fitting:  # sorted by name: the first allowed node of a class is kept
                n = o.nodes[j]
                seen.setdefault(self._class_of[i][n.name], n.name)
            per_offer.append(tuple(sorted(seen.items(), key=lambda t: t[1])))
        hit = self._reach[sig] = Reach(tuple(per_offer), tally(reasons, total))
        return hit

    def capacity(self, offer: int, cls: int, counts: tuple[tuple[str, int], ...]) -> Capacity:
        """Whether a node of this GPU class has the instances (`counts`: sorted (profile, number), `gpu` for
        whole GPUs) free now, could have them after migctl reshapes its idle GPUs, or neither."""
        key = (offer, cls, counts)
        hit = self._capacity.get(key)
        if hit is None:
            model, node = self.offers[offer].model, self.classes[offer][cls]
            hit = self._capacity[key] = node_capacity(model, node, dict(counts))
        return hit


def node_capacity(model: GpuModel, node: NodeOffer, counts: Mapping[str, int]) -> Capacity:
    """`free`: the node has every instance free now. `plannable`: its idle GPUs can be reshaped into valid
    layouts holding them (exact geometry) and into whole GPUs. Both are hints from a periodic view."""
    mig = {p: n for p, n in counts.items() if p != WHOLE and n > 0}
    whole = counts.get(WHOLE, 0)
    mig_now = all(node.free.get(p, 0) >= n for p, n in mig.items())
    if mig_now and node.whole_free >= whole:
        return "free"
    whole_short = max(0, whole - node.whole_free)
    mig_gpus = 0 if mig_now else gpus_needed(model, canonical(mig))
    if mig_gpus is None:
        return "none"
    if whole_short <= node.idle_whole and mig_gpus <= node.idle_mig and whole_short + mig_gpus <= node.idle:
        return "plannable"
    return "none"


_PACKS: dict[tuple[object, ...], int | None] = {}


def gpus_needed(model: GpuModel, items: CanonicalLayout) -> int | None:
    """The fewest GPUs of `model` whose valid layouts together hold the instances `items` (None: too many to
    pack, or a profile no layout holds). Exact: every GPU's share passes `geometry.is_valid`."""
    total = sum(c for _, c in items)
    if total > _MAX_PACKED:
        return None
    geo = geometry(model)
    gkey = (model.id, model.memory_mib, model.profiles)

    def go(left: CanonicalLayout) -> int | None:
        if not left:
            return 0
        key = (gkey, left)
        if key in _PACKS:
            return _PACKS[key]
        if len(_PACKS) > 65536:  # a long-lived webhook sees new pod shapes forever; the memo starts over
            _PACKS.clear()
        best: int | None = None
        # the first GPU holds at least one instance of the first profile (the order of GPUs does not matter)
        ranges = [range(1, c + 1) if i == 0 else range(c + 1) for i, (_, c) in enumerate(left)]
        for take in product(*ranges):
            share = tuple((n, k) for (n, _), k in zip(left, take, strict=True) if k)
            if not geo.is_valid(share):
                continue
            rest = go(canonical((n, c - k) for (n, c), k in zip(left, take, strict=True)))
            if rest is not None and (best is None or rest + 1 < best):
                best = rest + 1
        _PACKS[key] = best
        return best

    return go(items)
