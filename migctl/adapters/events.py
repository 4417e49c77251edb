"""The one shape of a core/v1 Event that every migctl component writes (controller, webhook, fallback)."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any


def event_body(
    involved: dict[str, Any], reason: str, message: str, component: str, instance: str, warning: bool = False
) -> dict[str, Any]:
    """A new Event on `involved` (an object reference with kind, name and, for namespaced objects, namespace).

    Each call makes a new Event with a unique name; the message is cut to the API's 1 KiB limit.
    """
    namespace = involved.get("namespace") or "default"
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{involved['name']}.{uuid.uuid4().hex[:12]}", "namespace": namespace},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:1024],
        "type": "Warning" if warning else "Normal",
        "source": {"component": component, "host": instance},
        "reportingComponent": component,
        "reportingInstance": instance[:128],
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
