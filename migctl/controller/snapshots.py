"""The snapshot a reconcile plans from: the cache's objects less opted-out and reserved pending pods.

Split from loop.py (which keeps only watching, leadership and executing).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping

from migctl.adapters.kube.interface import Obj, ObjectCache
from migctl.adapters.memo import ConversionMemo
from migctl.adapters.objects import snapshot_from_objects
from migctl.config import Config
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.cluster import Snapshot
from migctl.core.model.settings import GpuOperatorSettings

log = logging.getLogger("migctl.controller.loop")


def operator_settings(config: Config, cache: ObjectCache) -> GpuOperatorSettings:
    """Current layouts resolve against migctl's ConfigMap once it exists (it holds the seeded configs too)."""
    s = config.controller
    if cache.configmap(s.configmap_namespace, s.configmap_name) is None:
        return config.gpu_operator
    return config.gpu_operator.model_copy(
        update={"configmap_name": s.configmap_name, "configmap_namespace": s.configmap_namespace}
    )


def build_snapshot(
    cache: ObjectCache,
    config: Config,
    catalog: Catalog,
    memo: ConversionMemo,
    reserved: Collection[str],
    in_place: Callable[[Mapping[str, str]], bool],
) -> tuple[Snapshot, set[str]]:
    """Snapshot from the cache without opted-out and reserved pending pods; also the opted-out pod keys."""
    key = config.controller.opt_out_label
    opted_ns = {ns for ns, labels in cache.namespace_labels().items() if labels.get(key) == "true"}
    objects: list[Obj] = []
    opted_out: set[str] = set()
    for obj in cache.objects():
        if obj.get("kind") == "Pod":
            meta = obj.get("metadata") or {}
            pod_key = f"{meta.get('namespace')}/{meta.get('name')}"
            pending = not (obj.get("spec") or {}).get("nodeName")
            if meta.get("namespace") in opted_ns or (meta.get("annotations") or {}).get(key) == "true":
                opted_out.add(pod_key)
                if pending:
                    continue
            if pending and pod_key in reserved:
                continue
        objects.append(obj)
    snapshot = snapshot_from_objects(
        objects,
        catalog,
        config.planner,
        operator_settings(config, cache),
        source="cluster cache",
        memo=memo,
        in_place=in_place,
    )
    for w in snapshot.warnings:
        log.debug("snapshot: %s", w)
    return snapshot, opted_out
