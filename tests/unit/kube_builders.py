"""Builders for Kubernetes objects as the API serves them (plain dicts, `kubectl get -o json` items): GPU nodes
with GFD labels, pods with GPU requests, the mig-parted ConfigMap. Core models are in builders.py.

Every object gets a `uid` and a `resourceVersion` (as the API server gives them); `bumped` returns a new
version of an object the way a write does (a new dict: the informer cache never mutates one in place).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Mapping
from typing import Any

from migctl.core.hardware.naming import resource_name
from migctl.core.migparted.config import dump_yaml, render
from migctl.core.model.gpu_config import GpuConfig, NodeConfig, config_name

Obj = dict[str, Any]
_versions = itertools.count(1)
DEFAULT_LAYOUT = {0: {"1g.5gb": 7}}
PRODUCTS = {"a100-40gb": "NVIDIA-A100-SXM4-40GB", "h100-80gb": "NVIDIA-H100-80GB-HBM3"}


def _meta(name: str, namespace: str | None = None, **fields: Any) -> Obj:
    meta: Obj = {"name": name, "uid": f"uid-{namespace or ''}-{name}", "resourceVersion": str(next(_versions))}
    if namespace is not None:
        meta["namespace"] = namespace
    return {**meta, **fields}


def node_config(layouts: Mapping[int, Mapping[str, int]]) -> NodeConfig:
    return {i: GpuConfig.mig(lay) for i, lay in layouts.items()}


def gpu_node(
    name: str,
    model: str = "a100-40gb",
    layouts: Mapping[int, Mapping[str, int]] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: list[Obj] | None = None,
    state: str = "success",
) -> Obj:
    """A MIG node: GFD's labels, `nvidia.com/mig.config` naming its layout's config (`mig_parted(layouts)`
    holds it), allocatable instances as the device plugin reports them."""
    gpus = node_config(layouts or DEFAULT_LAYOUT)
    alloc: dict[str, str] = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    for cfg in gpus.values():
        for profile, n in cfg.layout:
            key = resource_name(profile)
            alloc[key] = str(int(alloc.get(key, "0")) + n)
    node_labels = {
        "nvidia.com/gpu.product": PRODUCTS[model],
        "nvidia.com/gpu.count": str(len(gpus)),
        "nvidia.com/mig.config": config_name(gpus),
        "nvidia.com/mig.config.state": state,
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, labels=node_labels, annotations={}),
        "spec": {"taints": list(taints or [])},
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def pod(
    name: str,
    requests: Mapping[str, Any] | None = None,
    *,
    namespace: str = "ns",
    node: str | None = None,
    phase: str | None = None,
    priority: int = 0,
    annotations: Mapping[str, str] | None = None,
) -> Obj:
    """A pod with one container asking for `requests` (default 10 GiB of VRAM); pending unless `node` is set."""
    spec: Obj = {
        "containers": [{"name": "main", "resources": {"limits": dict(requests or {"migctl.io/vram": "10Gi"})}}],
        "priority": priority,
    }
    if node:
        spec["nodeName"] = node
    status: Obj = {"phase": phase or ("Running" if node else "Pending")}
    if not node:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace, annotations=dict(annotations or {})),
        "spec": spec,
        "status": status,
    }


def mig_parted(
    *layouts: Mapping[int, Mapping[str, int]], namespace: str = "gpu-operator", name: str = "default-mig-parted-config"
) -> Obj:
    """The mig-parted ConfigMap holding one config per node layout (the `layouts` given to `gpu_node`)."""
    configs = {config_name(c): c for c in map(node_config, layouts)}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(name, namespace),
        "data": {"config.yaml": dump_yaml(render(configs))},
    }


def bumped(obj: Obj, change: Callable[[Obj], None]) -> Obj:
    """A new version of `obj` after a write: a copy, changed by `change`, with a new resourceVersion."""
    out = copy.deepcopy(obj)
    change(out)
    out["metadata"]["resourceVersion"] = str(next(_versions))
    return out
