"""A local cache of the objects migctl plans from: nodes, pods, namespaces, the mig-parted ConfigMaps, and the
DRA objects (NVIDIA's ResourceSlices, ResourceClaims and templates, DeviceClasses, migctl's DeviceTaintRules, the
GPU Operator's GPUCluster and ClusterPolicy).

One informer thread per kind lists, then watches from the list's resourceVersion; on 410 Gone (the version
is too old) or any watch failure it lists again, so the cache converges after outages. Only changes that can
change a plan (labels, annotations, taints, allocatable, pod phase/binding/deletion, config data, a DRA object's
spec or status) wake the reconcile loop: kubelet heartbeats and status noise do not.

The DRA kinds are optional: a cluster without resource.k8s.io/v1 or without NVIDIA's CRDs answers 404, and a
controller whose role lacks them 403. Such a kind reads as none (logged once, synced, looked for again every
`ABSENT_RETRY_S`), never a crash or a cache that never syncs. They are listed as the server sent them, not
through the client's models, which drop fields a newer server has.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from kubernetes import client, watch

from migctl.adapters.kube.calls import Obj
from migctl.adapters.kube.errors import API_ERRORS, translate
from migctl.adapters.kube.resources import DRA_LISTS, OPERATOR_LISTS

log = logging.getLogger(__name__)
OnChange = Callable[[str, str, Obj], None]  # (kind, event type, object)
ABSENT_RETRY_S = 60.0  # an optional kind the server does not serve (404) or lets migctl read (403): look again


def _key(obj: Obj) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{ns}/{meta.get('name')}" if ns else str(meta.get("name"))


def fingerprint(kind: str, obj: Obj) -> str:
    """The part of an object that matters for planning; a change here is worth a reconcile."""
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    if kind == "Node":
        parts: Any = [
            meta.get("labels"),
            meta.get("annotations"),
            spec.get("taints"),
            spec.get("unschedulable"),
            status.get("allocatable"),
        ]
    elif kind == "Pod":
        scheduled = [c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"]
        parts = [
            spec.get("nodeName"),
            status.get("phase"),
            bool(meta.get("deletionTimestamp")),
            [(c.get("status"), c.get("reason")) for c in scheduled],
            meta.get("annotations"),
        ]
    elif kind == "Namespace":
        parts = [meta.get("labels")]
    elif kind != "ConfigMap":  # DRA objects and the operator's: what they say is all in labels, spec, status
        parts = [meta.get("labels"), spec, status]
    else:
        parts = [obj.get("data"), meta.get("annotations")]
    return json.dumps(parts, sort_keys=True, default=str)


class Informer:
    """List + watch one kind into a dict; calls `on_change` for meaningful changes."""

    def __init__(
        self,
        kind: str,
        list_fn: Callable[..., Any],
        api_client: client.ApiClient,
        on_change: OnChange,
        stop: threading.Event,
        watch_timeout_s: float,
        optional: bool = False,
        **list_kwargs: Any,
    ) -> None:
        """`optional`: a kind the cluster may not serve (module docstring); it is also listed raw."""
        self.kind, self.list_fn, self.api_client = kind, list_fn, api_client
        self.on_change, self.stop, self.watch_timeout_s = on_change, stop, watch_timeout_s
        self.optional = optional
        self.absent: int | None = None  # the status (404, 403) an optional kind answered, while it does
        self.list_kwargs = list_kwargs
        self.store: dict[str, Obj] = {}
        self.lock = threading.Lock()
        self.synced = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"informer-{kind.lower()}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def items(self) -> list[Obj]:
        with self.lock:
            return list(self.store.values())

    def get(self, key: str) -> Obj | None:
        with self.lock:
            return self.store.get(key)

    def _run(self) -> None:
        rv: str | None = None
        while not self.stop.is_set():
            try:
                if rv is None:
                    rv = self._list()
                rv = self._watch(rv)
            except Exception as e:
                err = translate(e, f"watch {self.kind}") if isinstance(e, API_ERRORS) else e
                status = getattr(err, "status", None)
                if self.optional and status in (403, 404):
                    self._absent(int(status), err)
                    self.stop.wait(ABSENT_RETRY_S)
                elif status == 410:
                    log.info("%s watch expired (410 Gone); listing again", self.kind)
                elif not self.stop.is_set():
                    log.warning("%s watch failed (%s); listing again in 1 s", self.kind, err)
                    self.stop.wait(1.0)
                rv = None

    def _absent(self, status: int, err: object) -> None:
        """An optional kind the server does not serve (404) or does not let migctl read (403): none, logged once."""
        if self.absent != status:
            if status == 404:
                log.info("%s: not served by this cluster (%s); read as none", self.kind, err)
            else:
                why = "no permission to list (%s); read as none: grant migctl's role list and watch on it"
                log.warning("%s: " + why, self.kind, err)
        self.absent = status
        with self.lock:
            old, self.store = self.store, {}
        self.synced.set()
        for obj in old.values():
            self.on_change(self.kind, "DELETED", obj)

    def _list(self) -> str:
        items, version = self._list_items()
        if self.absent is not None:
            log.info("%s: served now; watching it", self.kind)
            self.absent = None
        fresh = {}
        for obj in items:
            obj["kind"] = self.kind
            fresh[_key(obj)] = obj
        with self.lock:
            old, self.store = self.store, fresh
        changed = [k for k in fresh.keys() | old.keys() if k not in old or k not in fresh]
        changed += [
            k for k in fresh.keys() & old.keys() if fingerprint(self.kind, fresh[k]) != fingerprint(self.kind, old[k])
        ]
        self.synced.set()
        for k in changed:
            obj = fresh.get(k) or old[k]
            self.on_change(self.kind, "RELIST", obj)
        return version

    def _list_items(self) -> tuple[list[Obj], str]:
        """(the items, the list's resourceVersion); an optional kind as the server sent it."""
        if self.optional:
            resp = self.list_fn(**self.list_kwargs, _request_timeout=60, _preload_content=False)
            data = json.loads(resp.data)
            return list(data.get("items") or []), str((data.get("metadata") or {}).get("resourceVersion") or "")
        result = self.list_fn(**self.list_kwargs, _request_timeout=60)
        items = [self.api_client.sanitize_for_serialization(item) for item in result.items]
        return items, str(result.metadata.resource_version)

    def _watch(self, rv: str) -> str:
        # the events are read raw (deserialize=False): no model type is looked up, which for kinds whose model the
        # client renamed (ResourceV1ResourceClaim) or has none (custom objects) would fail
        w = watch.Watch(return_type=dict)
        stream = w.stream(
            self.list_fn,
            resource_version=rv,
            timeout_seconds=max(1, int(self.watch_timeout_s)),
            allow_watch_bookmarks=True,
            deserialize=False,
            _request_timeout=(10, self.watch_timeout_s + 15),
            **self.list_kwargs,
        )
        for event in stream:
            if self.stop.is_set():
                w.stop()
                break
            obj = event["object"]
            new_rv = (obj.get("metadata") or {}).get("resourceVersion")
            if new_rv:
                rv = str(new_rv)
            kind = event["type"]
            if kind == "BOOKMARK":
                continue
            obj["kind"] = self.kind
            key = _key(obj)
            with self.lock:
                old = self.store.get(key)
                if kind == "DELETED":
                    self.store.pop(key, None)
                else:
                    self.store[key] = obj
            if kind == "DELETED" or old is None or fingerprint(self.kind, old) != fingerprint(self.kind, obj):
                self.on_change(self.kind, kind, obj)
        return rv


class ClusterCache:
    """Nodes (optionally label-selected), pods, namespaces and named ConfigMaps, kept current by watches."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        node_selector: str,
        configmaps: Iterable[tuple[str, str]],
        on_change: OnChange,
        watch_timeout_s: float,
        stop: threading.Event,
    ) -> None:
        core = client.CoreV1Api(api_client)
        common = {"api_client": api_client, "on_change": on_change, "stop": stop, "watch_timeout_s": watch_timeout_s}
        node_kwargs = {"label_selector": node_selector} if node_selector else {}
        self.nodes = Informer("Node", core.list_node, **common, **node_kwargs)  # type: ignore[arg-type]
        self.pods = Informer("Pod", core.list_pod_for_all_namespaces, **common)  # type: ignore[arg-type]
        self.namespaces = Informer("Namespace", core.list_namespace, **common)  # type: ignore[arg-type]
        self.configmaps = [
            Informer(
                "ConfigMap",
                core.list_namespaced_config_map,
                namespace=ns,
                field_selector=f"metadata.name={name}",
                **common,  # type: ignore[arg-type]
            )
            for ns, name in sorted(set(configmaps))
        ]
        resource: Any = client.ResourceV1Api(api_client)
        custom: Any = client.CustomObjectsApi(api_client)
        self.dra = [
            Informer(kind, getattr(resource, fn), **common, optional=True, **selectors)  # type: ignore[arg-type]
            for kind, fn, selectors in DRA_LISTS
        ]
        for kind, group, version, plural in OPERATOR_LISTS:
            listing = functools.partial(custom.list_cluster_custom_object, group, version, plural)
            self.dra.append(Informer(kind, listing, **common, optional=True))  # type: ignore[arg-type]
        self.informers = [self.nodes, self.pods, self.namespaces, *self.configmaps, *self.dra]

    def start(self) -> None:
        for inf in self.informers:
            inf.start()

    def synced(self) -> bool:
        return all(inf.synced.is_set() for inf in self.informers)

    def wait_synced(self, timeout: float) -> bool:
        return all(inf.synced.wait(timeout) for inf in self.informers)

    def node(self, name: str) -> Obj | None:
        return self.nodes.get(name)

    def configmap(self, namespace: str, name: str) -> Obj | None:
        for inf in self.configmaps:
            found = inf.get(f"{namespace}/{name}")
            if found is not None:
                return found
        return None

    def objects(self) -> list[Obj]:
        """Everything, as `kubectl get -o json` items (what `snapshot_from_objects` reads)."""
        out = self.nodes.items() + self.pods.items()
        for inf in [*self.configmaps, *self.dra]:
            out += inf.items()
        return out

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return {
            str((ns.get("metadata") or {}).get("name")): dict((ns.get("metadata") or {}).get("labels") or {})
            for ns in self.namespaces.items()
        }
