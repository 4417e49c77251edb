"""VRAM-native pod requests: which MIG profile a pod asking for `migctl.io/vram: 7Gi` should ask for instead.

Pure decision logic shared by the admission webhook (`migctl webhook`) and `migctl plan` (docs/vram-requests.md).
`decide` turns one Pod object (a plain dict, as the API server sends it) and its placement (the core `Pod` the
adapter reads: selector, affinity, tolerations) into a `VramDecision`: leave it alone, rewrite it, or reject
it with a message. `offers` holds the cluster side, `choice` the records, `rewrite` the
rewritten Pod object.

It decides by the planner's own rules, so the two cannot disagree:

1. Leave alone: the pod opts out (annotation `migctl.io/webhook: disabled`, or its namespace carries that label),
   it uses migctl's fallback scheduler (`schedulerName: migctl`, non-MIG GPUs), it already names a GPU resource
   (`nvidia.com/gpu`, `nvidia.com/mig-*`) in any container, it requests no VRAM, or no MIG-capable GPU is known.
2. Instances: `demand.shared_instances`, the rule the planner reads VRAM pods by. Each app container and
   sidecar with a VRAM request gets its own instance; a plain init container shares the largest instance of a
   later container, which grows to hold it (Kubernetes counts an init container's request for the pod's whole
   life, and the kubelet hands the device on). Each container asks for `nvidia.com/mig-<p>: 1`, `p` the first
   of `demand.profiles_for` for its instance's memory; the effective request is one instance per instance.
3. Nodes: the planner's `placement.static_misfit` (nodeSelector, required node affinity, taints, cordon).
4. The model: among the models on those nodes, those that serve every instance; ranked by (a) capacity exists
   or can be planned, (b) fewer whole GPUs, (c) least waste (instance memory minus need, summed over
   instances), (d) capacity now before capacity after a reshape, (e) model id. "Capacity exists" = one node
   has enough free instances of every chosen profile now; "can be planned" = one schedulable node migctl may
   reconfigure has enough idle GPUs to be reshaped into valid layouts holding them (the exact geometry). Both
   are hints from a periodic view, not reservations.
5. Affinity: the pod is restricted (`nvidia.com/gpu.product In [...]`, ANDed into every existing required
   nodeSelectorTerm, or a new term) to the products of the models present that have each chosen profile with
   enough memory for its instance (the labels seen on nodes, plus the catalog's product names).
6. A request no MIG instance of any model covers is rejected with a clear message, or, when `whole_gpu` is
   allowed and a model's whole GPU covers it, served by `nvidia.com/gpu: 1` (MIG disabled on that GPU).

The cost of a decision is per GPU class (`offers.OfferIndex`), and decisions are remembered per pod kind.
"""

from __future__ import annotations

import marshal
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from functools import partial

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.naming import RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, resource_name
from migctl.core.model.cluster import GpuDemand, Pod
from migctl.core.model.demand import effective_requests, profiles_for, shared_instances
from migctl.core.model.placement import signature
from migctl.core.text.quantity import MIB
from migctl.core.vram.choice import (
    CHOICE_ANNOTATION,
    OPT_OUT_KEY,
    OPT_OUT_VALUE,
    ContainerChoice,
    VramDecision,
    VramRules,
    too_large,
    waste_of,
)
from migctl.core.vram.offers import (
    CAPACITY_RANK,
    PRODUCT_LABEL,
    WHOLE,
    Capacity,
    ModelOffer,
    NodeOffer,
    OfferIndex,
    offers_from_snapshot,
)

__all__ = [
    "CHOICE_ANNOTATION",
    "OPT_OUT_KEY",
    "OPT_OUT_VALUE",
    "PRODUCT_LABEL",
    "WHOLE",
    "Capacity",
    "ContainerAsk",
    "ContainerChoice",
    "ModelOffer",
    "NodeOffer",
    "OfferIndex",
    "PodContainers",
    "VramDecision",
    "VramRules",
    "decide",
    "offers_from_snapshot",
]


