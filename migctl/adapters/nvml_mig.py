"""The NVML calls that change MIG instances (the in-place path), beside the read-only `nvml.py`.

Only `migctl agent apply` and the agent's in-place loop use this module. It never changes MIG mode. Instances are
found by probing GPU-instance ids (`nvmlDeviceGetGpuInstanceById`), not through MIG devices, because a GPU
instance left without its compute instance by an interrupted change has no MIG device but still takes its slices.
Before a destroy the instance is looked up again and must still be the same one (profile id and placement, and
its MIG UUID when it has one): GPU-instance ids are reused for the same span, so an id alone proves nothing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from ctypes import byref
from dataclasses import dataclass
from typing import Any

import pynvml

from migctl.adapters.nvml import MIB, LiveProfile, NvmlError, NvmlReader, _text
from migctl.core.inplace.steps import Found

MAX_GPU_INSTANCE_ID = 32  # above any id NVML hands out on an 8- or 12-unit GPU (A100: 1..14)
MAX_COMPUTE_INSTANCE_ID = 8
_GONE = (pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT)


class InstanceInUseError(NvmlError):
    """NVML refused a destroy with IN_USE: a process, another client (DCGM), or a compute instance holds it."""


@dataclass(frozen=True)
class MigGpu:
    """One physical GPU as the in-place path sees it."""

    index: int
    uuid: str
    name: str
    memory_mib: int
    mig_enabled: bool
    profiles: dict[int, LiveProfile]  # NVML profile id -> the profile, as this driver names it
    instances: tuple[Found, ...]  # `holder` says only what NVML sees; the kubelet's view is added by the caller

    def profile_id(self, name: str) -> int | None:
        return next((pid for pid, p in self.profiles.items() if p.name == name), None)


class MigNvml(NvmlReader):
    """Reads and changes MIG instances; use inside `with session():` (one nvmlInit for the whole change)."""

    @contextlib.contextmanager
    def session(self) -> Iterator[MigNvml]:
        lib = self.lib
        self._call("nvmlInit", lib.nvmlInit)
        try:
            yield self
        finally:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlShutdown()

    # -- reading --------------------------------------------------------------------------------------------

    def count(self) -> int:
        lib = self.lib
        return int(self._call("nvmlDeviceGetCount", lib.nvmlDeviceGetCount))

    def gpu(self, index: int) -> MigGpu:
        lib = self.lib
        try:
            h = lib.nvmlDeviceGetHandleByIndex(index)
            total = int(lib.nvmlDeviceGetMemoryInfo(h).total) // MIB
            modes = self._optional(lib.nvmlDeviceGetMigMode, h)
            enabled = bool(modes and modes[0] == pynvml.NVML_DEVICE_MIG_ENABLE)
            profiles = self.profiles(h, total) if modes is not None else {}
            instances = self._instances(h, profiles) if enabled else ()
            return MigGpu(
                index,
                _text(lib.nvmlDeviceGetUUID(h)),
                _text(lib.nvmlDeviceGetName(h)),
                total,
                enabled,
                profiles,
                instances,
            )
        except lib.NVMLError as e:
            raise NvmlError(f"read of GPU {index}", getattr(e, "value", None), str(e)) from e

    def _instances(self, h: Any, profiles: dict[int, LiveProfile]) -> tuple[Found, ...]:
        lib = self.lib
        devices = self._mig_devices(h)
        out: list[Found] = []
        for gi_id in range(MAX_GPU_INSTANCE_ID):
            gi = self._lookup(lib.nvmlDeviceGetGpuInstanceById, h, gi_id)
            if gi is None:
                continue
            info = lib.nvmlGpuInstanceGetInfo(gi)
            pid = int(info.profileId)
            name = profiles[pid].name if pid in profiles else f"profile-{pid}"
            cis = [
                c
                for c in range(MAX_COMPUTE_INSTANCE_ID)
                if self._lookup(lib.nvmlGpuInstanceGetComputeInstanceById, gi, c)
            ]
            ci = cis[0] if cis else None
            uuid, holder = devices.get((gi_id, ci), ("", "")) if ci is not None else ("", "")
            if pid not in profiles:
                holder = f"unknown: NVML profile id {pid} is not one this GPU lists"
            elif len(cis) > 1:
                holder = f"unknown: {len(cis)} compute instances (not made by migctl)"
            elif ci is not None and not uuid:
                holder = f"unknown: no MIG device for GPU instance {gi_id}, compute instance {ci}"
            start, size = int(info.placement.start), int(info.placement.size)
            out.append(Found(name, pid, start, size, gi_id, ci, uuid, holder))
        return tuple(sorted(out, key=lambda f: f.start))

    def _mig_devices(self, h: Any) -> dict[tuple[int, int], tuple[str, str]]:
        """(GI id, CI id) -> (MIG UUID, what NVML says holds it: '' when no process runs on it)."""
        lib = self.lib
        out: dict[tuple[int, int], tuple[str, str]] = {}
        for slot in range(int(lib.nvmlDeviceGetMaxMigDeviceCount(h))):
            mh = self._optional(lib.nvmlDeviceGetMigDeviceHandleByIndex, h, slot)
            if mh is None:
                continue
            key = (int(lib.nvmlDeviceGetGpuInstanceId(mh)), int(lib.nvmlDeviceGetComputeInstanceId(mh)))
            busy = self._busy(mh)
            holder = "" if busy is False else ("processes (NVML)" if busy else "unknown: NVML cannot list processes")
            if busy:
                compute = self._optional(lib.nvmlDeviceGetComputeRunningProcesses, mh) or []
                graphics = self._optional(lib.nvmlDeviceGetGraphicsRunningProcesses, mh) or []
                holder = f"{len(compute) + len(graphics)} processes (NVML)"
            out[key] = (_text(lib.nvmlDeviceGetUUID(mh)), holder)
        return out

    def _lookup(self, fn: Any, *args: Any) -> Any:
        """A GPU or compute instance by id, None when there is none (NOT_FOUND, or an id out of range)."""
        try:
            return fn(*args)
        except self.lib.NVMLError as e:
            if getattr(e, "value", None) in _GONE:
                return None
            raise

    # -- changing -------------------------------------------------------------------------------------------

    def destroy(self, index: int, found: Found) -> None:
        """Destroy the compute instance, then the GPU instance, of `found`; nothing when it is already gone.
        Raises InstanceInUseError on IN_USE, NvmlError when the id now names another instance."""
        lib = self.lib
        try:
            h = lib.nvmlDeviceGetHandleByIndex(index)
            gi = self._lookup(lib.nvmlDeviceGetGpuInstanceById, h, found.gi)
            if gi is None:
                return
            info = lib.nvmlGpuInstanceGetInfo(gi)
            spot = (int(info.profileId), int(info.placement.start), int(info.placement.size))
            if spot != (found.profile_id, found.start, found.size):
                return  # the id names another instance now: the one meant is gone
            if found.uuid and found.ci is not None:
                now, _ = self._mig_devices(h).get((found.gi, found.ci), ("", ""))
                if now and now != found.uuid:
                    return  # re-created on the same span since it was read: not the instance meant
            for c in range(MAX_COMPUTE_INSTANCE_ID):
                ci = self._lookup(lib.nvmlGpuInstanceGetComputeInstanceById, gi, c)
                if ci is not None:
                    lib.nvmlComputeInstanceDestroy(ci)
            lib.nvmlGpuInstanceDestroy(gi)
        except lib.NVMLError as e:
            code = getattr(e, "value", None)
            kind = InstanceInUseError if code == pynvml.NVML_ERROR_IN_USE else NvmlError
            raise kind(f"destroy of {found} on GPU {index}", code, str(e)) from e

    def create(self, index: int, profile_id: int, start: int, size: int) -> tuple[int, int, str]:
        """A GPU instance at exactly this placement with one compute instance spanning it; returns (GI id, CI id,
        MIG UUID). A failed compute-instance create destroys the GPU instance it made before raising."""
        lib = self.lib
        h = self._call("nvmlDeviceGetHandleByIndex", lib.nvmlDeviceGetHandleByIndex, index)
        spot = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
        where = f"GPU {index}, profile id {profile_id} at {start}+{size}"
        gi = self._call(
            f"nvmlDeviceCreateGpuInstanceWithPlacement({where})",
            lib.nvmlDeviceCreateGpuInstanceWithPlacement,
            h,
            profile_id,
            byref(spot),
        )
        try:
            info = lib.nvmlGpuInstanceGetInfo(gi)
            gi_id = int(info.id)
            placed = (int(info.placement.start), int(info.placement.size))
            if placed != (start, size):  # a misread placement argument must not leave an instance elsewhere
                lib.nvmlGpuInstanceDestroy(gi)
                raise NvmlError(f"nvmlDeviceCreateGpuInstanceWithPlacement({where})", None, f"created at {placed}")
            ci_profile = self._full_compute_profile(gi, profile_id, h)
            ci = lib.nvmlGpuInstanceCreateComputeInstance(gi, ci_profile)
            ci_id = int(lib.nvmlComputeInstanceGetInfo(ci).id)
        except lib.NVMLError as e:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlGpuInstanceDestroy(gi)
            raise NvmlError(f"compute instance for {where}", getattr(e, "value", None), str(e)) from e
        uuid, _ = self._mig_devices(h).get((gi_id, ci_id), ("", ""))
        if not uuid.startswith("MIG-"):
            raise NvmlError(f"MIG device of {where}", None, f"no MIG device for GI {gi_id}, CI {ci_id} ({uuid!r})")
        return gi_id, ci_id, uuid

    def _full_compute_profile(self, gi: Any, profile_id: int, h: Any) -> int:
        """The compute-instance profile spanning the whole GPU instance: the device plugin serves no other."""
        lib = self.lib
        total = int(lib.nvmlDeviceGetMemoryInfo(h).total) // MIB
        slices = self.profiles(h, total)[profile_id].compute_slices
        shared = pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
        for idx in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
            info = self._optional(lib.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, idx, shared)
            if info is not None and int(info.sliceCount) == slices:
                return int(info.id)
        raise NvmlError("nvmlGpuInstanceGetComputeInstanceProfileInfo", None, f"no {slices}-slice compute profile")
