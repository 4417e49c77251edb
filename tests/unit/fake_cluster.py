"""In-memory fakes of migctl's Kubernetes seam (adapters/kube/interface.py) and a fake clock, for fast tests of the
actuator's state machine and the reconcile loop.

`FakeCluster` implements `ControllerApi` (mypy checks it: this file is in `make lint`'s mypy run): nodes, pods,
ConfigMaps and Events as plain dicts, JSON merge patches, resourceVersion checks (ConflictError, as the API
server answers 409), the Eviction API (`blocked` for pods a PodDisruptionBudget protects), Leases (read only).
DRA: ResourceSlices, claims, templates, DeviceClasses and the GPU Operator's objects are plain objects the test
adds (`objects()` lists them, nothing acts on them); DeviceTaintRules are created, listed (label selector: `k`,
`k=v`, comma-separated) and deleted (uid precondition: 409 when it names another object) as the API server does;
`fail_rules` injects one 500 per listed rule name on its next create or delete. `FakeCache` is the `ObjectCache`
over it (an informer that is always in sync; its DeviceTaintRules are the informer's: label `migctl.io/fence-node`).

SIMULATED: NVIDIA mig-manager, the device plugin and GFD, at their real interface only, as
tests/cluster/sim_gpu_operator.py does against a real API server: when a node's `nvidia.com/mig.config` label
changes, `mig_manager` reads the named config from the ConfigMap (migctl's own parser), then sets
`nvidia.com/mig.config.state` and, on success, allocatable `nvidia.com/mig-<p>` and GFD `mig-<p>.count`.
Faults per config, as sim_gpu_operator's: `fail_configs` (state failed), `hang_configs` (stays pending: a
mig-manager timeout), `no_capacity_configs` (success, but the device plugin never re-registers: a verify
timeout).
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from migctl.adapters.kube.api import gate_lift_ops
from migctl.adapters.kube.errors import ConflictError, KubeError, NotFoundError, PermanentError
from migctl.adapters.kube.interface import ControllerApi, ObjectCache, ObjectList
from migctl.core.hardware.naming import resource_name
from migctl.core.migparted.apply import resolve
from migctl.core.migparted.config import parse
from migctl.wire.names import FENCE_NODE

Obj = dict[str, Any]
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
DRA_KINDS = ("ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceClass", "DeviceTaintRule", "GPUCluster",
             "ClusterPolicy")  # fmt: skip


class FakeClock:
    """Seconds since the epoch that move only when told: by `advance`, or by `tick` at every reading (so a
    loop that polls until a timeout ends after timeout / tick readings, whatever the wall clock does)."""

    def __init__(self, start: float = 1_800_000_000.0, tick: float = 0.0) -> None:
        self.now, self.tick = start, tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def merge(base: Obj, patch: Obj) -> Obj:
    """RFC 7386 JSON merge patch (lists replace, null deletes)."""
    out = dict(base)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def json_patch(doc: Obj, ops: list[Obj]) -> Obj:
    """RFC 6902 `test`, `remove` and `add` on a copy of `doc`, as the API server applies a JSON patch: a failed
    `test` or a missing parent raises PermanentError 422 and changes nothing."""
    out = copy.deepcopy(doc)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op["path"]).lstrip("/").split("/")]
        try:
            parent: Any = out
            for p in parts[:-1]:
                parent = parent[int(p)] if isinstance(parent, list) else parent[p]
            last = parts[-1]
            if op["op"] == "test":
                here = parent[int(last)] if isinstance(parent, list) else parent[last]
                if here != op["value"]:
                    raise PermanentError("patch", 422, "Unprocessable Entity", f"test failed at {op['path']}")
            elif op["op"] == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            elif op["op"] == "add":
                parent[last] = copy.deepcopy(op["value"])
            else:
                raise PermanentError("patch", 422, "Unprocessable Entity", f"unsupported op {op['op']}")
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise PermanentError("patch", 422, "Unprocessable Entity", f"{op['path']}: {e!r}") from e
    return out


def _key(obj: Obj) -> str:
    meta = obj["metadata"]
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta["name"])


class FakeCluster:
    """The API server's side of `ControllerApi`, in memory. Every write bumps the object's resourceVersion."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self.nodes: dict[str, Obj] = {}
        self.pods: dict[str, Obj] = {}
        self.configmaps: dict[str, Obj] = {}
        self.events: list[Obj] = []
        self.calls: list[str] = []  # every write, in order ("patch_node n1", "evict ns/p", ...)
        self.blocked: set[str] = set()  # pod keys a PodDisruptionBudget protects (eviction answers 429)
        self.fail_configs: set[str] = set()
        self.hang_configs: set[str] = set()
        self.no_capacity_configs: set[str] = set()
        self.mig_parted_key = "config.yaml"
        self.fail_lifts: set[str] = set()  # pod keys whose gate lift answers 500
        self.fail_rules: set[str] = set()  # rule names whose next create or delete answers 500 (once each)
        self.leases: dict[str, Obj] = {}  # "<namespace>/<name>" -> Lease
        self._rv = 100
        # DRA (resource.k8s.io/v1): ResourceSlices by name, ResourceClaims by ns/name, DeviceTaintRules by name;
        # the other DRA kinds (templates, DeviceClasses, GPUCluster, ClusterPolicy) by "<kind>/<key>"
        self.resource_slices: dict[str, Obj] = {}
        self.resource_claims: dict[str, Obj] = {}
        self.taint_rules: dict[str, Obj] = {}
        self.dra: dict[str, Obj] = {}
        for o in objects:
            self.add(o)

    # -- the test's own hands on the cluster --------------------------------------------------------------

    def add(self, obj: Obj) -> None:
        kind = obj["kind"]
        if kind in DRA_KINDS:
            self.add_dra(obj)
            return
        obj = copy.deepcopy(obj)
        self._bump(obj)
        if kind == "Lease":
            self.leases[_key(obj)] = obj
        else:
            store = {"Node": self.nodes, "Pod": self.pods, "ConfigMap": self.configmaps}[kind]
            store[_key(obj)] = obj

    def remove(self, kind: str, key: str) -> None:
        """Delete an object the test added, by kind and "<namespace>/<name>" (or name)."""
        stores = {"Pod": self.pods, "ResourceSlice": self.resource_slices, "ResourceClaim": self.resource_claims,
                  "DeviceTaintRule": self.taint_rules}  # fmt: skip
        if kind in stores:
            del stores[kind][key]
        else:
            del self.dra[f"{kind}/{key}"]

    def _bump(self, obj: Obj) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def reasons(self) -> list[str]:
        return [str(e.get("reason")) for e in self.events]

    # -- ControllerApi -----------------------------------------------------------------------------------------

    def read_node(self, name: str) -> Obj:
        if name not in self.nodes:
            raise NotFoundError(f"read node {name}", 404, "not found")
        return copy.deepcopy(self.nodes[name])

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        node = self.read_node(name)
        rv = (patch.get("metadata") or {}).get("resourceVersion")
        if rv is not None and rv != node["metadata"]["resourceVersion"]:
            raise ConflictError(f"{what} node {name}", 409, "the object has been modified")
        before = (node["metadata"].get("labels") or {}).get(MIG_CONFIG)
        new = merge(node, patch)
        self._bump(new)
        self.nodes[name] = new
        self.calls.append(f"patch_node {name} ({what})")
        label = (new["metadata"].get("labels") or {}).get(MIG_CONFIG)
        if label and label != before:
            self.mig_manager(name, label)
        return self.read_node(name)

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        for _ in range(20):
            node = self.read_node(name)
            patch = mutate(node)
            if patch is None:
                return node
            meta = {**(patch.get("metadata") or {}), "resourceVersion": node["metadata"]["resourceVersion"]}
            try:
                return self.patch_node(name, {**patch, "metadata": meta}, what)
            except ConflictError:
                continue
        raise ConflictError(f"{what} node {name}", 409, "still conflicting after 20 re-reads")

    def list_nodes(self) -> list[Obj]:
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def list_pods_on_node(self, node: str) -> list[Obj]:
        return [copy.deepcopy(p) for p in self.pods.values() if (p.get("spec") or {}).get("nodeName") == node]

    def evict(self, namespace: str, name: str) -> str:
        key = f"{namespace}/{name}"
        self.calls.append(f"evict {key}")
        if key in self.blocked:
            return "blocked"
        return "evicted" if self.pods.pop(key, None) is not None else "gone"

    def lift_gate(self, namespace: str, name: str, hostname: str | None = None) -> str:
        key = f"{namespace}/{name}"
        if key in self.fail_lifts:
            raise KubeError(f"lift gate of pod {key}", 500, "injected")
        if key not in self.pods:
            return "gone"
        ops = gate_lift_ops(self.pods[key], hostname)
        if ops is None:
            return "ungated"
        new = json_patch(self.pods[key], ops)
        self._bump(new)
        self.pods[key] = new
        self.calls.append(f"lift_gate {key}" + (f" -> {hostname}" if hostname else ""))
        return "lifted"

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        cm = self.configmaps.get(f"{namespace}/{name}")
        return copy.deepcopy(cm) if cm is not None else None

    def create_configmap(self, namespace: str, body: Any) -> Obj:
        key = f"{namespace}/{body['metadata']['name']}"
        if key in self.configmaps:
            raise ConflictError(f"create configmap {key}", 409, "already exists")
        obj = merge({"kind": "ConfigMap"}, body)
        obj["metadata"]["namespace"] = namespace
        self._bump(obj)
        self.configmaps[key] = obj
        self.calls.append(f"create_configmap {key}")
        return copy.deepcopy(obj)

    def replace_configmap(self, namespace: str, body: Any) -> Obj:
        key = f"{namespace}/{body['metadata']['name']}"
        old = self.configmaps.get(key)
        if old is None:
            raise NotFoundError(f"replace configmap {key}", 404, "not found")
        if body["metadata"].get("resourceVersion") != old["metadata"]["resourceVersion"]:
            raise ConflictError(f"replace configmap {key}", 409, "the object has been modified")
        obj = copy.deepcopy(body)
        self._bump(obj)
        self.configmaps[key] = obj
        self.calls.append(f"replace_configmap {key}")
        return copy.deepcopy(obj)

    def create_event(self, namespace: str, body: Any) -> None:
        self.events.append(copy.deepcopy(body))

    def read_lease(self, namespace: str, name: str) -> Obj | None:
        lease = self.leases.get(f"{namespace}/{name}")
        return copy.deepcopy(lease) if lease is not None else None

    def _inject(self, name: str, op: str) -> None:
        if name in self.fail_rules:
            self.fail_rules.discard(name)
            raise KubeError(f"{op} devicetaintrule {name}", 500, "injected")

    # -- DRA: the test's hands (add_dra) and ControllerApi's calls ------------------------------------------

    def add_dra(self, obj: Obj) -> None:
        """A DRA object (`DRA_KINDS`), stored as given (with a resourceVersion; a DeviceTaintRule also a uid)."""
        obj = copy.deepcopy(obj)
        kind = obj["kind"]
        self._bump(obj)
        if kind == "DeviceTaintRule":
            obj["metadata"].setdefault("uid", f"uid-{obj['metadata']['name']}-{self._rv}")
        store = {"ResourceSlice": self.resource_slices, "ResourceClaim": self.resource_claims,
                 "DeviceTaintRule": self.taint_rules}.get(kind)  # fmt: skip
        if store is not None:
            store[_key(obj)] = obj
        else:
            self.dra[f"{kind}/{_key(obj)}"] = obj

    def dra_objects(self) -> list[Obj]:
        """Every DRA object but the DeviceTaintRules, as plain objects."""
        stores = (self.resource_slices, self.resource_claims, self.dra)
        return [copy.deepcopy(o) for store in stores for _, o in sorted(store.items())]

    def list_node_resource_slices(self, node: str, driver: str) -> list[Obj]:
        return [
            copy.deepcopy(s)
            for s in self.resource_slices.values()
            if s["spec"].get("nodeName") == node and s["spec"].get("driver") == driver
        ]

    def list_resource_claims(self) -> list[Obj]:
        return copy.deepcopy(list(self.resource_claims.values()))

    def list_device_taint_rules(self, label_selector: str = "") -> list[Obj]:
        """`k` (exists) and `k=v` terms, comma-separated, as migctl's selectors are (`selects`)."""
        return [copy.deepcopy(r) for r in self.taint_rules.values() if selects(label_selector, r)]

    def create_device_taint_rule(self, body: Obj) -> str:
        name = body["metadata"]["name"]
        self._inject(name, "create")
        self.calls.append(f"create_device_taint_rule {name}")
        if name in self.taint_rules:
            return "exists"
        obj = merge({"kind": "DeviceTaintRule"}, body)
        obj["metadata"]["uid"] = f"uid-{name}-{self._rv}"
        self._bump(obj)
        self.taint_rules[name] = obj
        return "created"

    def delete_device_taint_rule(self, name: str, uid: str = "") -> bool:
        self._inject(name, "delete")
        self.calls.append(f"delete_device_taint_rule {name}")
        rule = self.taint_rules.get(name)
        if rule is None:
            return False
        if uid and rule["metadata"].get("uid") != uid:
            raise ConflictError(f"delete devicetaintrule {name}", 409, "uid precondition failed")
        del self.taint_rules[name]
        return True

    # -- SIMULATED mig-manager + device plugin + GFD (see the module docstring) ------------------------------

    def mig_manager(self, name: str, config: str) -> None:
        node = self.nodes[name]
        labels = node["metadata"].setdefault("labels", {})
        if config in self.hang_configs:
            labels[MIG_STATE] = "pending"
            return
        if config in self.fail_configs:
            labels[MIG_STATE] = "failed"
            return
        layout = self._layout(config, int(labels.get("nvidia.com/gpu.count", "1")))
        if layout is None:
            labels[MIG_STATE] = "failed"  # no such config in any ConfigMap: mig-manager fails
            return
        if config not in self.no_capacity_configs:
            alloc = node["status"]["allocatable"]
            for k in [k for k in alloc if k.startswith("nvidia.com/mig-")]:
                alloc[k] = "0"  # the device plugin leaves vanished resources at zero
            for k in [k for k in labels if k.startswith("nvidia.com/mig-") and k.endswith(".count")]:
                del labels[k]
            for resource, n in layout.items():
                alloc[resource] = str(n)
                labels[f"{resource}.count"] = str(n)
            node["status"]["capacity"] = dict(alloc)
        labels[MIG_STATE] = "success"

    def _layout(self, config: str, gpus: int) -> Counter[str] | None:
        for cm in self.configmaps.values():
            text = (cm.get("data") or {}).get(self.mig_parted_key)
            if not text:
                continue
            parsed = parse(str(text), "fake mig-manager")
            if config in parsed.mig_configs:
                out: Counter[str] = Counter()
                for cfg in resolve(parsed, config, [(i, None) for i in range(gpus)]).values():
                    for profile, n in cfg.layout:
                        out[resource_name(profile)] += n
                return out
        return None


