"""A fake `pynvml` that can change MIG instances, for the in-place agent's tests (no GPU can run here).

Only NVML is simulated, at pynvml's interface: the same function names and argument forms (the placement is passed
as `byref(c_nvmlGpuInstancePlacement_t(start, size))`; anything else raises TypeError, as ctypes would misread it),
and failures raise pynvml's real error classes (`pynvml.NVMLError(code)` returns the generated subclass).
The geometry is the catalog's (profiles/a100-40gb.yaml): each profile's allowed placements and maximum count.

What it enforces, as nvml.h documents: create needs MIG on (NOT_SUPPORTED), an allowed placement
(INVALID_ARGUMENT), free slices and a count under the profile's maximum (INSUFFICIENT_RESOURCES); destroying a
compute instance with processes, or a GPU instance that still has compute instances, raises IN_USE. GPU-instance ids
follow the span: the same span gets the same id again after a destroy and a create. Failpoints: fail the Nth GPU- or
compute-instance create, the agent killed at the Nth GPU-instance create or destroy, IN_USE on destroying the
instance at a span that clears after k tries or never (k < 0), a driver that ignores the placement asked.
Every mutating call is recorded in `mutations`.
"""

# ruff: noqa: N802 - the names are pynvml's
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

from tests.unit.builders import CATALOG
from tests.unit.fake_nvml import A100_40GB_PROFILES, MIB

Span = tuple[int, int]
MUTATING = (
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
)
# compute-instance profile index -> slices (nvml.h NVML_COMPUTE_INSTANCE_PROFILE_*_SLICE); its id is the index
CI_PROFILES = {0x0: 1, 0x1: 2, 0x2: 3, 0x3: 4, 0x4: 7, 0x5: 8, 0x6: 6}


@dataclass
class FakeCi:
    profile_id: int
    uuid: str
    processes: int = 0


@dataclass
class FakeGi:
    profile_id: int
    start: int
    size: int
    cis: dict[int, FakeCi] = field(default_factory=dict)


@dataclass
class MigGpu:
    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-a100-0"
    total_mib: int = 40536
    mig: int = 1  # current MIG mode (pending is the same)
    gis: dict[int, FakeGi] = field(default_factory=dict)
    span_ids: dict[Span, int] = field(default_factory=dict)


def a100_placements() -> dict[int, tuple[Span, ...]]:
    """Profile id -> allowed placements, from the shipped catalog."""
    model = CATALOG.model("a100-40gb")
    return {p.profile_id: p.placements for p in model.profiles if p.profile_id is not None}


class AgentKilled(BaseException):
    """Stands for SIGKILL: nothing in the agent catches it, so no rollback runs (a failpoint)."""


