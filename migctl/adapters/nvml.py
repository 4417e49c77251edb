"""Read-only NVML discovery (the NVML adapter): the only migctl module that imports `pynvml`.

Every call made here is a query (`nvmlInit`, `nvmlShutdown`, `nvmlSystem*Get*`, `nvmlDevice*Get*`,
`nvmlGpuInstanceGetInfo`): nothing is created, destroyed or reset, so `migctl agent --once --print` is safe on a
production GPU node. The NVML library is injectable (`NvmlReader(lib)`) so tests run against a fake module.

Profile memory is read from every MIG-capable GPU, MIG on or off: the driver's numbers move between releases
(H200 `1g.35gb`: 33024 MiB in mig-parted#120, 33280 MiB on driver 580.159.04), and the planner should size a
GPU's first layout by its own driver, not by the catalog's prior.

GPU instances are found through their MIG devices (`nvmlDeviceGetMigDeviceHandleByIndex`): a GPU instance
without a compute instance has no MIG device, is invisible to the device plugin too, and is not reported.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pynvml

from migctl.core.hardware.naming import profile_name
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.errors import MigctlError

MIB = 2**20
T = TypeVar("T")

# NVML GPU-instance profile index -> go-nvlib attribute suffix (nvml.h NVML_GPU_INSTANCE_PROFILE_*).
_ATTRIBUTES = {
    0x7: "+me",  # 1_SLICE_REV1
    0x8: "+me",  # 2_SLICE_REV1
    0xA: "+gfx",
    0xB: "+gfx",
    0xC: "+gfx",
    0x11: "+gfx",
    0xD: "-me",
    0xE: "-me",
    0xF: "+me.all",
    0x10: "+me.all",
}

# What a person should do about each failure; the NVML text alone ("Not Found", "Unknown Error") rarely says.
_HINTS = {
    pynvml.NVML_ERROR_LIBRARY_NOT_FOUND: (
        "libnvidia-ml.so.1 was not found: the NVIDIA driver is not installed on this node, or the container does not "
        "run with the NVIDIA runtime (runtimeClassName: nvidia, NVIDIA_VISIBLE_DEVICES=all)"
    ),
    pynvml.NVML_ERROR_DRIVER_NOT_LOADED: "the NVIDIA kernel driver is not loaded on this node (nvidia-smi fails too)",
    pynvml.NVML_ERROR_NO_PERMISSION: (
        "permission denied: the agent needs the /dev/nvidia* devices (NVIDIA runtime, NVIDIA_VISIBLE_DEVICES=all)"
    ),
    pynvml.NVML_ERROR_GPU_IS_LOST: "a GPU fell off the bus: the node needs a GPU reset or a reboot",
    pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH: (
        "the NVML library and the kernel driver have different versions (driver upgraded without reboot?)"
    ),
    pynvml.NVML_ERROR_RESET_REQUIRED: "a GPU needs a reset before it can be used",
    pynvml.NVML_ERROR_UNINITIALIZED: "NVML is not initialised (a bug in the agent; please report it)",
    pynvml.NVML_ERROR_TIMEOUT: "the driver timed out: the GPU may be hung",
    pynvml.NVML_ERROR_CORRUPTED_INFOROM: "a GPU's infoROM is corrupted: the GPU needs service",
}
_NO_DATA = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT)


@dataclass(frozen=True, slots=True)
class LiveProfile:
    """One GPU-instance profile as this GPU's driver reports it."""

    name: str
    profile_id: int
    compute_slices: int
    memory_mib: int


class NvmlError(MigctlError):
    """NVML could not be used: says which call failed, NVML's own words, and what to check."""

    def __init__(self, call: str, code: int | None, detail: str) -> None:
        self.call = call
        self.code = code
        hint = _HINTS.get(code) if code is not None else None
        super().__init__(f"NVML {call} failed: {detail}" + (f" ({hint})" if hint else ""))


