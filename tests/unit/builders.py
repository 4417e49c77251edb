"""Small builders for planner tests: a node of N GPUs of a model with given layouts, pending pods."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Gpu, GpuDemand, Node, Pod, Resources, Taint, Toleration
from migctl.core.model.gpu_config import GpuConfig

CATALOG = load_catalog()


def node(
    name: str,
    model: str,
    layouts: Sequence[Mapping[str, int] | None],
    used: Sequence[Mapping[str, int]] | None = None,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Taint] = (),
    cpu_m: int = 64_000,
    usage_known: bool = True,
    frozen: str = "",
    gpu_pods: Sequence[tuple[str, int]] = (),
) -> Node:
    """`layouts[i]` is GPU i's current MIG layout; None means MIG disabled (a whole GPU)."""
    m = CATALOG.model(model)
    gpus = []
    for i, lay in enumerate(layouts):
        cfg = GpuConfig.disabled() if lay is None else GpuConfig.mig(lay)
        u = dict(used[i]) if used else {}
        gpus.append(Gpu(i, cfg, u if usage_known else None, bool(u.get("gpu")) if usage_known else None))
    free: dict[str, int] = {}
    for g in gpus:
        for p, c in g.config.layout:
            free[p] = free.get(p, 0) + c - ((g.used or {}).get(p, 0) if usage_known else 0)
    return Node(
        name=name,
        labels=dict(labels or {}),
        taints=tuple(taints),
        allocatable=Resources(cpu_m, 512 * 2**30, 110),
        model=m,
        gpus=tuple(gpus),
        mig_free=free,
        usage_known=usage_known,
        frozen_reason=frozen,
        gpu_pods=tuple((k, p, None) for k, p in gpu_pods),
    )


def vram(name: str, gib: float, priority: int = 0, **kw: object) -> Pod:
    return Pod("ns", name, priority=priority, gpu=(GpuDemand("vram", vram_mib=int(gib * 1024)),), **kw)  # type: ignore[arg-type]


def mig(name: str, profile: str, count: int = 1, priority: int = 0, **kw: object) -> Pod:
    return Pod("ns", name, priority=priority, gpu=(GpuDemand("profile", count, profile=profile),), **kw)  # type: ignore[arg-type]


def whole(name: str, priority: int = 0) -> Pod:
    return Pod("ns", name, priority=priority, gpu=(GpuDemand("gpu"),))


def tolerate(key: str, value: str) -> tuple[Toleration, ...]:
    return (Toleration(key, "Equal", value, "NoSchedule"),)
