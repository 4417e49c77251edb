"""The MutatingWebhookConfiguration the webhook expects (the chart renders the same; tests create it from here)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from migctl.webhook.settings import WebhookSettings

WEBHOOK_NAME = "vram.migctl.io"


def webhook_configuration(
    name: str,
    client_config: Mapping[str, Any],
    settings: WebhookSettings | None = None,
    ca_pem: bytes | None = None,
    extra_namespace_expressions: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """`client_config`: `{"url": ...}` or `{"service": {...}}`; the caBundle is added when `ca_pem` is given.

    Pods only, CREATE only. Namespaces labelled `<opt_out_key>=<opt_out_value>` are never sent (namespaceSelector),
    so an outage cannot touch them either. `sideEffects: NoneOnDryRun`: the only side effect is the Event, and it
    is skipped for dry-run requests.
    """
    s = settings or WebhookSettings()
    cc = dict(client_config)
    if ca_pem is not None:
        cc["caBundle"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "migctl"}},
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
                        {"key": s.opt_out_key, "operator": "NotIn", "values": [s.opt_out_value]},
                        *[dict(e) for e in extra_namespace_expressions],
                    ]
                },
            }
        ],
    }
