"""Keep the VRAM extended resource in each fallback node's status capacity/allocatable.

The documented way to advertise a node-level extended resource without a device plugin: a JSON patch on
`/api/v1/nodes/<node>/status`. migctl owns the configured resource name: it adds or updates it where a node has
GPUs without MIG and removes it where none is left (for example when a GPU turns MIG on). The patch touches only
that resource's two entries; the chart's status-restriction policy (a ValidatingAdmissionPolicy) refuses any other
change the fallback's ServiceAccount might make through `nodes/status` (labels, conditions, addresses, other
resources), which RBAC alone cannot narrow.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from migctl.adapters.kube.interface import FallbackApi
from migctl.adapters.node_status import vram_capacity_patch
from migctl.adapters.views import node_view
from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import Catalog
from migctl.fallback.capacity import node_gpus, node_units

log = logging.getLogger(__name__)


class Advertiser:
    """One `sync()` per resync: compares each GPU node's advertised VRAM with its hardware and patches the gap."""

    def __init__(self, kube: FallbackApi, catalog: Catalog, settings: FallbackSettings | None = None) -> None:
        self.kube = kube
        self.catalog = catalog
        self.settings = settings or FallbackSettings()

    def sync(self, nodes: Iterable[Mapping[str, Any]]) -> dict[str, int | None]:
        """Patch nodes whose advertised VRAM is off; returns node -> units written (None: removed)."""
        changed: dict[str, int | None] = {}
        for node in nodes:
            name = node_view(node).name
            gpus = node_gpus(node, self.catalog)
            desired = node_units(gpus, self.settings) if gpus is not None else None
            ops = vram_capacity_patch(node, self.settings.resource, desired)
            if not ops:
                continue
            self.kube.patch_node_status(name, ops)
            changed[name] = desired
            if desired is None:
                log.info("node %s: removed %s (no GPU without MIG left)", name, self.settings.resource)
            else:
                log.info("node %s: %s = %d (%s)", name, self.settings.resource, desired, gpus.source if gpus else "")
        return changed
