"""VRAM-native pod requests: which MIG profile a pod asking for `migctl.io/vram: 7Gi` should ask for instead.

Pure decision logic shared by the admission webhook (`migctl webhook`) and `migctl plan` (docs/vram-requests.md):

- `offers_from_snapshot` summarises the cluster per GPU model (live profile memory, the products seen, and per
  node: free instances, free whole GPUs, idle GPUs migctl may reshape).
- `decide` turns one Pod object (a plain dict, as the API server sends it) into a `VramDecision`: leave it
  alone, rewrite it, or reject it with a message.
- `apply` returns the rewritten Pod object (resources, node affinity, annotations).

Rules, in order:

1. Leave alone: the pod opts out (annotation `migctl.io/webhook: disabled`, or its namespace carries that label),
   it uses migctl's fallback scheduler (`schedulerName: migctl`, non-MIG GPUs), it already names a GPU resource
   (`nvidia.com/gpu`, `nvidia.com/mig-*`) in any container, it requests no VRAM, or no MIG-capable GPU is known.
2. Every container (app, init, sidecar) with a VRAM request gets its own instance: `nvidia.com/mig-<p>: 1` with
   `p` the smallest plain profile whose memory covers that container's request. All of a pod's instances are on
   one node, so one GPU model is chosen for the whole pod. Kubernetes' usual rules then apply: init containers
   run one at a time and the device plugin hands their instance on, so a pod's effective need per profile is
   max(largest init container, sum of app containers + sidecars).
3. The model: among the models present (restricted to nodes the pod's own nodeSelector/required node affinity
   allows), those that serve every container; ranked by (a) capacity exists or can be planned, (b) fewer whole
   GPUs, (c) least waste (instance memory minus request, summed), (d) capacity now before capacity after a
   reshape, (e) model id. "Capacity exists" = one node has enough free instances of every chosen profile now;
   "can be planned" = one schedulable node migctl may reconfigure has enough idle GPUs (no instance in use) to
   be reshaped into them. Both are hints from a periodic view, not reservations.
4. Affinity: the pod is restricted (`nvidia.com/gpu.product In [...]`, ANDed into every existing required
   nodeSelectorTerm, or a new term) to the products of the models present that have each chosen profile with
   enough memory for the container that uses it (the labels seen on nodes, plus the catalog's product names).
5. A request no MIG instance of any model covers is rejected with a clear message, or, when `whole_gpu` is
   allowed and a model's whole GPU covers it, served by `nvidia.com/gpu: 1` (MIG disabled on that GPU).

The original request is kept in the `migctl.io/vram` annotation (the largest container request, a single
quantity the planner reads as the real need) and the full choice in `migctl.io/vram-choice` (JSON).
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, Literal

from migctl.core.catalog import GpuModel, round_gib
from migctl.core.cluster import Requirement, Snapshot, Term
from migctl.core.demand import effective_requests
from migctl.core.naming import RESOURCE_PREFIX, WHOLE_GPU_RESOURCE, resource_name
from migctl.core.quantity import MIB, parse_quantity
from migctl.core.settings import PlannerSettings

PRODUCT_LABEL = "nvidia.com/gpu.product"
CHOICE_ANNOTATION = "migctl.io/vram-choice"
OPT_OUT_KEY = "migctl.io/webhook"
OPT_OUT_VALUE = "disabled"
WHOLE = "gpu"  # the `profile` of a whole-GPU choice

Capacity = Literal["free", "plannable", "none"]
_CAPACITY_RANK = {"free": 0, "plannable": 1, "none": 2}


@dataclass(frozen=True)
class VramRules:
    """The knobs of the decision (from the planner settings and the `webhook:` section)."""

    resource: str = "migctl.io/vram"  # the extended resource pods ask for
    annotation: str = "migctl.io/vram"  # where the original request is kept (the planner reads it)
    fallback_scheduler: str = "migctl"  # pods of this scheduler belong to the non-MIG fallback
    whole_gpu: bool = False  # serve a request larger than every MIG instance with a whole GPU
    opt_out_key: str = OPT_OUT_KEY  # namespace label / pod annotation ...
    opt_out_value: str = OPT_OUT_VALUE  # ... with this value: leave the pod alone

    @classmethod
    def from_planner(cls, planner: PlannerSettings, **kw: Any) -> VramRules:
        return cls(resource=planner.vram_resource, annotation=planner.vram_annotation, **kw)


# ---------------------------------------------------------------------------------------------------------
# The cluster, summarised per GPU model


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
        may_reshape = not n.frozen_reason and not n.unschedulable and n.labels.get(planner.exclude_label) != "true"
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
        )
        key = _model_key(n.model)
        _, products, nodes = groups.setdefault(key, (n.model, [], []))
        product = n.labels.get(PRODUCT_LABEL, "")
        if product and product not in products:
            products.append(product)
        nodes.append(offer)
    return tuple(
        ModelOffer(model, tuple(sorted(products)), tuple(sorted(nodes, key=lambda o: o.name)))
        for model, products, nodes in sorted(groups.values(), key=lambda g: (g[0].id, g[0].memory_mib))
    )


# ---------------------------------------------------------------------------------------------------------
# The decision


@dataclass(frozen=True)
class ContainerChoice:
    """What one container asked for and what it gets."""

    name: str
    index: int  # position in spec.containers or spec.initContainers
    init: bool
    request: str  # the original quantity, as written
    request_mib: int
    profile: str = ""  # MIG profile, or "gpu" for a whole GPU
    resource: str = ""  # nvidia.com/mig-<p> or nvidia.com/gpu
    instance_mib: int = 0
    sidecar: bool = False  # an init container with restartPolicy: Always (runs alongside the app containers)

    @property
    def waste_mib(self) -> int:
        return max(0, self.instance_mib - self.request_mib)

    @property
    def where(self) -> str:
        return f"{'initContainers' if self.init else 'containers'}[{self.index}] {self.name!r}"


@dataclass(frozen=True)
class VramDecision:
    action: Literal["leave", "rewrite", "reject"]
    reason: str
    choices: tuple[ContainerChoice, ...] = ()
    model: str = ""  # model id the choice was made for
    products: tuple[str, ...] = ()  # the affinity's product values
    capacity: Capacity | None = None
    node: str = ""  # the node with that capacity (a hint)
    alternatives: tuple[str, ...] = ()  # other models that could serve, ranked, for the message

    @property
    def waste_mib(self) -> int:
        return sum(c.waste_mib for c in self.choices)

    @property
    def message(self) -> str:
        """One paragraph for an Event or a rejection: what was chosen and why."""
        if self.action != "rewrite":
            return self.reason
        parts = [
            f"{c.name}: {c.request} ({c.request_mib} MiB) -> {c.resource} ({c.instance_mib} MiB, {c.waste_mib} MiB "
            "spare)"
            for c in self.choices
        ]
        text = f"{'; '.join(parts)} on {self.model} ({', '.join(self.products)}): {self.reason}"
        if self.alternatives:
            text += f"; also possible: {', '.join(self.alternatives)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "model": self.model or None,
            "products": list(self.products),
            "capacity": self.capacity,
            "node": self.node or None,
            "waste_mib": self.waste_mib,
            "containers": [
                {
                    "name": c.name,
                    "init": c.init,
                    "request": c.request,
                    "request_mib": c.request_mib,
                    "profile": c.profile or None,
                    "resource": c.resource or None,
                    "instance_mib": c.instance_mib or None,
                }
                for c in self.choices
            ],
        }


def _leave(reason: str) -> VramDecision:
    return VramDecision("leave", reason)


def _resources(c: Mapping[str, Any]) -> dict[str, Any]:
    res = c.get("resources") or {}
    merged: dict[str, Any] = dict(res.get("limits") or {})  # requests default to limits
    merged.update(res.get("requests") or {})
    return merged


def _names_gpu(resource: str) -> bool:
    return resource == WHOLE_GPU_RESOURCE or resource.startswith(RESOURCE_PREFIX)


def vram_requests(pod: Mapping[str, Any], rules: VramRules) -> tuple[list[ContainerChoice], list[str]]:
    """Each container's VRAM request (app containers first, then init containers), and problems reading them."""
    spec = pod.get("spec") or {}
    out: list[ContainerChoice] = []
    problems: list[str] = []
    for init, key in ((False, "containers"), (True, "initContainers")):
        for i, c in enumerate(spec.get(key) or []):
            raw = _resources(c).get(rules.resource)
            if raw is None:
                continue
            name = str(c.get("name") or f"#{i}")
            try:
                value = parse_quantity(raw)
            except ValueError as e:
                problems.append(f"{key}[{i}] {name!r}: {rules.resource}: {e}")
                continue
            if value < 0:
                problems.append(f"{key}[{i}] {name!r}: {rules.resource}: {raw} is negative")
                continue
            if value == 0:
                continue
            sidecar = init and c.get("restartPolicy") == "Always"
            out.append(ContainerChoice(name, i, init, str(raw), math.ceil(value / MIB), sidecar=sidecar))
    return out, problems