_dumps = marshal.dumps


def _leave(reason: str) -> VramDecision:
    return VramDecision("leave", reason)


@dataclass(frozen=True, slots=True)
class ContainerAsk:
    """One container as the adapter read it (`adapters/requests.py`, the one reader of a container's
    `resources`): which it is, the resources it names, and its VRAM request, read or why not."""

    init: bool
    index: int
    name: str
    sidecar: bool  # an init container with restartPolicy Always
    named: tuple[str, ...]  # every resource it requests or limits
    vram_text: str | None  # its VRAM request as written; None when it names none
    vram: Decimal | None = None  # read by the strict parser; None when absent or unreadable
    vram_error: str = ""  # why it cannot be read


PodContainers = Sequence[ContainerAsk]  # app containers first, then init containers


def _names_gpu(resource: str) -> bool:
    return resource == WHOLE_GPU_RESOURCE or resource.startswith(RESOURCE_PREFIX)


def _vram_requests(containers: PodContainers, rules: VramRules) -> tuple[list[ContainerChoice], list[str]]:
    asked: list[tuple[str, int, bool, str, int, bool]] = []  # (name, index, init, request, MiB, sidecar)
    problems: list[str] = []
    for c in containers:
        if c.vram_text is None:
            continue
        init, i, name, raw = c.init, c.index, c.name, c.vram_text
        key = "initContainers" if init else "containers"
        if c.vram is None:
            problems.append(f"{key}[{i}] {name!r}: {rules.resource}: {c.vram_error}")
            continue
        if c.vram < 0:
            problems.append(f"{key}[{i}] {name!r}: {rules.resource}: {raw} is negative")
            continue
        if c.vram == 0:
            continue
        asked.append((name, i, init, raw, math.ceil(c.vram / MIB), c.sidecar))
    if not asked or problems:
        return [ContainerChoice(n, i, init, r, mib, sidecar=sc) for n, i, init, r, mib, sc in asked], problems
    n_init = sum(1 for c in containers if c.init)
    inits = [(0, False)] * n_init
    apps = [0] * (len(containers) - n_init)
    for _, i, init, _, mib, sidecar in asked:
        if init:
            inits[i] = (mib, sidecar)
        else:
            apps[i] = mib
    sizes, where = shared_instances(inits, apps)
    out = []
    for name, i, init, request, mib, sidecar in asked:
        k = where[i if init else n_init + i]
        out.append(ContainerChoice(name, i, init, request, mib, sidecar=sidecar, instance=k, shared_mib=sizes[k]))
    return out, problems


@dataclass(frozen=True)
class _Candidate:
    offer: int  # index into the OfferIndex
    model: GpuModel
    choices: tuple[ContainerChoice, ...]
    capacity: Capacity
    node: str

    @property
    def wholes(self) -> int:
        return len({c.instance for c in self.choices if c.profile == WHOLE})

    @property
    def waste(self) -> int:
        return waste_of(self.choices)

    def rank(self) -> tuple[object, ...]:
        available = 0 if self.capacity != "none" else 1
        return (available, self.wholes, self.waste, CAPACITY_RANK[self.capacity], self.model.id)

    def summary(self) -> str:
        held = _counts(self.choices)
        what = "+".join(f"{n}×{p}" if n > 1 else p for p, n in sorted(held.items()))
        return f"{self.model.id} {what} ({self.waste} MiB spare, {_capacity_words(self.capacity)})"


def _capacity_words(c: Capacity) -> str:
    return {"free": "free now", "plannable": "after a reshape", "none": "no capacity yet"}[c]


def _serve(model: GpuModel, need_mib: int, whole_gpu: bool) -> tuple[str, int] | None:
    """(profile, instance MiB) of the planner's first choice for this much VRAM; a whole GPU if allowed."""
    fits = profiles_for(model, GpuDemand("vram", 1, vram_mib=need_mib))
    if fits:
        return fits[0].name, fits[0].memory_mib
    if whole_gpu and model.memory_mib >= need_mib:
        return WHOLE, model.memory_mib
    return None