class _Nodes:
    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster

    def items(self) -> list[Obj]:
        return self.cluster.list_nodes()


class FakeCache:
    """`ObjectCache` over a FakeCluster: an informer that is always in sync (every read sees the last write)."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self._nodes = _Nodes(cluster)

    @property
    def nodes(self) -> ObjectList:
        return self._nodes

    def start(self) -> None:
        pass

    def synced(self) -> bool:
        return True

    def wait_synced(self, timeout: float) -> bool:
        return True

    def configmap(self, namespace: str, name: str) -> Obj | None:
        return self.cluster.read_configmap(namespace, name)

    def objects(self) -> list[Obj]:
        c = self.cluster
        return [
            *c.list_nodes(), *copy.deepcopy(list(c.pods.values())), *copy.deepcopy(list(c.configmaps.values())),
            *c.dra_objects(), *c.list_device_taint_rules(FENCE_NODE),
        ]  # fmt: skip

    def namespace_labels(self) -> dict[str, dict[str, str]]:
        return {}


def selects(selector: str, obj: Obj) -> bool:
    """Whether a label selector of `key` and `key=value` terms (comma-separated) selects `obj`."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, selector.split(",")):
        key, has, value = term.partition("=")
        if key not in labels or (has and labels[key] != value):
            return False
    return True


def _conforms(cluster: FakeCluster, cache: FakeCache) -> tuple[ControllerApi, ObjectCache]:
    """Never called: mypy checks here that the fakes implement the seam's Protocols."""
    return cluster, cache
