"""Fake GPU nodes for the cluster tier: what a node looks like after GPU Operator (GFD + device plugin) ran on it.

kwok manages these nodes (annotation `kwok.x-k8s.io/node=fake`) and keeps their capacity; the labels and
extended resources follow NVIDIA's real names (mixed strategy): `nvidia.com/mig-<profile>` resources, GFD's
`nvidia.com/gpu.*`, `nvidia.com/mig.*` and `nvidia.com/mig-<profile>.count/.memory` labels. Profile memory comes
from migctl's catalog, so the labels match what the planner will read. The per-GPU layout (which real NVML
would report) is kept in the annotation `sim.migctl.io/gpu-layouts` for the simulated mig-manager.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client

from migctl.core.hardware.catalog import Catalog, GpuModel, load_catalog
from migctl.core.hardware.naming import WHOLE_GPU_RESOURCE, gfd_product, resource_name
from migctl.core.model.gpu_config import GpuConfig

from .controlplane import KWOK_ANNOTATION, KWOK_ANNOTATION_VALUE

LAYOUTS_ANNOTATION = "sim.migctl.io/gpu-layouts"
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
GFD_PREFIX = "nvidia.com/"
BASE_CAPACITY = {"cpu": "64", "memory": "512Gi", "pods": "110"}

_catalog: Catalog | None = None


def catalog() -> Catalog:
    """migctl's bundled catalog, loaded once per test session."""
    global _catalog  # noqa: PLW0603 - a cache, loading parses every profile file
    if _catalog is None:
        _catalog = load_catalog()
    return _catalog


def product_label(model: GpuModel) -> str:
    """The `nvidia.com/gpu.product` value GFD would write for this model."""
    return model.gfd_products[0] if model.gfd_products else gfd_product(model.nvml_names[0])


def encode_layouts(gpus: Sequence[GpuConfig]) -> str:
    """JSON for the layouts annotation: `{"0": {"mig": true, "layout": {"1g.10gb": 7}}, ...}`."""
    return json.dumps(
        {str(i): {"mig": g.mig_enabled, "layout": dict(g.layout)} for i, g in enumerate(gpus)}, sort_keys=True
    )


def decode_layouts(text: str | None, gpu_count: int) -> dict[int, GpuConfig]:
    """Inverse of `encode_layouts`; GPUs the annotation does not mention count as MIG disabled."""
    raw: dict[str, Any] = json.loads(text) if text else {}
    out = {i: GpuConfig.disabled() for i in range(gpu_count)}
    for key, value in raw.items():
        out[int(key)] = GpuConfig.mig(value["layout"]) if value["mig"] else GpuConfig.disabled()
    return out


def advertised(model: GpuModel, gpus: Sequence[GpuConfig] | Mapping[int, GpuConfig]) -> dict[str, int]:
    """Extended resources the device plugin (mixed strategy) advertises for these GPUs: resource -> count."""
    counts: Counter[str] = Counter()
    items = gpus.values() if isinstance(gpus, Mapping) else gpus
    for g in items:
        if not g.mig_enabled:
            counts[WHOLE_GPU_RESOURCE] += 1
            continue
        for profile, n in g.layout:
            model.profile(profile)  # KeyError for a profile this model does not have
            counts[resource_name(profile)] += n
    return dict(counts)


def gfd_labels(model: GpuModel, gpus: Sequence[GpuConfig] | Mapping[int, GpuConfig]) -> dict[str, str]:
    """GFD's mixed-strategy `mig-<p>.count` / `mig-<p>.memory` labels for the advertised profiles."""
    labels: dict[str, str] = {}
    items = gpus.values() if isinstance(gpus, Mapping) else gpus
    counts: Counter[str] = Counter()
    for g in items:
        for profile, n in g.layout if g.mig_enabled else ():
            counts[profile] += n
    for profile, n in counts.items():
        base = resource_name(profile)  # nvidia.com/mig-1g.10gb(.me)
        labels[f"{base}.count"] = str(n)
        labels[f"{base}.memory"] = str(model.profile(profile).memory_mib)
    return labels


def gpu_node_body(
    name: str,
    model_id: str,
    gpus: Sequence[GpuConfig],
    *,
    labels: Mapping[str, str] | None = None,
    mig_config: str | None = None,
) -> dict[str, Any]:
    """A Node manifest for a kwok-managed node with these GPUs (index = position in `gpus`)."""
    model = catalog().model(model_id)
    node_labels = {
        "kubernetes.io/hostname": name,
        "type": "kwok",
        f"{GFD_PREFIX}gpu.present": "true",
        f"{GFD_PREFIX}gpu.product": product_label(model),
        f"{GFD_PREFIX}gpu.count": str(len(gpus)),
        f"{GFD_PREFIX}gpu.memory": str(model.memory_mib),
        f"{GFD_PREFIX}mig.capable": "true",
        f"{GFD_PREFIX}mig.strategy": "mixed",
        **gfd_labels(model, gpus),
        **(labels or {}),
    }
    if mig_config is not None:
        node_labels[MIG_CONFIG_LABEL] = mig_config
        node_labels[MIG_STATE_LABEL] = "success"
    capacity = {**BASE_CAPACITY, **{k: str(v) for k, v in advertised(model, gpus).items()}}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {
                KWOK_ANNOTATION: KWOK_ANNOTATION_VALUE,
                "node.alpha.kubernetes.io/ttl": "0",
                LAYOUTS_ANNOTATION: encode_layouts(gpus),
            },
        },
        "spec": {},
        "status": {"capacity": capacity, "allocatable": dict(capacity)},
    }


def create_gpu_node(
    core: client.CoreV1Api,
    name: str,
    model_id: str = "h100-80gb",
    gpus: Sequence[GpuConfig] = (GpuConfig.mig({"1g.10gb": 7}),),
    *,
    labels: Mapping[str, str] | None = None,
    mig_config: str | None = None,
) -> client.V1Node:
    """Create the node and make sure its status carries the capacity (as a kubelet registering would)."""
    body = gpu_node_body(name, model_id, gpus, labels=labels, mig_config=mig_config)
    node = core.create_node(body)
    if (node.status.capacity or {}).get("pods") is None:  # in case the apiserver drops status on create
        node = core.patch_node_status(name, {"status": body["status"]})
    return node


def allocatable(core: client.CoreV1Api, name: str) -> dict[str, str]:
    """The node's extended GPU resources as the scheduler sees them (`nvidia.com/*` only)."""
    node = core.read_node(name)
    return {k: v for k, v in (node.status.allocatable or {}).items() if k.startswith(GFD_PREFIX)}
