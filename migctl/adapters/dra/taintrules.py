"""DeviceTaintRules -> migctl's own fences: which rules are migctl's, which node and device each fences, and why.

One reader for both sides: the snapshot's `DraReading.fences` (what first fit sees fenced, for the step) and the
controller's fence reconcile (which rules it may delete, by name and uid) read the rules through `owned_rules`, so
the two can never disagree about what migctl holds.

A rule is migctl's when it carries the labels `FENCE_NODE` and `FENCE_PURPOSE` (`placement`: DynamicMIG steering;
`reshape`: a static-MIG change) and selects one device of NVIDIA's driver. The node is the annotation `FENCE_NODE`
(the whole name; the label may be a digest where the name is no label value), else the label.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migctl.adapters.views import as_mapping
from migctl.wire.names import FENCE_NODE, FENCE_PURPOSE, NVIDIA_DRA_DRIVER

PLACEMENT, RESHAPE = "placement", "reshape"


@dataclass(frozen=True)
class OwnedRule:
    name: str
    uid: str
    node: str
    device: str
    purpose: str
    pool: str = ""


def owned_rules(objects: Iterable[Mapping[str, object]]) -> list[OwnedRule]:
    """migctl's DeviceTaintRules among `objects` (other kinds and other owners' rules are skipped)."""
    out = []
    for o in objects:
        if o.get("kind") not in (None, "DeviceTaintRule"):
            continue
        meta = as_mapping(o.get("metadata"))
        labels, notes = as_mapping(meta.get("labels")), as_mapping(meta.get("annotations"))
        sel = as_mapping(as_mapping(o.get("spec")).get("deviceSelector"))
        node = notes.get(FENCE_NODE) or labels.get(FENCE_NODE)
        purpose, device, name = labels.get(FENCE_PURPOSE), sel.get("device"), meta.get("name")
        if (
            isinstance(node, str) and node and purpose in (PLACEMENT, RESHAPE) and isinstance(device, str)
            and isinstance(name, str) and sel.get("driver") == NVIDIA_DRA_DRIVER
        ):  # fmt: skip
            pool = sel.get("pool")
            uid = str(meta.get("uid") or "")
            out.append(OwnedRule(name, uid, node, device, str(purpose), pool if isinstance(pool, str) else ""))
    return sorted(out, key=lambda r: (r.node, r.purpose, r.device, r.name))


def placement_fences(rules: Iterable[OwnedRule]) -> dict[str, tuple[str, ...]]:
    """Per node, the devices migctl's placement fences hold (the step's `DraFacts.fences`)."""
    out: dict[str, set[str]] = {}
    for r in rules:
        if r.purpose == PLACEMENT:
            out.setdefault(r.node, set()).add(r.device)
    return {n: tuple(sorted(d)) for n, d in out.items()}
