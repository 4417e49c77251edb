"""NVIDIA's DRA device names, both ways, on migctl's catalog profile names.

The driver `gpu.nvidia.com` (kubernetes-sigs/dra-driver-nvidia-gpu, cmd/gpu-kubelet-plugin) names a whole GPU
`gpu-<minor>` and a MIG device `gpu-<minor>-mig-<token>-<giProfileID>-<placementStart>`, where the token is the
profile name without dots, lower-cased, every other character outside `[a-z0-9-]` turned into `-` and `-` trimmed
at both ends (mig.go `ToCanonicalName`, `toRFC1123Compliant`): `1g.10gb` -> `1g10gb`, `1g.10gb+me` -> `1g10gb-me`,
`1g.24gb+me.all` -> `1g24gb-meall`. `+me` and `-me` both render `-me`, so a token alone can be ambiguous; the GI
profile id in the name tells them apart, which is why `profile_for` takes both. Releases up to v25.8 named static
MIG devices `gpu-<minor>-mig-<giProfileID>-<start>-<size>` (no token); `parse_device_name` reads both forms.

These names matter beyond display: the scheduler walks a slice's devices in the order listed and NVIDIA lists
them sorted by name, so the name is the first-fit order (docs/dra.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from migctl.core.hardware.gpu_model import GpuModel, Profile

DRIVER = "gpu.nvidia.com"
MAX_NAME = 253  # toRFC1123Compliant truncates here (a DRA device name is at most 63; NVIDIA's never come close)

_BAD = re.compile(r"[^a-z0-9.-]")
_GPU = re.compile(r"^gpu-(\d+)$")
_VFIO = re.compile(r"^gpu-vfio-(\d+)$")
_MIG = re.compile(r"^gpu-(\d+)-mig-(.+)-(\d+)-(\d+)$")  # NVIDIA's own regex (mig.go canonicalMigNameRegex)
_COUNTER_SET = re.compile(r"^gpu-(\d+)-counter-set$")
_SLICE_COUNTER = re.compile(r"^memory-slice-(\d+)$")
_SLICE_CAPACITY = re.compile(r"^memorySlice(\d+)$")
_CAMEL_1 = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_2 = re.compile(r"([A-Z]+)([A-Z][a-z])")


def _rfc1123(name: str) -> str:
    """NVIDIA's toRFC1123Compliant: lower-case, anything else than [a-z0-9.-] -> '-', trim '-' and a final '.'."""
    out = _BAD.sub("-", name.lower()).strip("-")
    return out.removesuffix(".")[:MAX_NAME]


def profile_token(profile: str) -> str:
    """The profile part of a MIG device name: `1g.10gb+me` -> `1g10gb-me`."""
    return _rfc1123(profile.replace(".", ""))


def gpu_device_name(minor: int) -> str:
    return f"gpu-{minor}"


def mig_device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """`gpu-0-mig-1g10gb-19-0`: the name of a MIG device (static since v25.12, and every DynamicMIG device)."""
    return f"gpu-{minor}-mig-{profile_token(profile)}-{profile_id}-{start}"


def legacy_mig_device_name(minor: int, profile_id: int, start: int, size: int) -> str:
    """`gpu-1-mig-19-4-1`: a static MIG device as releases up to v25.8 named it."""
    return f"gpu-{minor}-mig-{profile_id}-{start}-{size}"


def counter_set_name(minor: int) -> str:
    """The one CounterSet a DynamicMIG GPU shares with its partitions (partitions.go GetSharedCounterSetName)."""
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    """A DynamicMIG counter of capacity 1 per memory slice (partitions.go memsliceCounterName)."""
    return f"memory-slice-{index}"


def memory_slice_capacity(index: int) -> str:
    """A static MIG device's capacity entry per memory slice it holds (deviceinfo.go, `memorySlice<i>`)."""
    return f"memorySlice{index}"


def counter_name(capacity: str) -> str:
    """A capacity's counter name in a DynamicMIG counter set (partitions.go camelToDNSName): `copyEngines` ->
    `copy-engines`, `memory` -> `memory`."""
    return _rfc1123(_CAMEL_2.sub(r"\1-\2", _CAMEL_1.sub(r"\1-\2", capacity)))


@dataclass(frozen=True, slots=True)
class ParsedName:
    """What a device name says. `token`, `profile_id` and `start` are set for MIG names; `size` only for the
    legacy form, which has no token."""

    kind: Literal["gpu", "mig", "vfio"]
    minor: int
    token: str = ""
    profile_id: int | None = None
    start: int | None = None
    size: int | None = None

    @property
    def legacy(self) -> bool:
        return self.kind == "mig" and not self.token


def parse_device_name(name: str) -> ParsedName:
    """Read an NVIDIA device name; ValueError naming the name and the forms expected otherwise."""
    if m := _GPU.match(name):
        return ParsedName("gpu", int(m.group(1)))
    if m := _VFIO.match(name):
        return ParsedName("vfio", int(m.group(1)))
    if m := _MIG.match(name):
        minor, middle, third, fourth = int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))
        if middle.isdigit():  # gpu-<minor>-mig-<id>-<start>-<size>: a token always holds a letter ('g')
            return ParsedName("mig", minor, profile_id=int(middle), start=third, size=fourth)
        if _rfc1123(middle) != middle or "." in middle:
            raise ValueError(f"device name {name!r}: {middle!r} is not a profile token as NVIDIA renders one")
        return ParsedName("mig", minor, token=middle, profile_id=third, start=fourth)
    raise ValueError(
        f"device name {name!r} is not one of NVIDIA's forms gpu-<minor>, gpu-<minor>-mig-<profile>-<id>-<start>, "
        "gpu-<minor>-mig-<id>-<start>-<size> or gpu-vfio-<index>"
    )


def profile_for(model: GpuModel, token: str, profile_id: int | None) -> Profile | None:
    """The catalog profile a MIG name means on `model`: the profile with this token and GI profile id; by token
    alone only when that is unambiguous and the catalog does not know the id. None when the model has none."""
    same = [p for p in model.profiles if profile_token(p.name) == token]
    by_id = [p for p in same if profile_id is not None and p.profile_id == profile_id]
    if by_id:
        return by_id[0]
    unknown_id = [p for p in same if p.profile_id is None]
    return unknown_id[0] if len(same) == 1 and unknown_id else None


def profile_by_id(model: GpuModel, profile_id: int) -> Profile | None:
    """The catalog profile with this GI profile id (legacy names carry no token)."""
    return next((p for p in model.profiles if p.profile_id == profile_id), None)


def parse_counter_set_name(name: str) -> int | None:
    """The GPU minor of `gpu-<minor>-counter-set`, None for another name."""
    m = _COUNTER_SET.match(name)
    return int(m.group(1)) if m else None


def memory_slice_index(counter: str) -> int | None:
    """The slice index of `memory-slice-<i>` (counter) or `memorySlice<i>` (capacity), None for another name."""
    m = _SLICE_COUNTER.match(counter) or _SLICE_CAPACITY.match(counter)
    return int(m.group(1)) if m else None
