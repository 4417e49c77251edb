"""Kubernetes objects (as plain dicts: kubectl `-o yaml/json`, or the client's serialized form) -> planner models.

The same translation serves `migctl plan --snapshot FILE`, the live `migctl plan`, and the controller: the
adapter decides what each label, annotation and status field means; the core only sees plain models. A bad
object never aborts the whole snapshot: a broken pod becomes a per-pod rejection, a node with an unknown GPU a
warning, each naming the object and the field. Pods are translated in `pods.py`, nodes in `nodes.py` (their GPUs
read by `node_gpus.py`), typed field access is `fields.py`, and files are read with bounded work by `safe_yaml.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from migctl.adapters.dra.snapshot import DRA_KINDS, DraReading, dra_node, read_dra, with_claims
from migctl.adapters.fields import short
from migctl.adapters.memo import ConversionMemo, NodeOutcome, PodOutcome
from migctl.adapters.nodes import NodeContext, node_from_object, offers
from migctl.adapters.pods import Doubts, Shapes, meta_of, pod_from_object
from migctl.adapters.safe_yaml import UnsafeInputError, load_documents
from migctl.core.dra.devices import NodePool
from migctl.core.hardware.catalog import Catalog
from migctl.core.migparted.config import parse
from migctl.core.model.cluster import Node, Pod, Snapshot
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.errors import InputError
from migctl.wire.names import FALLBACK_SCHEDULER, opts_in_place

TERMINAL = ("Succeeded", "Failed")


@dataclass
class _Objects:
    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    configmaps: list[dict[str, Any]] = field(default_factory=list)
    dra: list[Mapping[str, Any]] = field(default_factory=list)  # ResourceSlices, claims, DeviceClasses, ...


def load_objects(path: Path) -> list[dict[str, Any]]:
    """Read a `kubectl get ... -o yaml|json` List (or several YAML documents) from a file, with bounded work."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(str(path), f"cannot read the snapshot: {e.strerror}") from e
    except UnicodeDecodeError as e:
        raise InputError(str(path), f"not UTF-8 text ({e.reason} at byte {e.start}); expected YAML or JSON") from e
    try:
        docs = load_documents(text)
    except UnsafeInputError as e:
        raise InputError(str(path), f"refused: {e}") from e
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise InputError(str(path), f"not valid YAML or JSON ({e}); expected the output of kubectl get -o yaml") from e
    items: list[dict[str, Any]] = []
    for n, doc in enumerate(docs):
        if doc is None:
            continue
        if not isinstance(doc, dict):
            raise InputError(str(path), f"document {n}: expected a Kubernetes object or List, got {type(doc).__name__}")
        if "items" in doc:
            if not isinstance(doc["items"], list):
                raise InputError(str(path), f"document {n}: items: expected a list, got {type(doc['items']).__name__}")
            for i, item in enumerate(doc["items"]):
                if not isinstance(item, dict):
                    raise InputError(str(path), f"items[{i}]: expected an object, got {type(item).__name__}")
                items.append(item)
        else:
            items.append(doc)
    return items


def _sort(objects: Iterable[Mapping[str, Any]], source: str) -> _Objects:
    out = _Objects()
    for i, obj in enumerate(objects):
        kind = obj.get("kind")
        if kind == "Pod":  # most objects: nothing here changes them, so a dict is kept as it is
            out.pods.append(obj if type(obj) is dict else dict(obj))
        elif kind == "Node":
            out.nodes.append(obj if type(obj) is dict else dict(obj))
        elif kind == "ConfigMap":
            out.configmaps.append(obj if type(obj) is dict else dict(obj))
        elif kind in DRA_KINDS:
            out.dra.append(obj)
        elif kind is None:
            raise InputError(source, f"items[{i}].kind: missing; expected Node, Pod or ConfigMap objects")
    return out


# ---------------------------------------------------------------------------------------------------------
# Snapshot


# Any of these from translating one object costs that object only (its own rejection or warning), never the
# snapshot: the precise messages come from the checks above, this is the net under them.
OBJECT_ERRORS = (ValueError, TypeError, KeyError, AttributeError, ArithmeticError, RecursionError)


def snapshot_from_objects(
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    settings: PlannerSettings | None = None,
    operator: GpuOperatorSettings | None = None,
    source: str = "snapshot",
    memo: ConversionMemo | None = None,
    in_place: Callable[[Mapping[str, str]], bool] | None = None,
) -> Snapshot:
    """The planner's view of `objects` (`read_cluster`, without the DRA reading beside it)."""
    return read_cluster(objects, catalog, settings, operator, source, memo, in_place)[0]


