"""A fake `pynvml` for agent tests: exactly the functions `migctl.adapters.nvml` calls, with real pynvml errors.

Machines (numbers from docs/profiles.md and the reference fact base, not from go-nvml's synthetic mocks):
- `a100_mig()`: A100-SXM4-40GB, MIG on, 3g.20gb (busy) + 2g.10gb (idle) + 1g.5gb (busy), the placements real
  NVML reports for that creation order (0:4, 4:2, 6:1).
- `h100_no_mig()`: H100 80GB HBM3, MIG capable but disabled, idle.
- `h200_no_mig()`: H200, MIG capable but disabled, with the profile table a real H200 returned through NVML
  (driver 580.159.04, `hack/nvml-catalog-check.py` on the device machine, 2026-11-30; docs/profiles.md).
- `t4()`: Tesla T4, not MIG capable, one process running.
Errors are `pynvml.NVMLError` subclasses, so the agent's error handling is the one that meets real NVML.
Every call is recorded in `calls` so a test can prove the agent only queries.
"""

# ruff: noqa: N802 - the names are pynvml's
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 2**20
NVMLError = pynvml.NVMLError
NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT


@dataclass
class FakeInstance:
    gi: int
    profile_id: int
    start: int
    size: int
    uuid: str
    processes: int = 0


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total_mib: int
    mig: tuple[int, int] | None  # (current, pending); None = not MIG capable
    profiles: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # index -> (id, slices, MiB)
    instances: list[FakeInstance] = field(default_factory=list)
    processes: int = 0
    lost: bool = False  # every query on it raises GPU_IS_LOST
    pci: tuple[int, int] | None = None  # (pciDeviceId, pciSubSystemId); None: the query is not supported


# A100-40GB profile table (nvidia-smi mig -lgip): index -> (profile id, compute slices, memory MiB).
A100_40GB_PROFILES = {
    0x0: (19, 1, 4864),
    0x7: (20, 1, 4864),
    0x9: (15, 1, 9984),
    0x1: (14, 2, 9984),
    0x2: (9, 3, 20096),
    0x3: (5, 4, 20096),
    0x4: (0, 7, 40320),
}
H100_80GB_PROFILES = {
    0x0: (19, 1, 9984),
    0x7: (20, 1, 9984),
    0x9: (15, 1, 20096),
    0x1: (14, 2, 20096),
    0x2: (9, 3, 40320),
    0x3: (5, 4, 40448),
    0x4: (0, 7, 81152),
}

# H200 (NVML total 143771 MiB), read on real hardware with MIG disabled, driver 580.159.04.
H200_DRIVER_580_PROFILES = {
    0x0: (19, 1, 16384),
    0x7: (20, 1, 16384),
    0x9: (15, 1, 33280),
    0x1: (14, 2, 33280),
    0x2: (9, 3, 71424),
    0x3: (5, 4, 71424),
    0x4: (0, 7, 143360),
}


def a100_mig() -> FakeGpu:
    return FakeGpu(
        "NVIDIA A100-SXM4-40GB",
        "GPU-a100-0000",
        40536,
        (1, 1),
        dict(A100_40GB_PROFILES),
        [
            FakeInstance(gi=2, profile_id=9, start=0, size=4, uuid="MIG-a100-3g", processes=1),
            FakeInstance(gi=3, profile_id=14, start=4, size=2, uuid="MIG-a100-2g"),
            FakeInstance(gi=9, profile_id=19, start=6, size=1, uuid="MIG-a100-1g", processes=2),
        ],
    )


def h100_no_mig() -> FakeGpu:
    return FakeGpu("NVIDIA H100 80GB HBM3", "GPU-h100-0000", 81559, (0, 0), dict(H100_80GB_PROFILES))


def h200_no_mig() -> FakeGpu:
    return FakeGpu("NVIDIA H200", "GPU-h200-0000", 143771, (0, 0), dict(H200_DRIVER_580_PROFILES))


def t4() -> FakeGpu:
    return FakeGpu("Tesla T4", "GPU-t4-0000", 15360, None, processes=1)


class FakeNvml:
    """Module-like: attribute names and signatures follow pynvml."""

    NVMLError = pynvml.NVMLError
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT

    def __init__(
        self,
        gpus: list[FakeGpu],
        *,
        init_error: int | None = None,
        driver: str = "550.54.15",
        process_queries: bool = True,
    ) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.process_queries = process_queries
        self.initialized = 0
        self.calls: list[str] = []

    # -- helpers ----------------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if not self.initialized and name != "nvmlInit":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> FakeGpu:
        gpu = self.gpus[handle[1]]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def _instance(self, handle: Any) -> FakeInstance:
        return self._gpu(handle).instances[handle[2]]

    # -- the pynvml API ---------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", index)

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._instance(handle).uuid if handle[0] == "mig" else self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        gpu = self._gpu(handle)
        return SimpleNamespace(total=gpu.total_mib * MIB, free=gpu.total_mib * MIB, used=0)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetPciInfo")
        gpu = self._gpu(handle)
        if gpu.pci is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(pciDeviceId=gpu.pci[0], pciSubSystemId=gpu.pci[1])

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        gpu = self._gpu(handle)
        if gpu.mig is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return list(gpu.mig)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int, version: int = 2) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        gpu = self._gpu(handle)
        if gpu.mig is None or profile not in gpu.profiles:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, slices, mib = gpu.profiles[profile]
        return SimpleNamespace(id=pid, sliceCount=slices, memorySizeMB=mib, instanceCount=7)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if self._gpu(handle).mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        gpu = self._gpu(handle)
        if index >= len(gpu.instances):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], index)

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._instance(handle).gi

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi: int) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceById")
        for n, inst in enumerate(self._gpu(handle).instances):
            if inst.gi == gi:
                return ("gi", handle[1], n)
        raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gi_handle: Any) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        inst = self._instance(gi_handle)
        return SimpleNamespace(
            id=inst.gi, profileId=inst.profile_id, placement=SimpleNamespace(start=inst.start, size=inst.size)
        )

    def _processes(self, handle: Any) -> list[Any]:
        if not self.process_queries:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        n = self._instance(handle).processes if handle[0] == "mig" else self._gpu(handle).processes
        return [SimpleNamespace(pid=1000 + i, usedGpuMemory=MIB) for i in range(n)]

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        return self._processes(handle)

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        if not self.process_queries:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return []