def _counts(choices: Sequence[ContainerChoice]) -> dict[str, int]:
    """Instances the pod holds per profile: Kubernetes' effective-request rule over the rewritten containers."""
    apps = [{c.profile: Decimal(1)} for c in choices if not c.init]
    inits = [({c.profile: Decimal(1)}, c.sidecar) for c in sorted(choices, key=lambda c: c.index) if c.init]
    return {k: int(v) for k, v in effective_requests(apps, inits).items()}


def _products(offers: Iterable[ModelOffer], choices: Sequence[ContainerChoice]) -> tuple[str, ...]:
    """Products of the models present that give every chosen profile enough memory for its instance.

    Both the `nvidia.com/gpu.product` values seen on nodes and the catalog's names for the same model, so a new
    node of that model (another form factor) qualifies too.
    """
    out: set[str] = set()
    for o in offers:
        ok = True
        for c in choices:
            if c.profile == WHOLE:
                ok = ok and o.model.memory_mib >= c.shared_mib
            else:
                p = next((q for q in o.model.base_profiles if q.name == c.profile), None)
                ok = ok and p is not None and p.memory_mib >= c.shared_mib
        if ok:
            out.update(o.products)
            out.update(o.model.gfd_products)  # the same model under its other product names (PCIe, SXM)
    return tuple(sorted(out))


def opted_out(annotations: Mapping[str, str], namespace_labels: Mapping[str, str] | None, rules: VramRules) -> str:
    """Why the webhook leaves a pod alone by its owner's choice ("" when it does not): the pod annotated, or its
    namespace labelled, `opt_out_key=opt_out_value`. The one reading, for the VRAM decision and the queue gate."""
    if annotations.get(rules.opt_out_key) == rules.opt_out_value:
        return f"the pod is annotated {rules.opt_out_key}={rules.opt_out_value}"
    if (namespace_labels or {}).get(rules.opt_out_key) == rules.opt_out_value:
        return f"the namespace is labelled {rules.opt_out_key}={rules.opt_out_value}"
    return ""