def _pod_terms(spec: Mapping[str, Any]) -> tuple[dict[str, str], tuple[Term, ...]]:
    selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    na = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = []
    for t in na.get("nodeSelectorTerms") or []:
        exprs = tuple(
            Requirement(str(e.get("key")), str(e.get("operator")), tuple(str(v) for v in e.get("values") or ()))
            for e in t.get("matchExpressions") or []
        )
        fields = tuple(
            Requirement(str(e.get("key")), str(e.get("operator")), tuple(str(v) for v in e.get("values") or ()))
            for e in t.get("matchFields") or []
        )
        terms.append(Term(exprs, fields))
    return selector, tuple(terms)


def _allowed(node: NodeOffer, selector: Mapping[str, str], terms: Sequence[Term]) -> bool:
    if any(node.labels.get(k) != v for k, v in selector.items()):
        return False
    return not terms or any(t.matches(node.name, node.labels) for t in terms)


@dataclass(frozen=True)
class _Candidate:
    offer: ModelOffer
    choices: tuple[ContainerChoice, ...]
    capacity: Capacity
    node: str

    @property
    def wholes(self) -> int:
        return sum(1 for c in self.choices if c.profile == WHOLE)

    @property
    def waste(self) -> int:
        return sum(c.waste_mib for c in self.choices)

    def rank(self) -> tuple[object, ...]:
        available = 0 if self.capacity != "none" else 1
        return (available, self.wholes, self.waste, _CAPACITY_RANK[self.capacity], self.offer.model.id)

    def summary(self) -> str:
        what = "+".join(c.profile for c in self.choices)
        return f"{self.offer.model.id} {what} ({self.waste} MiB spare, {_capacity_words(self.capacity)})"