class FakeMigNvml:
    """Module-like; one instance is one machine's driver."""

    NVMLError = pynvml.NVMLError

    def __init__(self, gpus: list[MigGpu]) -> None:
        self.gpus = gpus
        self.placements = a100_placements()
        self.profiles = dict(A100_40GB_PROFILES)  # index -> (id, slices, MiB)
        model = CATALOG.model("a100-40gb")
        self.max_count = {p.profile_id: p.max_instances for p in model.profiles if p.profile_id is not None}
        self.initialized = 0
        self.calls: list[str] = []
        self.mutations: list[tuple[str, int, Span]] = []
        self.fail_gi_create: dict[int, int] = {}  # Nth GPU-instance create (1-based) -> NVML error code
        self.fail_ci_create: dict[int, int] = {}
        self.in_use_on_destroy: dict[tuple[int, Span], int] = {}  # (GPU, span) -> IN_USE answers left; <0: forever
        self.ignore_placement = False  # a driver that misreads the placement argument: first free allowed spot
        self.kill_at_gi_create: int | None = None
        self.kill_at_gi_destroy: int | None = None  # ... or as it calls the Nth GPU-instance destroy
        self.gi_destroys = 0  # the agent "dies" as it calls the Nth GPU-instance create
        self.gi_creates = self.ci_creates = 0
        self.next_uuid = 100

    # -- building a machine -------------------------------------------------------------------------------

    def add(self, gpu: int, profile: str, start: int, processes: int = 0) -> str:
        """Put an instance (GPU instance plus full compute instance) on a GPU directly; returns its MIG UUID."""
        pid = CATALOG.model("a100-40gb").profile(profile).profile_id
        assert pid is not None
        size = next(z for s, z in self.placements[pid] if s == start)
        gi = self._new_gi(self.gpus[gpu], pid, start, size)
        slices = next(s for i, s, _ in self.profiles.values() if i == pid)
        ci = FakeCi(next(k for k, v in CI_PROFILES.items() if v == slices), self._uuid(), processes)
        gi.cis[0] = ci
        return ci.uuid

    def layout(self, gpu: int) -> list[tuple[int, int, int, str]]:
        """(profile id, start, size, MIG UUID or '') per GPU instance, by start."""
        out = []
        for g in self.gpus[gpu].gis.values():
            uuid = next(iter(g.cis.values())).uuid if g.cis else ""
            out.append((g.profile_id, g.start, g.size, uuid))
        return sorted(out, key=lambda t: t[1])

    def _uuid(self) -> str:
        self.next_uuid += 1
        return f"MIG-{self.next_uuid:04d}-fake"

    def _new_gi(self, gpu: MigGpu, pid: int, start: int, size: int) -> FakeGi:
        span = (start, size)
        gi_id = gpu.span_ids.setdefault(span, len(gpu.span_ids) + 1)  # the same span gets the same id again
        gi = FakeGi(pid, start, size)
        gpu.gis[gi_id] = gi
        return gi

    # -- helpers ------------------------------------------------------------------------------------------

    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if not self.initialized and name != "nvmlInit":
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)

    def _gpu(self, handle: Any) -> MigGpu:
        return self.gpus[int(handle[1])]

    def _gi(self, handle: Any) -> FakeGi:
        gi = self._gpu(handle).gis.get(handle[2])
        if gi is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # a stale handle
        return gi

    def _ci(self, handle: Any) -> FakeCi:
        ci = self._gi(handle).cis.get(handle[3])
        if ci is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ci

    def _migs(self, gpu: MigGpu) -> list[tuple[int, int]]:
        return sorted((g, c) for g, gi in gpu.gis.items() for c in gi.cis)

    # -- queries ------------------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "550.54.15"

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
        return self._ci(handle).uuid if handle[0] == "mig" else self._gpu(handle).uuid

    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        total = self._gpu(handle).total_mib * MIB
        return SimpleNamespace(total=total, free=total, used=0)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        self._enter("nvmlDeviceGetPciInfo")
        return SimpleNamespace(pciDeviceId=0x20B010DE, pciSubSystemId=0x134F10DE)

    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        mode = self._gpu(handle).mig
        return [mode, mode]

    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle: Any, profile: int, version: int = 2) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        if profile not in self.profiles:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        pid, slices, mib = self.profiles[profile]
        return SimpleNamespace(id=pid, sliceCount=slices, memorySizeMB=mib, instanceCount=self.max_count[pid])

    def nvmlDeviceGetGpuInstanceById(self, handle: Any, gi_id: int) -> Any:
        self._enter("nvmlDeviceGetGpuInstanceById")
        gpu = self._gpu(handle)
        if not gpu.mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gi_id not in gpu.gis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("gi", handle[1], gi_id)

    def nvmlGpuInstanceGetInfo(self, handle: Any) -> Any:
        self._enter("nvmlGpuInstanceGetInfo")
        gi = self._gi(handle)
        placement = SimpleNamespace(start=gi.start, size=gi.size)
        return SimpleNamespace(device=("gpu", handle[1]), id=handle[2], profileId=gi.profile_id, placement=placement)

    def nvmlGpuInstanceGetComputeInstanceById(self, handle: Any, ci_id: int) -> Any:
        self._enter("nvmlGpuInstanceGetComputeInstanceById")
        if ci_id not in self._gi(handle).cis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("ci", handle[1], handle[2], ci_id)

    def nvmlComputeInstanceGetInfo(self, handle: Any) -> Any:
        self._enter("nvmlComputeInstanceGetInfo")
        ci = self._ci(handle)
        return SimpleNamespace(device=("gpu", handle[1]), id=handle[3], profileId=ci.profile_id)

    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, handle: Any, profile: int, eng_profile: int, version: int = 2
    ) -> Any:
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        gi = self._gi(handle)
        gi_slices = next(s for i, s, _ in self.profiles.values() if i == gi.profile_id)
        slices = CI_PROFILES.get(profile)
        if slices is None or slices > gi_slices or eng_profile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(id=profile, sliceCount=slices, instanceCount=gi_slices // slices)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        return 7 if self._gpu(handle).mig else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, index: int) -> Any:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        migs = self._migs(self._gpu(handle))
        if index >= len(migs):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], *migs[index])

    def nvmlDeviceGetGpuInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return int(handle[2])

    def nvmlDeviceGetComputeInstanceId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return int(handle[3])

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        n = self._ci(handle).processes if handle[0] == "mig" else 0
        return [SimpleNamespace(pid=4000 + i, usedGpuMemory=MIB) for i in range(n)]

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]:
        self._enter("nvmlDeviceGetGraphicsRunningProcesses")
        return []

    # -- mutations ----------------------------------------------------------------------------------------

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle: Any, profile_id: int, placement: Any) -> Any:
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement")
        spot = getattr(placement, "_obj", None)
        if not isinstance(spot, pynvml.c_nvmlGpuInstancePlacement_t):
            raise TypeError("placement must be byref(c_nvmlGpuInstancePlacement_t(start, size))")
        span = (int(spot.start), int(spot.size))
        self.mutations.append(("create-gi", handle[1], span))
        gpu = self._gpu(handle)
        self.gi_creates += 1
        if self.gi_creates == self.kill_at_gi_create:
            raise AgentKilled
        if not gpu.mig:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.gi_creates in self.fail_gi_create:
            raise pynvml.NVMLError(self.fail_gi_create[self.gi_creates])
        if profile_id not in self.placements or span not in self.placements[profile_id]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        used = 0
        for gi in gpu.gis.values():
            used |= ((1 << gi.size) - 1) << gi.start
        if self.ignore_placement:
            span = next((s for s in self.placements[profile_id] if not used & (((1 << s[1]) - 1) << s[0])), span)
        mask = ((1 << span[1]) - 1) << span[0]
        same = sum(1 for gi in gpu.gis.values() if gi.profile_id == profile_id)
        if used & mask or same >= self.max_count[profile_id]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        self._new_gi(gpu, profile_id, *span)
        return ("gi", handle[1], gpu.span_ids[span])

    def nvmlGpuInstanceCreateComputeInstance(self, handle: Any, profile_id: int) -> Any:
        self._enter("nvmlGpuInstanceCreateComputeInstance")
        gi = self._gi(handle)
        self.mutations.append(("create-ci", handle[1], (gi.start, gi.size)))
        self.ci_creates += 1
        if self.ci_creates in self.fail_ci_create:
            raise pynvml.NVMLError(self.fail_ci_create[self.ci_creates])
        if gi.cis or profile_id not in CI_PROFILES:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi.cis[0] = FakeCi(profile_id, self._uuid())
        return ("ci", handle[1], handle[2], 0)

    def _in_use(self, handle: Any, gi: FakeGi) -> bool:
        key = (int(handle[1]), (gi.start, gi.size))
        left = self.in_use_on_destroy.get(key, 0)
        if left == 0:
            return False
        if left > 0:
            self.in_use_on_destroy[key] = left - 1
        return True

    def nvmlComputeInstanceDestroy(self, handle: Any) -> None:
        self._enter("nvmlComputeInstanceDestroy")
        gi, ci = self._gi(handle), self._ci(handle)
        self.mutations.append(("destroy-ci", handle[1], (gi.start, gi.size)))
        if ci.processes or self._in_use(handle, gi):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del gi.cis[handle[3]]

    def nvmlGpuInstanceDestroy(self, handle: Any) -> None:
        self._enter("nvmlGpuInstanceDestroy")
        gi = self._gi(handle)
        self.gi_destroys += 1
        if self.gi_destroys == self.kill_at_gi_destroy:
            raise AgentKilled
        self.mutations.append(("destroy-gi", handle[1], (gi.start, gi.size)))
        if gi.cis:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE)
        del self._gpu(handle).gis[handle[2]]
