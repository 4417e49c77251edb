"""The webhook's view of GPU capacity: nodes and pods read every `refresh_s`, summarised per GPU model.

Admission must answer in milliseconds, so it never lists the cluster itself: it reads the latest summary,
which a background thread rebuilds with the same adapter `migctl plan` uses (live GFD/NVML memory, layouts,
per-GPU usage). The summary is a hint (free instances, idle GPUs); the decision stays correct when it is
stale, only the model preference may be less good for up to one interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from migctl.adapters.objects import snapshot_from_objects
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.core.vram.offers import OfferIndex, offers_from_snapshot

log = logging.getLogger(__name__)


class ViewApi(Protocol):
    def cluster_objects(
        self, operator: GpuOperatorSettings, *, active_pods_only: bool = False, configmap_optional: bool = False
    ) -> list[dict[str, Any]]: ...
    def namespace_labels(self) -> dict[str, dict[str, str]]: ...


@dataclass(frozen=True)
class Summary:
    offers: OfferIndex = field(default_factory=lambda: OfferIndex(()))  # GPU classes, and the decisions' memos
    namespaces: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    at: float = 0.0


class ClusterView:
    """`refresh()` rebuilds the summary; `summary` is the latest (swapped atomically, read without a lock)."""

    def __init__(
        self,
        kube: ViewApi,
        catalog: Catalog,
        planner: PlannerSettings | None = None,
        operator: GpuOperatorSettings | None = None,
    ) -> None:
        self.kube = kube
        self.catalog = catalog
        self.planner = planner or PlannerSettings()
        self.operator = operator or GpuOperatorSettings()
        self.summary = Summary()
        self.ready = threading.Event()
        self.last_error = ""

    def refresh(self) -> Summary:
        objects = self.kube.cluster_objects(self.operator, active_pods_only=True, configmap_optional=True)
        namespaces = self.kube.namespace_labels()
        snapshot = snapshot_from_objects(objects, self.catalog, self.planner, self.operator, "cluster")
        index = OfferIndex(offers_from_snapshot(snapshot, self.planner))
        summary = Summary(index, namespaces, snapshot.warnings, time.time())
        self.summary = summary
        self.ready.set()
        return summary

    def namespace_labels(self, namespace: str) -> Mapping[str, str] | None:
        return self.summary.namespaces.get(namespace)
