"""AdmissionReview v1 in, AdmissionReview v1 out (a JSONPatch when the pod is rewritten). No I/O here.

Only CREATE of core/v1 Pods is looked at (the webhook configuration asks for nothing else); anything else is
allowed unchanged. With the queue gate on (and the controller alive, which the caller decides: `app.py`), a pod
whose every GPU demand, after the VRAM rewrite, is a MIG profile also gets migctl's scheduling gate
(`gate_reason`, docs/queue-gate.md). A decision to reject becomes `allowed: false` with the message and HTTP-style
code 403 in `status`, which kubectl prints as `admission webhook "..." denied the request: <message>`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from migctl.adapters.pod_rewrite import add_queue_gate, apply
from migctl.adapters.pods import gpu_demand, placement_from_object
from migctl.adapters.requests import vram_asks
from migctl.adapters.views import pod_view
from migctl.core.model.cluster import Pod
from migctl.core.vram.decide import VramDecision, VramRules, decide, opted_out
from migctl.core.vram.offers import ModelOffer, OfferIndex

API_VERSION = "admission.k8s.io/v1"


class BadReviewError(ValueError):
    """The body is not an AdmissionReview v1 request (answered with HTTP 400)."""


@dataclass(frozen=True)
class Outcome:
    """The response body, and for the caller's Event: the decision and the pod as admitted (None: untouched)."""

    response: dict[str, Any]
    decision: VramDecision | None = None
    pod: dict[str, Any] | None = None
    dry_run: bool = False
    gated: bool = False  # the patch adds migctl's queue gate
    namespace: str = ""  # the request's (a pod's own may be unset at admission)
    who: str = ""  # namespace/name, or namespace/generateName* (logs)
    request_uid: str = ""
    mentions_vram: bool = False  # the pod's spec names the VRAM resource (a `leave` worth logging)


def _escape(token: str) -> str:
    return token.replace("~", "~0").replace("/", "~1")


def json_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations that turn `old` into `new`, at the granularity webhooks need.

    Changed members of `metadata` and `spec` are written whole with `add` (which also replaces an existing
    member); removed members get `remove`. Coarse, but exact and easy to check.
    """
    ops: list[dict[str, Any]] = []
    for section in ("metadata", "spec"):
        a, b = old.get(section), new.get(section)
        if a == b:
            continue
        if not isinstance(a, Mapping) or not isinstance(b, Mapping):
            ops.append({"op": "add", "path": f"/{section}", "value": b})
            continue
        for key in sorted(set(a) | set(b)):
            path = f"/{section}/{_escape(key)}"
            if key not in b:
                ops.append({"op": "remove", "path": path})
            elif key not in a or a[key] != b[key]:
                ops.append({"op": "add", "path": path, "value": b[key]})
    return ops


def apply_patch(doc: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Apply the two-level `add`/`remove` operations `json_patch` makes (for tests and `migctl plan`)."""
    out: dict[str, Any] = json.loads(json.dumps(doc))
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).lstrip("/").split("/")]
        target = out
        for p in parts[:-1]:
            target = target[p]
        if op["op"] == "add":
            target[parts[-1]] = json.loads(json.dumps(op["value"]))
        elif op["op"] == "remove":
            del target[parts[-1]]
        else:
            raise ValueError(f"unsupported op {op['op']!r}")
    return out


def _response(uid: str, allowed: bool = True, **extra: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {"uid": uid, "allowed": allowed, **extra}}


DEFAULT_SCHEDULER = "default-scheduler"


def gate_reason(pod: Mapping[str, Any], rules: VramRules, namespace_labels: Mapping[str, str] | None) -> str:
    """Why `pod` (as admitted, after any VRAM rewrite) gets no queue gate; "" when it gets one: every GPU demand
    a MIG profile (the planner's own reading of its requests), no nodeName (the API server refuses gates with
    one), the default scheduler's, not gated yet, and neither it nor its namespace opted out of the webhook."""
    view = pod_view(pod)
    left = opted_out(view.annotations, namespace_labels, rules)
    if left:
        return left
    if not view.pending:
        return "it names its node"
    if view.scheduler_name != DEFAULT_SCHEDULER:
        return f"schedulerName {view.scheduler_name}"
    if not view.gates_readable:
        return "unreadable spec.schedulingGates"
    if view.gated:
        return "already gated"
    try:
        demands = gpu_demand(pod, rules.resource)
    except (ValueError, TypeError) as e:
        return f"unreadable GPU requests: {e}"
    if not demands or any(d.kind != "profile" for d in demands):
        return "it does not ask for MIG profiles only"
    return ""


def review(
    body: Any,
    offers: Sequence[ModelOffer] | OfferIndex,
    rules: VramRules,
    namespace_labels: Callable[[str], Mapping[str, str] | None] = lambda _ns: None,
    queue_gate: bool = False,
) -> Outcome:
    """Answer one AdmissionReview. Raises BadReviewError for a body that is not one. `queue_gate`: gate the pods
    `gate_reason` allows (the setting is on and the controller is alive)."""
    if not isinstance(body, Mapping) or body.get("kind") != "AdmissionReview":
        raise BadReviewError("expected an AdmissionReview object")
    if body.get("apiVersion") != API_VERSION:
        raise BadReviewError(f"expected apiVersion {API_VERSION}, got {body.get('apiVersion')!r}")
    req = body.get("request")
    if not isinstance(req, Mapping) or not req.get("uid"):
        raise BadReviewError("request.uid missing")
    uid = str(req["uid"])
    kind = req.get("kind") or {}
    pod = req.get("object")
    if (
        req.get("operation") != "CREATE"
        or kind.get("kind") != "Pod"
        or kind.get("group", "") != ""
        or req.get("subResource")
        or not isinstance(pod, Mapping)
    ):
        return Outcome(_response(uid))
    view = pod_view(pod)
    namespace = str(req.get("namespace") or view.namespace)
    try:
        placement: Pod | str = placement_from_object(pod)
    except (ValueError, KeyError, TypeError) as e:
        placement = f"unreadable nodeSelector, node affinity or tolerations: {e!r}"  # matters only for VRAM pods
    labels = namespace_labels(namespace)
    done = partial(
        Outcome,
        namespace=namespace,
        who=f"{namespace}/{view.name or view.generate_name + '*'}",
        request_uid=uid,
        mentions_vram=rules.resource in str(pod),
    )
    decision = decide(view.annotations, view.scheduler_name, vram_asks(pod, rules.resource), placement, offers, rules,
                      labels)  # fmt: skip
    dry_run = bool(req.get("dryRun"))
    if decision.action == "leave" and not queue_gate:
        return done(_response(uid), decision, None, dry_run)
    if decision.action == "reject":
        status = {"code": 403, "reason": "Forbidden", "message": decision.message}
        return done(_response(uid, False, status=status), decision, None, dry_run)
    if decision.action == "rewrite":
        # generateName: no name yet, so the Event sender finds the pod by this request's uid (`events.py`)
        admission = "" if view.name else uid
        new = apply(pod, decision, rules, admission)
    else:
        new = json.loads(json.dumps(pod))
    gated = queue_gate and not gate_reason(new, rules, labels)
    if gated:
        add_queue_gate(new)
    elif decision.action == "leave":
        return done(_response(uid), decision, None, dry_run)
    patch = json_patch(pod, new)
    encoded = base64.b64encode(json.dumps(patch, separators=(",", ":")).encode()).decode()
    return done(_response(uid, True, patchType="JSONPatch", patch=encoded), decision, new, dry_run, gated)
