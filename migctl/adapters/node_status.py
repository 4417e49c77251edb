"""Writes to a Node's status, as JSON patches: the fallback's VRAM units in capacity and allocatable.

A node's status is the kubelet's; the fallback patches only its own extended resource there (the chart's
ValidatingAdmissionPolicy refuses anything else), so the patch names exactly that key, or says there is nothing
to do.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _pointer(resource: str) -> str:
    """A JSON-pointer token (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return resource.replace("~", "~0").replace("/", "~1")


def vram_capacity_patch(node: Mapping[str, Any], resource: str, desired: int | None) -> list[dict[str, Any]]:
    """JSON-patch operations that bring the node's capacity and allocatable of `resource` to `desired` (None:
    absent); [] when in sync."""
    raw = node.get("status")
    return capacity_patch(raw if isinstance(raw, Mapping) else {}, resource, desired)


def capacity_patch(status: Mapping[str, Any], resource: str, desired: int | None) -> list[dict[str, Any]]:
    """JSON-patch operations that bring capacity and allocatable to `desired` (None: absent); [] when in sync."""
    ops: list[dict[str, Any]] = []
    for part in ("capacity", "allocatable"):
        block = status.get(part)
        current = block.get(resource) if isinstance(block, Mapping) else None
        path = f"/status/{part}/{_pointer(resource)}"
        if desired is None:
            if current is not None:
                ops.append({"op": "remove", "path": path})
        elif current != str(desired):
            if status.get(part) is None:
                ops.append({"op": "add", "path": f"/status/{part}", "value": {}})
            ops.append({"op": "add", "path": path, "value": str(desired)})
    return ops