def _capacity_words(c: Capacity) -> str:
    return {"free": "free now", "plannable": "after a reshape", "none": "no capacity yet"}[c]


def _serve(model: GpuModel, request_mib: int, whole_gpu: bool) -> tuple[str, int] | None:
    """(profile, instance MiB) of the smallest plain profile covering the request; a whole GPU if allowed."""
    fits = [p for p in model.base_profiles if p.memory_mib >= request_mib]
    if fits:
        best = min(fits, key=lambda p: (p.memory_mib, p.compute_slices, p.name))
        return best.name, best.memory_mib
    if whole_gpu and model.memory_mib >= request_mib:
        return WHOLE, model.memory_mib
    return None


def _counts(choices: Sequence[ContainerChoice]) -> dict[str, int]:
    """Instances the pod holds per profile, with Kubernetes' effective-request rule (init containers reuse)."""
    apps = [{c.profile: Decimal(1)} for c in choices if not c.init]
    inits = [({c.profile: Decimal(1)}, c.sidecar) for c in choices if c.init]
    return {k: int(v) for k, v in effective_requests(apps, inits).items()}


def _node_capacity(model: GpuModel, node: NodeOffer, counts: Mapping[str, int]) -> Capacity:
    mig = {p: n for p, n in counts.items() if p != WHOLE}
    whole = counts.get(WHOLE, 0)
    mig_now = all(node.free.get(p, 0) >= n for p, n in mig.items())
    if mig_now and node.whole_free >= whole:
        return "free"
    whole_short = max(0, whole - node.whole_free)
    mig_gpus = 0
    if not mig_now:
        slices = sum(model.profile(p).memory_slices * n for p, n in mig.items())
        mig_gpus = math.ceil(slices / model.placement_units)
    if whole_short <= node.idle_whole and mig_gpus <= node.idle_mig and whole_short + mig_gpus <= node.idle:
        return "plannable"
    return "none"


