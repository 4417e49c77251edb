"""The MutatingWebhookConfiguration the webhook expects (the chart renders the same; tests create it from here).

tests/cluster/test_deploy.py renders the chart and compares its webhook entry with `webhook_configuration()` for
the same config, so the two cannot drift (path, opt-out key, VRAM resource, matchConditions).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

from migctl.config.webhook import WebhookSettings
from migctl.core.model.settings import PlannerSettings
from migctl.wire.names import MIG_RESOURCE_PREFIX, MIGCTL, PART_OF, WEBHOOK_NAME


def _asks(resource: str) -> str:
    """CEL: container `c` names `resource` in its limits or requests (either is a request; see vram_requests)."""
    r = json.dumps(resource)  # a JSON string is a valid CEL string literal (Helm's toJson writes the same)
    return (
        f"has(c.resources) && ((has(c.resources.limits) && {r} in c.resources.limits) || "
        f"(has(c.resources.requests) && {r} in c.resources.requests))"
    )


def _asks_mig() -> str:
    """CEL: container `c` names a MIG profile resource (`nvidia.com/mig-<profile>`) in its limits or requests."""
    p = json.dumps(MIG_RESOURCE_PREFIX)
    return (
        f"has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k.startsWith({p}))) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, k.startsWith({p}))))"
    )


def match_conditions(resource: str, queue_gate: bool = False) -> list[dict[str, str]]:
    """Only pods with a container or init container asking for `resource` are sent to the webhook, and with the
    queue gate on (`controller.queue_gate`) those asking for a MIG profile too (the webhook gates them).

    Every other pod CREATE (the vast majority) never leaves the API server, so a slow or absent webhook costs
    them nothing. The webhook still decides everything else (opt-out, fallback scheduler, invalid values) itself.
    """
    asks = _asks(resource)
    if queue_gate:
        asks = f"({asks}) || ({_asks_mig()})"
    return [
        {
            "name": "asks-for-vram-or-mig" if queue_gate else "asks-for-vram",
            "expression": f"(has(object.spec.containers) && object.spec.containers.exists(c, {asks})) || "
            f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {asks}))",
        }
    ]


def webhook_configuration(
    name: str,
    client_config: Mapping[str, Any],
    settings: WebhookSettings | None = None,
    ca_pem: bytes | None = None,
    extra_namespace_expressions: Sequence[Mapping[str, Any]] = (),
    planner: PlannerSettings | None = None,
    queue_gate: bool = False,
) -> dict[str, Any]:
    """`client_config`: `{"url": ...}` or `{"service": {...}}`; the caBundle is added when `ca_pem` is given.
    `queue_gate`: `controller.queue_gate` (pods asking for MIG profiles are sent too).

    Pods only, CREATE only, and only those asking for VRAM (`matchConditions`). Namespaces labelled
    `<opt_out_key>=<opt_out_value>` are never sent (namespaceSelector), so an outage cannot touch them either.
    `sideEffects: NoneOnDryRun`: the only side effect is the Event, and it is skipped for dry-run requests.
    """
    s = settings or WebhookSettings()
    rules = s.rules(planner)
    cc = dict(client_config)
    if ca_pem is not None:
        cc["caBundle"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {PART_OF: MIGCTL}},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": cc,
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                        "scope": "Namespaced",
                    }
                ],
                "failurePolicy": s.failure_policy,
                "matchPolicy": "Equivalent",
                "sideEffects": "NoneOnDryRun",
                "timeoutSeconds": s.timeout_s,
                "reinvocationPolicy": "Never",
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": rules.opt_out_key, "operator": "NotIn", "values": [rules.opt_out_value]},
                        *[dict(e) for e in extra_namespace_expressions],
                    ]
                },
                "matchConditions": match_conditions(rules.resource, queue_gate),
            }
        ],
    }