def read_cluster(
    objects: Iterable[Mapping[str, Any]],
    catalog: Catalog,
    settings: PlannerSettings | None = None,
    operator: GpuOperatorSettings | None = None,
    source: str = "snapshot",
    memo: ConversionMemo | None = None,
    in_place: Callable[[Mapping[str, str]], bool] | None = None,
) -> tuple[Snapshot, DraReading]:
    """The planner's view of `objects`, and what migctl read of their DRA objects (empty without any). With
    `memo` (the controller's), an object version converted for the last snapshot is not converted again
    (memo.py); the snapshot is the same either way. `in_place(labels)`: whether a node opts into migctl's agent
    (the reconcile's reading of the label and the config's selector)."""
    settings = settings or PlannerSettings()
    operator = operator or GpuOperatorSettings()
    remembered = memo is not None  # without a memo (a snapshot file), nothing is looked up or kept
    memo = memo or ConversionMemo()
    memo.begin((catalog, settings, operator, in_place))
    catalog = catalog.readable_by(operator.mig_parted_version)  # never plan a name mig-manager cannot parse
    objs = _sort(objects, source)
    warnings: list[str] = []
    ctx = NodeContext(
        catalog, settings, operator, None, "", warnings, version=operator.mig_parted_version, in_place=in_place
    )
    rejected: list[tuple[str, str]] = []
    unreadable: dict[str, list[str]] = {}  # node -> running pods on it that cannot be read
    doubted: dict[str, list[tuple[str, str, str]]] = {}  # node -> (pod, resource, why) of unreadable GPU values
    pods: list[Pod] = []
    pod_objs: dict[str, Mapping[str, Any]] = {}
    shapes: Shapes = {}  # pods that request alike (replicas) are read once (`pod_from_object`)
    metas = [meta_of(o) for o in objs.pods]
    pod_keys = [f"{m.get('namespace') or 'default'}/{m.get('name') or '?'}" for m in metas]
    last = {k: i for i, k in enumerate(pod_keys)}  # a later copy wins (a snapshot of snapshots)
    for i, (key, obj, meta) in enumerate(zip(pod_keys, objs.pods, metas, strict=True)):
        if last[key] != i:
            ctx.warn(f"pod {key}", "listed more than once; the last copy counts", "Pod")
            continue
        if meta.get("deletionTimestamp"):
            continue
        outcome = (
            memo.pod(obj, lambda o=obj: _convert_pod(o, settings, shapes))  # type: ignore[misc]
            if remembered
            else _convert_pod(obj, settings, shapes)
        )
        if outcome.error is not None:
            e = outcome.error
            spec = obj.get("spec")
            bound = spec.get("nodeName") if isinstance(spec, Mapping) else None
            status = obj.get("status")
            phase = status.get("phase") if isinstance(status, Mapping) else None
            if bound and phase not in TERMINAL:
                unreadable.setdefault(str(bound), []).append(key)
                ctx.warn(f"pod {key}", f"unreadable ({_why(e)}); node {bound}'s usage is unknown", "Pod")
            else:
                rejected.append((key, f"invalid pod spec: {_why(e)}"))
            continue
        pod = outcome.pod
        assert pod is not None
        for note in outcome.notes:
            ctx.warn(f"pod {key}", note, "Pod")
        if pod.phase in TERMINAL:
            continue
        if outcome.doubts and pod.node:  # its node decides what they cost (`_doubted`)
            doubted.setdefault(pod.node, []).extend((key, res, why) for res, why in outcome.doubts)
        if pod.pending and pod.scheduler_name == FALLBACK_SCHEDULER:
            continue  # placed by migctl's VRAM-unit scheduler on non-MIG GPUs, not by MIG planning
        pods.append(pod)
        pod_objs[key] = obj
    dra = read_dra(objs.dra, catalog) if objs.dra else DraReading()
    if objs.dra:
        pods, dra = with_claims(pods, pod_objs, dra, catalog, rejected, ctx)
    for cm in objs.configmaps:
        meta = meta_of(cm)
        if meta.get("name") == operator.configmap_name and meta.get("namespace") == operator.configmap_namespace:
            mp_source = f"ConfigMap {operator.configmap_namespace}/{operator.configmap_name}[{operator.configmap_key}]"
            ctx.mig_parted_source = mp_source
            data = cm.get("data")
            if data is not None and not isinstance(data, Mapping):
                ctx.warn(
                    f"ConfigMap {operator.configmap_namespace}/{operator.configmap_name}",
                    f"data: expected an object, got {type(data).__name__}; current layouts come only from node "
                    "annotations",
                    "ConfigMap",
                )
                continue
            text = (data or {}).get(operator.configmap_key)
            if text is None:
                warnings.append(f"{mp_source}: key missing; current layouts come only from node annotations")
                continue
            try:
                ctx.mig_parted = parse(str(text), mp_source, operator.mig_parted_version)
                warnings.extend(f"{mp_source}: {why}" for why in ctx.mig_parted.skipped)
            except InputError as e:
                warnings.append(f"{e}; current layouts come only from node annotations")
                ctx.problems.append(("ConfigMap", f"{operator.configmap_namespace}/{operator.configmap_name}", str(e)))
    by_node: dict[str, list[Pod]] = {}
    for p in pods:
        if p.node:
            by_node.setdefault(p.node, []).append(p)
    nodes = []
    node_names = [str(meta_of(o).get("name")) for o in objs.nodes]
    last_node = {k: i for i, k in enumerate(node_names)}
    opted_in = in_place or opts_in_place
    for i, (name, obj) in enumerate(zip(node_names, objs.nodes, strict=True)):
        if last_node[name] != i:
            ctx.warn(f"node {name}", "listed more than once; the last copy counts", "Node")
            continue
        if name in dra.pools:  # NVIDIA's DRA driver serves its GPUs: its slices say what they hold
            node_or_none = _dra_node(obj, dra.pools[name], by_node.get(name, ()), dra, settings, opted_in, ctx)
            if node_or_none is not None:
                nodes.append(node_or_none)
            continue
        for pod_key, res, why in doubted.pop(name, ()):
            if offers(obj, res):  # it may hold a device the node offers: the node's usage is unknown
                unreadable.setdefault(name, []).append(pod_key)
                ctx.warn(f"pod {pod_key}", f"unreadable ({why}); node {name}'s usage is unknown", "Pod")
            else:
                ctx.warn(f"pod {pod_key}", f"{why}; ignored: node {name} offers no {res}, so the pod holds none", "Pod")
        on_node, cant_read = tuple(by_node.get(name, ())), tuple(unreadable.get(name, ()))
        try:
            done = memo.node(
                obj,
                (on_node, cant_read, ctx.mig_parted_source),
                ctx.mig_parted,
                lambda o=obj, p=on_node, u=cant_read: _convert_node(o, p, ctx, u),  # type: ignore[misc]
            )
        except OBJECT_ERRORS as e:
            ctx.warn(f"node {name}", f"unreadable ({_why(e)}); node skipped", "Node")
            continue
        warnings.extend(done.warnings)
        ctx.problems.extend(done.problems)
        if done.node is not None:
            nodes.append(done.node)
    for name, doubts in doubted.items():  # bound to a node the snapshot does not have
        for pod_key, _, why in doubts:
            ctx.warn(f"pod {pod_key}", f"{why}; ignored (node {name} is not in the snapshot)", "Pod")
    known = set(node_names)
    for name, pool in sorted(dra.pools.items()):  # a pool whose Node object the snapshot lacks
        if name not in known and (n := _dra_node(None, pool, by_node.get(name, ()), dra, settings, opted_in, ctx)):
            nodes.append(n)
    memo.end()
    snapshot = Snapshot(tuple(nodes), tuple(pods), tuple(warnings), tuple(rejected), tuple(ctx.problems))
    return snapshot, dra