def _products(offers: Iterable[ModelOffer], choices: Sequence[ContainerChoice]) -> tuple[str, ...]:
    """Products of the models present that give every chosen profile enough memory for its container.

    Both the `nvidia.com/gpu.product` values seen on nodes and the catalog's names for the same model, so a new
    node of that model (another form factor) qualifies too.
    """
    out: set[str] = set()
    for o in offers:
        ok = True
        for c in choices:
            if c.profile == WHOLE:
                ok = ok and o.model.memory_mib >= c.request_mib
            else:
                p = next((q for q in o.model.base_profiles if q.name == c.profile), None)
                ok = ok and p is not None and p.memory_mib >= c.request_mib
        if ok:
            out.update(o.products)
            out.update(o.model.gfd_products)  # the same model under its other product names (PCIe, SXM)
    return tuple(sorted(out))


def decide(
    pod: Mapping[str, Any],
    offers: Sequence[ModelOffer],
    rules: VramRules | None = None,
    namespace_labels: Mapping[str, str] | None = None,
) -> VramDecision:
    """What to do with one Pod object at creation (see the module docstring for the rules)."""
    rules = rules or VramRules()
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    annotations = meta.get("annotations") or {}
    if annotations.get(rules.opt_out_key) == rules.opt_out_value:
        return _leave(f"the pod is annotated {rules.opt_out_key}={rules.opt_out_value}")
    if (namespace_labels or {}).get(rules.opt_out_key) == rules.opt_out_value:
        return _leave(f"the namespace is labelled {rules.opt_out_key}={rules.opt_out_value}")
    if spec.get("schedulerName") == rules.fallback_scheduler:
        return _leave(f"schedulerName: {rules.fallback_scheduler} (migctl's fallback places it on a non-MIG GPU)")
    named = sorted(
        {
            r
            for key in ("containers", "initContainers")
            for c in spec.get(key) or []
            for r in _resources(c)
            if _names_gpu(r)
        }
    )
    if named:
        return _leave(f"it already names a GPU resource ({', '.join(named)})")
    wanted, problems = vram_requests(pod, rules)
    if problems:
        return VramDecision("reject", f"invalid {rules.resource} request: {'; '.join(problems)}")
    if not wanted:
        return _leave(f"no {rules.resource} request")
    if not offers:
        return _leave("no MIG-capable GPU node is known in the cluster")

    selector, terms = _pod_terms(spec)
    usable = []
    for o in offers:
        nodes = tuple(n for n in o.nodes if _allowed(n, selector, terms))
        if nodes:
            usable.append(ModelOffer(o.model, o.products, nodes))
    if not usable:
        return VramDecision(
            "reject",
            f"the pod's nodeSelector/node affinity allows none of the MIG-capable GPU nodes "
            f"({', '.join(o.model.id for o in offers)}); no MIG profile can be chosen for its {rules.resource} request",
        )

    candidates: list[_Candidate] = []
    for o in usable:
        chosen: list[ContainerChoice] = []
        for c in wanted:
            served = _serve(o.model, c.request_mib, rules.whole_gpu)
            if served is None:
                break
            profile, mib = served
            resource = WHOLE_GPU_RESOURCE if profile == WHOLE else resource_name(profile)
            chosen.append(replace(c, profile=profile, resource=resource, instance_mib=mib))
        else:
            counts = _counts(chosen)
            best: tuple[Capacity, str] = ("none", "")
            for n in o.nodes:
                cap = _node_capacity(o.model, n, counts)
                if _CAPACITY_RANK[cap] < _CAPACITY_RANK[best[0]]:
                    best = (cap, n.name)
            candidates.append(_Candidate(o, tuple(chosen), best[0], best[1]))
    if not candidates:
        return VramDecision("reject", _too_large(wanted, usable, rules))

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
        top.offer.model.id,
        _products(usable, top.choices),
        top.capacity,
        top.node,
        tuple(c.summary() for c in candidates[1:4]),
    )


