"""The rewrite of a pod the VRAM-request decision chose profiles for: resources, node affinity, annotations (the
webhook's patch is built on the Pod object, so it lives with the other readers and writers of API objects).

The original request is kept in the `migctl.io/vram` annotation (the largest container request, a single
quantity the planner reads as the real need) and the full choice in `migctl.io/vram-choice` (versioned JSON,
`wire/vram_choice.py`).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from migctl.core.vram.choice import CHOICE_ANNOTATION, ContainerChoice, VramDecision, VramRules
from migctl.core.vram.offers import PRODUCT_LABEL
from migctl.wire import vram_choice
from migctl.wire.names import QUEUE_GATE
from migctl.wire.vram_choice import ContainerRecord, VramChoice


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


def choice_record(decision: VramDecision, admission: str = "") -> VramChoice:
    """The `migctl.io/vram-choice` annotation's content (codec: `wire/vram_choice.py`)."""
    containers = tuple(ContainerRecord(c.name, c.init, c.request, c.resource) for c in decision.choices)
    return VramChoice(decision.model, tuple(decision.products), containers, admission)


def apply(
    pod: Mapping[str, Any], decision: VramDecision, rules: VramRules | None = None, admission: str = ""
) -> dict[str, Any]:
    """The pod after a `rewrite` decision (a deep copy; the input is not changed). `admission`: the admission
    request's uid, recorded for a pod made from generateName (the Event sender finds it by it)."""
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
    annotations[CHOICE_ANNOTATION] = vram_choice.encode(choice_record(decision, admission))
    meta["annotations"] = annotations
    return out


def add_queue_gate(pod: dict[str, Any]) -> None:
    """Append migctl's queue gate to the pod's scheduling gates (the webhook's gating write)."""
    spec = pod.setdefault("spec", {})
    spec["schedulingGates"] = [*(spec.get("schedulingGates") or []), {"name": QUEUE_GATE}]
