"""A benchmark instance as a plain description, and its two renderings.

`Instance` lists nodes (per-GPU layouts and the instances in use) and pending pods. `Instance.snapshot` builds the
`Snapshot` straight from `migctl.core.model.cluster`; `Instance.objects` gives what `kubectl get
nodes,pods,configmaps -A -o json` would return (Node, Pod and the mig-parted ConfigMap
`gpu-operator/default-mig-parted-config`), which `migctl.adapters.objects.snapshot_from_objects` translates back
to an equivalent snapshot. The generators that draw instances live in `bench.instances`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

from migctl.core.hardware.catalog import Catalog, GpuModel
from migctl.core.hardware.geometry import CanonicalLayout
from migctl.core.hardware.naming import resource_name
from migctl.core.migparted.config import dump_yaml, render
from migctl.core.model.cluster import Gpu, GpuDemand, Node, Pod, Resources, Snapshot, Taint, Toleration
from migctl.core.model.gpu_config import GpuConfig, config_name

GIB = 2**30
POOL_LABEL = "migctl.bench/pool"
HOSTNAME_LABEL = "kubernetes.io/hostname"  # every node carries its name here, as the kubelet sets it
TAINT = ("dedicated", "training")


@dataclass(frozen=True)
class GpuSpec:
    layout: CanonicalLayout
    used: CanonicalLayout = ()  # instances in use by running pods


@dataclass(frozen=True)
class NodeSpec:
    name: str
    model: str
    gpus: tuple[GpuSpec, ...]
    cpu_m: int
    memory: int
    pods: int = 110
    pool: str = "a"
    tainted: bool = False
    agent: bool = True  # per-GPU usage known (node agent); False: as the adapter sees it (busy + >1 GPU: unknown)
    frozen: bool = False

    @property
    def busy(self) -> bool:
        return any(g.used for g in self.gpus)

    @property
    def usage_known(self) -> bool:
        return self.agent or not self.busy or len(self.gpus) == 1


@dataclass(frozen=True)
class PodSpec:
    name: str
    priority: int
    kind: str  # "vram" or "profile"
    vram_mib: int = 0
    profile: str = ""
    need_mib: int | None = None
    cpu_m: int = 1000
    memory: int = 4 * GIB
    selector: tuple[tuple[str, str], ...] = ()
    tolerates: bool = False
    created: int = 0  # seconds after an arbitrary origin

    @property
    def created_iso(self) -> str:
        d, rest = divmod(self.created, 86400)
        h, rest = divmod(rest, 3600)
        m, s = divmod(rest, 60)
        return f"2026-{1 + d // 28:02d}-{1 + d % 28:02d}T{h:02d}:{m:02d}:{s:02d}Z"


@dataclass(frozen=True)
class Instance:
    name: str
    family: str
    seed: int
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]

    @property
    def gpus(self) -> int:
        return sum(len(n.gpus) for n in self.nodes)

    # -- Snapshot, built directly -------------------------------------------------------------------------

    def snapshot(self, catalog: Catalog) -> Snapshot:
        nodes: list[Node] = []
        pods: list[Pod] = []
        for ns in self.nodes:
            model = catalog.model(ns.model)
            running = _running(ns)
            pods.extend(r for r, _ in running)
            used = Resources()
            for r, _ in running:
                used = used + r.requests
            known = ns.usage_known
            gpus = tuple(
                Gpu(i, GpuConfig.mig(g.layout), dict(g.used) if known else None, False if known else None)
                for i, g in enumerate(ns.gpus)
            )
            total: Counter[str] = Counter()
            in_use: Counter[str] = Counter()
            for g in ns.gpus:
                total.update(dict(g.layout))
                in_use.update(dict(g.used))
            nodes.append(
                Node(
                    name=ns.name,
                    labels=_labels(ns, model),
                    taints=(Taint(*TAINT, "NoSchedule"),) if ns.tainted else (),
                    allocatable=Resources(ns.cpu_m, ns.memory, ns.pods),
                    used=used,
                    model=model,
                    gpus=gpus,
                    mig_free={p: max(0, n - in_use[p]) for p, n in total.items()},
                    usage_known=known,
                    frozen_reason="reconfiguration in progress (nvidia.com/mig.config.state=pending)"
                    if ns.frozen
                    else "",
                    gpu_pods=tuple((r.key, r.priority, gi if ns.agent else None) for r, gi in running),
                )
            )
        for ps in self.pods:
            demand = (
                GpuDemand("vram", 1, vram_mib=ps.vram_mib) if ps.kind == "vram" else GpuDemand("profile", 1, ps.profile)
            )
            pods.append(
                Pod(
                    namespace="bench",
                    name=ps.name,
                    priority=ps.priority,
                    requests=Resources(ps.cpu_m, ps.memory, 1),
                    gpu=(demand,),
                    need_mib=ps.need_mib,
                    node_selector=tuple(sorted(ps.selector)),
                    tolerations=(Toleration(TAINT[0], "Equal", TAINT[1], "NoSchedule"),) if ps.tolerates else (),
                    unschedulable=True,
                    created=ps.created_iso,
                )
            )
        return Snapshot(tuple(nodes), tuple(pods))

    # -- kubectl-style objects ----------------------------------------------------------------------------

    def objects(self, catalog: Catalog) -> list[dict[str, Any]]:
        """Node, Pod and ConfigMap dicts as `kubectl get nodes,pods,configmaps -A -o json` lists them."""
        configs = {}
        out: list[dict[str, Any]] = []
        pod_objs: list[dict[str, Any]] = []
        for ns in self.nodes:
            model = catalog.model(ns.model)
            node_cfg = {i: GpuConfig.mig(g.layout) for i, g in enumerate(ns.gpus)}
            name = config_name(node_cfg)
            configs[name] = node_cfg
            labels = _labels(ns, model)
            labels.update(
                {
                    "nvidia.com/gpu.memory": str(model.memory_mib),
                    "nvidia.com/mig.capable": "true",
                    "nvidia.com/mig.strategy": "mixed",
                    "nvidia.com/mig.config": name,
                    "nvidia.com/mig.config.state": "pending" if ns.frozen else "success",
                }
            )
            total: Counter[str] = Counter()
            for g in ns.gpus:
                total.update(dict(g.layout))
            alloc = {"cpu": f"{ns.cpu_m}m", "memory": str(ns.memory), "pods": str(ns.pods)}
            alloc.update({resource_name(p): str(n) for p, n in sorted(total.items())})
            spec: dict[str, Any] = {}
            if ns.tainted:
                spec["taints"] = [{"key": TAINT[0], "value": TAINT[1], "effect": "NoSchedule"}]
            out.append(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": ns.name, "labels": labels},
                    "spec": spec,
                    "status": {"capacity": dict(alloc), "allocatable": alloc},
                }
            )
            for r, _ in _running(ns):
                d = r.gpu[0]
                pod_objs.append(
                    _pod_obj(r.name, r.priority, {resource_name(d.profile): 1}, r.requests, r.created, node=ns.name)
                )
        for ps in self.pods:
            gpu_req: dict[str, Any] = (
                {"migctl.io/vram": f"{ps.vram_mib}Mi"} if ps.kind == "vram" else {resource_name(ps.profile): 1}
            )
            obj = _pod_obj(ps.name, ps.priority, gpu_req, Resources(ps.cpu_m, ps.memory, 1), ps.created_iso)
            if ps.need_mib is not None:
                obj["metadata"]["annotations"] = {"migctl.io/vram": f"{ps.need_mib}Mi"}
            if ps.selector:
                obj["spec"]["nodeSelector"] = dict(ps.selector)
            if ps.tolerates:
                obj["spec"]["tolerations"] = [
                    {"key": TAINT[0], "operator": "Equal", "value": TAINT[1], "effect": "NoSchedule"}
                ]
            pod_objs.append(obj)
        cm = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"namespace": "gpu-operator", "name": "default-mig-parted-config"},
            "data": {"config.yaml": dump_yaml(render(configs))},
        }
        return [cm, *out, *pod_objs]

    def json_text(self, catalog: Catalog) -> str:
        """The objects as one `kind: List` JSON document (what `kubectl get ... -o json` prints)."""
        return json.dumps({"apiVersion": "v1", "kind": "List", "items": self.objects(catalog)}, indent=1)


def _labels(ns: NodeSpec, model: GpuModel) -> dict[str, str]:
    return {
        HOSTNAME_LABEL: ns.name,
        "nvidia.com/gpu.product": model.gfd_products[0],
        "nvidia.com/gpu.count": str(len(ns.gpus)),
        POOL_LABEL: ns.pool,
    }


def _running(ns: NodeSpec) -> list[tuple[Pod, int]]:
    """One running pod per in-use instance (with the GPU index it uses)."""
    out = []
    for gi, g in enumerate(ns.gpus):
        k = 0
        for prof, n in g.used:
            for _ in range(n):
                pod = Pod(
                    namespace="running",
                    name=f"{ns.name}-g{gi}-{k}",
                    priority=0,
                    node=ns.name,
                    phase="Running",
                    requests=Resources(1000, 2 * GIB, 1),
                    gpu=(GpuDemand("profile", 1, prof),),
                    created="2026-01-01T00:00:00Z",
                    gpu_index=gi if ns.agent else None,
                )
                out.append((pod, gi))
                k += 1
    return out


def _pod_obj(
    name: str, priority: int, gpu: dict[str, Any], req: Resources, created: str, node: str | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "registry.example/app:1",
                "resources": {"requests": {"cpu": f"{req.cpu_m}m", "memory": str(req.memory)}, "limits": gpu},
            }
        ],
        "priority": priority,
        "schedulerName": "default-scheduler",
    }
    status: dict[str, Any]
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running"}
    else:
        status = {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
        }
    ns = "running" if node else "bench"
    meta = {"namespace": ns, "name": name, "creationTimestamp": created}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}