def _too_large(wanted: Sequence[ContainerChoice], offers: Sequence[ModelOffer], rules: VramRules) -> str:
    largest = max(
        ((p.memory_mib, p.name, o.model.id) for o in offers for p in o.model.base_profiles), default=(0, "", "")
    )
    biggest_gpu = max(((o.model.memory_mib, o.model.id) for o in offers), default=(0, ""))
    reach = max(largest[0], biggest_gpu[0] if rules.whole_gpu else 0)
    too_big = [c for c in wanted if c.request_mib > reach]
    if too_big:
        c = max(too_big, key=lambda c: c.request_mib)
        text = (
            f"{c.where} asks for {c.request} ({c.request_mib} MiB, {round_gib(c.request_mib)} GiB) of GPU memory "
            f"({rules.resource}); the largest MIG instance on the GPUs in this cluster is {largest[1]} with "
            f"{largest[0]} MiB ({round_gib(largest[0])} GiB, {largest[2]})"
        )
        if c.request_mib <= biggest_gpu[0]:
            text += (
                f"; a whole {biggest_gpu[1]} GPU ({biggest_gpu[0]} MiB) would hold it: request nvidia.com/gpu: 1, "
                "or let migctl do it (webhook.whole_gpu: true)"
            )
        else:
            text += f"; no single GPU here has that much memory (largest: {biggest_gpu[0]} MiB, {biggest_gpu[1]})"
        return text + ". Ask for less, or split the work across containers (each container gets its own instance)."
    # Not reached: serving is monotonic in the request, so the model that serves the largest request serves all.
    return f"no GPU model here can serve {', '.join(f'{c.name}: {c.request}' for c in wanted)}"


# ---------------------------------------------------------------------------------------------------------
# The rewrite


def _set_resource(container: dict[str, Any], rules: VramRules, choice: ContainerChoice) -> None:
    res = container.setdefault("resources", {})
    had_requests = rules.resource in (res.get("requests") or {})
    for part in ("limits", "requests"):
        if isinstance(res.get(part), dict):
            res[part].pop(rules.resource, None)
    res.setdefault("limits", {})
    if res["limits"] is None:
        res["limits"] = {}
    res["limits"][choice.resource] = "1"
    if had_requests:
        res["requests"][choice.resource] = "1"
    for part in ("limits", "requests"):
        if part in res and not res[part]:
            del res[part]


def _add_product_term(spec: dict[str, Any], products: Sequence[str]) -> None:
    expr = {"key": PRODUCT_LABEL, "operator": "In", "values": list(products)}
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = list(required.get("nodeSelectorTerms") or [])
    if terms:
        terms = [{**t, "matchExpressions": [*(t.get("matchExpressions") or []), expr]} for t in terms]
    else:
        terms = [{"matchExpressions": [expr]}]
    spec["affinity"] = {
        **affinity,
        "nodeAffinity": {
            **node_affinity,
            "requiredDuringSchedulingIgnoredDuringExecution": {**required, "nodeSelectorTerms": terms},
        },
    }


def choice_record(decision: VramDecision) -> dict[str, Any]:
    """The `migctl.io/vram-choice` annotation's content."""
    return {
        "model": decision.model,
        "products": list(decision.products),
        "containers": [
            {"name": c.name, "init": c.init, "request": c.request, "resource": c.resource} for c in decision.choices
        ],
    }


def apply(pod: Mapping[str, Any], decision: VramDecision, rules: VramRules | None = None) -> dict[str, Any]:
    """The pod after a `rewrite` decision (a deep copy; the input is not changed)."""
    if decision.action != "rewrite":
        raise ValueError(f"only a rewrite decision changes a pod, not {decision.action!r}")
    rules = rules or VramRules()
    out: dict[str, Any] = copy.deepcopy(dict(pod))
    spec = out.setdefault("spec", {})
    for c in decision.choices:
        _set_resource(spec["initContainers" if c.init else "containers"][c.index], rules, c)
    _add_product_term(spec, decision.products)
    meta = out.setdefault("metadata", {})
    annotations = dict(meta.get("annotations") or {})
    largest = max(decision.choices, key=lambda c: c.request_mib)
    annotations[rules.annotation] = largest.request
    annotations[CHOICE_ANNOTATION] = json.dumps(choice_record(decision), sort_keys=True, separators=(",", ":"))
    meta["annotations"] = annotations
    return out