class NvmlReader:
    """Reads one Inventory per `read()` call (init, query, shutdown)."""

    def __init__(self, lib: Any = None) -> None:
        self.lib: Any = pynvml if lib is None else lib

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            raise NvmlError(what, getattr(e, "value", None), str(e)) from e

    def _optional(self, fn: Callable[..., T], *args: Any) -> T | None:
        """A query some GPUs or drivers do not support: None instead of an error."""
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            if getattr(e, "value", None) in _NO_DATA:
                return None
            raise

    def read(self) -> Inventory:
        lib = self.lib
        self._call("nvmlInit", lib.nvmlInit)
        try:
            driver = self._call("nvmlSystemGetDriverVersion", lib.nvmlSystemGetDriverVersion)
            count = self._call("nvmlDeviceGetCount", lib.nvmlDeviceGetCount)
            gpus: list[GpuInfo] = []
            profiles: dict[str, int] = {}
            for index in range(count):
                try:
                    gpu, live = self._gpu(index)
                except lib.NVMLError as e:
                    raise NvmlError(f"query of GPU {index}", getattr(e, "value", None), str(e)) from e
                gpus.append(gpu)
                profiles.update(live)
            return Inventory(driver=_text(driver), gpus=tuple(gpus), profiles=profiles)
        finally:
            with contextlib.suppress(lib.NVMLError):  # the read already succeeded, or failed with a better message
                lib.nvmlShutdown()

    def _gpu(self, index: int) -> tuple[GpuInfo, dict[str, int]]:
        lib = self.lib
        h = lib.nvmlDeviceGetHandleByIndex(index)
        total_mib = int(lib.nvmlDeviceGetMemoryInfo(h).total) // MIB
        modes = self._optional(lib.nvmlDeviceGetMigMode, h)
        capable = modes is not None
        current = bool(modes and modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
        pending = bool(modes and modes[1] == pynvml.NVML_DEVICE_MIG_ENABLE)
        by_id = {pid: (p.name, p.memory_mib) for pid, p in self.profiles(h, total_mib).items()} if capable else {}
        instances: list[MigDevice] = []
        if current:
            for slot in range(int(lib.nvmlDeviceGetMaxMigDeviceCount(h))):
                mh = self._optional(lib.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
                if mh is None:
                    continue  # an empty MIG device slot
                gi_id = int(lib.nvmlDeviceGetGpuInstanceId(mh))
                gi_info = lib.nvmlGpuInstanceGetInfo(lib.nvmlDeviceGetGpuInstanceById(h, gi_id))
                pid = int(gi_info.profileId)
                if pid not in by_id:
                    raise NvmlError(
                        f"nvmlGpuInstanceGetInfo(GPU {index}, GI {gi_id})",
                        None,
                        f"unknown GPU-instance profile id {pid}",
                    )
                name, mib = by_id[pid]
                instances.append(
                    MigDevice(
                        profile=name,
                        profile_id=pid,
                        gi=gi_id,
                        start=int(gi_info.placement.start),
                        size=int(gi_info.placement.size),
                        memory_mib=mib,
                        uuid=_text(lib.nvmlDeviceGetUUID(mh)),
                        busy=self._busy(mh),
                    )
                )
            states = [d.busy for d in instances]
            busy: bool | None = True if any(states) else (None if None in states else False)
        else:
            busy = self._busy(h)
        gpu = GpuInfo(
            index=index,
            uuid=_text(lib.nvmlDeviceGetUUID(h)),
            name=_text(lib.nvmlDeviceGetName(h)),
            memory_mib=total_mib,
            mig_capable=capable,
            mig_enabled=current,
            mig_pending=pending,
            busy=busy,
            instances=tuple(sorted(instances, key=lambda d: (d.start, d.gi))),
            **self._pci(h),
        )
        return gpu, {name: mib for name, mib in by_id.values()}

    def profiles(self, handle: Any, total_mib: int) -> dict[int, LiveProfile]:
        """The GPU's instance profiles by NVML profile id, named from the driver's own numbers (go-nvlib names).

        The driver answers profile queries with MIG off too (H200, driver 580, seen 2026-11-30)."""
        lib = self.lib
        out: dict[int, LiveProfile] = {}
        for idx in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            info = self._optional(lib.nvmlDeviceGetGpuInstanceProfileInfo, handle, idx)
            if info is None or int(info.memorySizeMB) <= 0:
                continue
            slices, mib = int(info.sliceCount), int(info.memorySizeMB)
            name = profile_name(slices, mib, total_mib, _ATTRIBUTES.get(idx, ""))
            out[int(info.id)] = LiveProfile(name, int(info.id), slices, mib)
        return out

    def _pci(self, handle: Any) -> dict[str, str]:
        """The GPU's PCI device and subsystem ids, which mig-parted's device filters match (empty if unknown)."""
        lib = self.lib
        info = self._optional(lib.nvmlDeviceGetPciInfo, handle)
        if info is None:
            return {}
        return {
            "pci_device_id": f"0x{int(info.pciDeviceId) & 0xFFFFFFFF:08X}",
            "pci_subsystem_id": f"0x{int(info.pciSubSystemId) & 0xFFFFFFFF:08X}",
        }

    def _busy(self, handle: Any) -> bool | None:
        """Whether any compute or graphics process runs on a GPU or MIG device; None when NVML cannot say."""
        lib = self.lib
        compute = self._optional(lib.nvmlDeviceGetComputeRunningProcesses, handle)
        graphics = self._optional(lib.nvmlDeviceGetGraphicsRunningProcesses, handle)
        if compute or graphics:
            return True
        return None if compute is None else False


def _text(value: str | bytes) -> str:
    """Older pynvml releases return bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)
