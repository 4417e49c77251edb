"""The snapshot a reconcile plans from: the cache's objects less opted-out and reserved pending pods, read by the one
reader `migctl plan` uses too (`adapters.objects.read_cluster`), DRA objects included.

Split from loop.py (which keeps only watching, leadership and executing). On a DRA cluster the same reading gives
the DRA nodes (their ResourceSlices), the claims' demand as pods, and what the step's fences read (`dra_facts`,
shared with `migctl plan`, so the fences it shows are the ones the controller would set).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migctl.adapters.dra.snapshot import DraReading
from migctl.adapters.kube.interface import Obj, ObjectCache
from migctl.adapters.memo import ConversionMemo
from migctl.adapters.objects import read_cluster
from migctl.adapters.views import as_mapping, node_view
from migctl.config import Config, ControllerSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.settings import GpuOperatorSettings
from migctl.reconcile.step import DraFacts

log = logging.getLogger("migctl.controller.loop")


def operator_settings(config: Config, cache: ObjectCache) -> GpuOperatorSettings:
    """Current layouts resolve against migctl's ConfigMap once it exists (it holds the seeded configs too)."""
    s = config.controller
    if cache.configmap(s.configmap_namespace, s.configmap_name) is None:
        return config.gpu_operator
    return config.gpu_operator.model_copy(
        update={"configmap_name": s.configmap_name, "configmap_namespace": s.configmap_namespace}
    )


@dataclass(frozen=True)
class Reading:
    """One reconcile's reading: the snapshot, the opted-out pod keys, and what migctl read of the DRA objects."""

    snapshot: Snapshot
    opted_out: frozenset[str]
    dra: DraReading


def dra_facts(reading: DraReading, settings: ControllerSettings) -> DraFacts | None:
    """What the step's fences read (None: no DRA node, or steering off with `dra_max_fences_per_node: 0`, so
    the step makes no fence and the controller lifts the ones it holds)."""
    if not reading.pools or settings.dra_max_fences_per_node == 0:
        return None
    return DraFacts(
        reading.pools, reading.classes, reading.queue, reading.allocated, reading.fences,
        cap=settings.dra_max_fences_per_node,
    )  # fmt: skip


def build_snapshot(
    cache: ObjectCache,
    objects: Iterable[Obj],
    config: Config,
    catalog: Catalog,
    memo: ConversionMemo,
    reserved: Collection[str],
    in_place: Callable[[Mapping[str, str]], bool],
) -> Reading:
    """`objects` (the cache's) read without opted-out and reserved pending pods. With a `node_selector`, only
    the ResourceSlices of the selected nodes count: another controller's nodes are not this one's to plan."""
    key = config.controller.opt_out_label
    opted_ns = {ns for ns, labels in cache.namespace_labels().items() if labels.get(key) == "true"}
    nodes = {node_view(n).name for n in cache.nodes.items()} if config.controller.node_selector else None
    kept: list[Obj] = []
    opted_out: set[str] = set()
    for obj in objects:
        kind = obj.get("kind")
        if kind == "Pod":
            meta = obj.get("metadata") or {}
            pod_key = f"{meta.get('namespace')}/{meta.get('name')}"
            pending = not (obj.get("spec") or {}).get("nodeName")
            if meta.get("namespace") in opted_ns or (meta.get("annotations") or {}).get(key) == "true":
                opted_out.add(pod_key)
                if pending:
                    continue
            if pending and pod_key in reserved:
                continue
        elif kind == "ResourceSlice" and nodes is not None and _slice_node(obj) not in nodes:
            continue
        kept.append(obj)
    snapshot, dra = read_cluster(
        kept,
        catalog,
        config.planner,
        operator_settings(config, cache),
        source="cluster cache",
        memo=memo,
        in_place=in_place,
    )
    for w in snapshot.warnings:
        log.debug("snapshot: %s", w)
    return Reading(snapshot, frozenset(opted_out), dra)


def _slice_node(obj: Mapping[str, Any]) -> str | None:
    node = as_mapping(obj.get("spec")).get("nodeName")
    return node if isinstance(node, str) else None
