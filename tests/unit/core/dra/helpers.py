"""Helpers for the DRA core tests: pools in NVIDIA's exact shape (tests/nvidia_slices.py, read by the adapter) and
claims written as plain records."""

from __future__ import annotations

from collections.abc import Sequence

from migctl.adapters.dra.deviceclasses import read_device_classes
from migctl.adapters.dra.slices import read_slices
from migctl.core.dra.claims import ClaimSpec, Constraint, DeviceClassSpec, ExactRequest, Request
from migctl.core.dra.devices import NodePool
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import Toleration
from tests.nvidia_slices import device_classes, node_slices

MIG = "mig.nvidia.com"
GPU = "gpu.nvidia.com"


def pool(catalog: Catalog, model: str, gpus: int = 1, node: str = "n1", **kw: object) -> NodePool:
    reading = read_slices(node_slices(node, catalog.model(model), gpus, **kw), catalog)  # type: ignore[arg-type]
    assert not reading.problems, reading.problems
    return reading.pools[0]


def classes(catalog: Catalog, model: str | None = None) -> dict[str, DeviceClassSpec]:
    return dict(read_device_classes(device_classes(catalog.model(model) if model else None)).classes)


def profile_cel(profile: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{profile}'"


def memory_cel(op: str, q: str) -> str:
    return f"device.capacity['gpu.nvidia.com'].memory.{op}(quantity('{q}'))"


def exact(
    cls: str = MIG, *selectors: str, count: int = 1, tolerations: Sequence[Toleration] = (), mode: str = "ExactCount"
) -> ExactRequest:
    path = "spec.devices.requests[0].exactly"
    return ExactRequest(cls, tuple(selectors), count, mode, tuple(tolerations), path=path)  # type: ignore[arg-type]


def claim(name: str, *requests: Request | ExactRequest, constraints: Sequence[Constraint] = ()) -> ClaimSpec:
    reqs = tuple(
        r if isinstance(r, Request) else Request(f"r{i}", exactly=r, path=f"spec.devices.requests[{i}]")
        for i, r in enumerate(requests)
    )
    return ClaimSpec("ns", name, reqs, tuple(constraints))


def profile_claim(name: str, profile: str, count: int = 1) -> ClaimSpec:
    return claim(name, exact(MIG, profile_cel(profile), count=count))