def decide(
    annotations: Mapping[str, str],
    scheduler_name: str,
    containers: PodContainers,
    placement: Pod | str,
    offers: Sequence[ModelOffer] | OfferIndex,
    rules: VramRules | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> VramDecision:
    """What to do with one pod at creation (see the module docstring for the rules), from what the adapter read of
    it: its annotations and scheduler (`adapters.views.PodView`), its containers (`adapters.requests.vram_asks`),
    and `placement`, the pod as the planner reads it (only its selector, affinity and tolerations are used), or
    why the adapter could not read it (a pod that asks for VRAM is then rejected with that message). Pass one
    `OfferIndex` for many pods: the decision for a pod of a kind it has seen is remembered."""
    rules = rules or VramRules()
    left = opted_out(annotations, namespace_labels, rules)
    if left:
        return _leave(left)
    if scheduler_name == rules.fallback_scheduler:
        return _leave(f"schedulerName: {rules.fallback_scheduler} (migctl's fallback places it on a non-MIG GPU)")
    if isinstance(placement, str) or not isinstance(offers, OfferIndex):
        return _decide(containers, placement, offers, rules)
    kind = _kind(containers)  # a pod of a kind the index has seen costs its key and one look-up
    index, target = offers, placement
    hit = index.recall(("pod", kind, signature(target), rules), lambda: _decide(containers, target, index, rules))
    assert isinstance(hit, VramDecision)
    return hit


def _kind(containers: PodContainers) -> bytes:
    """What `_decide` reads of the containers, as a key (marshal's encoding: strings, booleans and tuples only,
    so equal keys are equal readings)."""
    return _dumps(
        [(c.init, c.index, c.name, c.sidecar, c.named, c.vram_text, str(c.vram), c.vram_error) for c in containers]
    )


def _decide(
    containers: PodContainers, placement: Pod | str, offers: Sequence[ModelOffer] | OfferIndex, rules: VramRules
) -> VramDecision:
    named = sorted({r for c in containers for r in c.named if _names_gpu(r)})
    if named:
        return _leave(f"it already names a GPU resource ({', '.join(named)})")
    wanted, problems = _vram_requests(containers, rules)
    if problems:
        return VramDecision("reject", f"invalid {rules.resource} request: {'; '.join(problems)}")
    if not wanted:
        return _leave(f"no {rules.resource} request")
    if isinstance(placement, str):
        return VramDecision("reject", placement)
    index = offers if isinstance(offers, OfferIndex) else OfferIndex(offers)
    if not index.offers:
        return _leave("no MIG-capable GPU node is known in the cluster")
    target = placement
    hit = index.recall((signature(target), tuple(wanted), rules), lambda: _choose(target, wanted, index, rules))
    assert isinstance(hit, VramDecision)
    return hit


def _choose(placement: Pod, wanted: list[ContainerChoice], index: OfferIndex, rules: VramRules) -> VramDecision:
    """The model and profiles for a pod that asks for VRAM; per GPU class the pod may reach."""
    reach = index.reach(placement)
    if not reach.any:
        return VramDecision(
            "reject",
            f"no MIG-capable GPU node can ever run the pod ({reach.why_not}; models "
            f"{', '.join(o.model.id for o in index.offers)}); no MIG profile can be chosen for its {rules.resource} "
            "request",
        )
    usable = [i for i, classes in enumerate(reach.classes) if classes]
    candidates: list[_Candidate] = []
    for i in usable:
        key = ("served", i, tuple(wanted), rules)
        served = index.recall(key, partial(_served, index.offers[i].model, wanted, rules))
        assert isinstance(served, tuple)
        if served:
            chosen, counts = served
            best: tuple[Capacity, str] = ("none", "")
            for cls, node in reach.classes[i]:  # by node name: the first node of the best capacity is named
                cap = index.capacity(i, cls, counts)
                if CAPACITY_RANK[cap] < CAPACITY_RANK[best[0]]:
                    best = (cap, node)
                    if cap == "free":
                        break
            candidates.append(_Candidate(i, index.offers[i].model, chosen, *best))
    if not candidates:
        return VramDecision("reject", too_large(wanted, [index.offers[i] for i in usable], rules))

    candidates.sort(key=lambda c: c.rank())
    top = candidates[0]
    why = ["smallest profile covering each request"]
    if len(candidates) > 1:
        why.append(f"least waste among {len(candidates)} GPU models that can serve it")
    why.append(
        {
            "free": f"a free instance exists on node {top.node}",
            "plannable": f"an idle GPU on node {top.node} can be reshaped by migctl",
            "none": "no capacity yet: the pod waits until migctl (or an operator) makes an instance",
        }[top.capacity]
    )
    return VramDecision(
        "rewrite",
        "; ".join(why),
        top.choices,
        top.model.id,
        _products([index.offers[i] for i in usable], top.choices),
        top.capacity,
        top.node,
        tuple(c.summary() for c in candidates[1:4]),
        tuple(sorted(_counts(top.choices).items())),
    )


def _served(
    model: GpuModel, wanted: Sequence[ContainerChoice], rules: VramRules
) -> tuple[tuple[ContainerChoice, ...], tuple[tuple[str, int], ...]] | tuple[()]:
    """The containers served on `model` and the instances they hold, or () when one cannot be: the same for
    every placement, so an index remembers it per model (`OfferIndex.recall`)."""
    chosen = []
    for c in wanted:
        served = _serve(model, c.shared_mib, rules.whole_gpu)
        if served is None:
            return ()
        profile, mib = served
        resource = WHOLE_GPU_RESOURCE if profile == WHOLE else resource_name(profile)
        chosen.append(replace(c, profile=profile, resource=resource, instance_mib=mib))
    return tuple(chosen), tuple(sorted(_counts(chosen).items()))