def _dra_node(
    obj: Mapping[str, Any] | None,
    pool: NodePool,
    pods: Iterable[Pod],
    dra: DraReading,
    settings: PlannerSettings,
    opted_in: Callable[[Mapping[str, str]], bool],
    ctx: NodeContext,
) -> Node | None:
    try:
        node, why = dra_node(obj, pool, pods, dra, settings, opted_in)
    except OBJECT_ERRORS as e:
        node, why = None, f"unreadable ({_why(e)})"
    if node is None:
        ctx.warn(f"node {pool.node}", f"{why}; node skipped", "Node")
    return node


def _convert_pod(obj: Mapping[str, Any], settings: PlannerSettings, shapes: Shapes) -> PodOutcome:
    notes: list[str] = []
    doubts: Doubts = []
    try:
        return PodOutcome(pod_from_object(obj, settings, notes, shapes, doubts), tuple(notes), None, tuple(doubts))
    except OBJECT_ERRORS as e:
        return PodOutcome(None, (), e)


def _convert_node(
    obj: Mapping[str, Any], pods: tuple[Pod, ...], ctx: NodeContext, unreadable: tuple[str, ...]
) -> NodeOutcome:
    """One node, its warnings and problems collected apart (the memo replays them when it reuses the node): the
    context's lists are swapped for the node's own while it is read (cheaper than a copy of the context)."""
    kept = ctx.warnings, ctx.problems
    ctx.warnings, ctx.problems = [], []
    try:
        node = node_from_object(obj, pods, ctx, unreadable)
        return NodeOutcome(
            (pods, unreadable, ctx.mig_parted_source), ctx.mig_parted, node, tuple(ctx.warnings), tuple(ctx.problems)
        )
    finally:
        ctx.warnings, ctx.problems = kept


def _why(e: BaseException) -> str:
    """The error's own words: ours name the field; anything else at least its type (never a traceback)."""
    if isinstance(e, ValueError | TypeError) and str(e):
        return str(e)
    return f"{type(e).__name__}: {short(str(e))}"
