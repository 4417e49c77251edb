"""NVIDIA's MIG naming rules, reproduced so names match what the device plugin and mig-parted use.

Kubernetes resource names and mig-parted keys are not the driver's profile names: go-nvlib computes them from
NVML numbers (NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go, getMigMemorySizeGB):

    frac = ceil(profile_bytes / total_bytes * 8) / 8
    GB   = round(frac * ceil(total_bytes / 2**30))        # Go's math.Round: half away from zero

The device plugin (mixed strategy) then advertises `nvidia.com/mig-<name>` with `+` replaced by `.`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from functools import lru_cache

from migctl.wire import names

RESOURCE_PREFIX = names.MIG_RESOURCE_PREFIX
WHOLE_GPU_RESOURCE = names.WHOLE_GPU_RESOURCE

# [<C>c.]<G>g.<GB>gb[+attr[,attr]|-attr], the form mig-parted accepts (pkg/types/mig_config.go).
_PROFILE_RE = re.compile(
    r"^(?:(?P<ci>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?P<attrs>(?:\+[a-z.]+(?:,[a-z.]+)*|-[a-z.]+)?)$"
)


@dataclass(frozen=True)
class ProfileName:
    """A parsed MIG profile name."""

    compute_slices: int
    memory_gb: int
    attributes: str = ""  # "", "+me", "+me.all", "+gfx", "-me"
    ci_slices: int | None = None

    def __str__(self) -> str:
        ci = f"{self.ci_slices}c." if self.ci_slices is not None else ""
        return f"{ci}{self.compute_slices}g.{self.memory_gb}gb{self.attributes}"


def parse_profile_name(name: str) -> ProfileName:
    """Parse `1g.10gb`, `1g.10gb+me`, `1c.3g.40gb`; raises ValueError on anything else."""
    m = _PROFILE_RE.match(name)
    if not m:
        raise ValueError(f"{name!r} is not a MIG profile name of the form [<C>c.]<G>g.<GB>gb[+attr|-attr]")
    ci = m.group("ci")
    return ProfileName(int(m.group("g")), int(m.group("gb")), m.group("attrs"), int(ci) if ci else None)


def _round_half_away(x: Fraction) -> int:
    return math.floor(x + Fraction(1, 2)) if x >= 0 else -math.floor(-x + Fraction(1, 2))


def memory_gb(profile_mib: int, total_mib: int) -> int:
    """The `<GB>` part of a profile name, from the profile's and the whole GPU's memory (MiB)."""
    if profile_mib <= 0 or total_mib <= 0:
        raise ValueError("memory sizes must be positive")
    frac = Fraction(math.ceil(Fraction(profile_mib * 8, total_mib)), 8)
    total_gib = math.ceil(Fraction(total_mib, 1024))
    return _round_half_away(frac * total_gib)


def profile_name(compute_slices: int, profile_mib: int, total_mib: int, attributes: str = "") -> str:
    """The name go-nvlib gives a GPU-instance profile."""
    return str(ProfileName(compute_slices, memory_gb(profile_mib, total_mib), attributes))


def resource_name(profile: str) -> str:
    """Extended-resource name the device plugin advertises under `mig.strategy=mixed`."""
    return RESOURCE_PREFIX + profile.replace("+", ".")


_MIG_RESOURCE = re.compile(r"^((?:\d+c\.)?\d+g\.\d+gb)(?:\.([a-z.]+)|(-[a-z.]+))?$")


@lru_cache(maxsize=1024)
def profile_from_resource(resource: str) -> str | None:
    """Inverse of `resource_name` (`nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`); None if not a MIG resource.
    Cached: every pod and node label of a snapshot asks it."""
    if not resource.startswith(RESOURCE_PREFIX):
        return None
    rest = resource[len(RESOURCE_PREFIX) :]
    m = _MIG_RESOURCE.match(rest)
    if not m:
        return None
    base, plus, minus = m.group(1), m.group(2), m.group(3)
    return f"{base}+{plus}" if plus else base + (minus or "")


def gfd_product(nvml_name: str) -> str:
    """The `nvidia.com/gpu.product` label value GFD derives from an NVML device name."""
    kept = "".join(c for c in nvml_name if c.isascii() and (c.isalnum() or c in "-_. "))
    return kept.strip().replace(" ", "-")


def normalize_config_key(profile: str) -> str:
    """mig-manager's normalisation of a profile inside generated config names (`+` -> `.`)."""
    return profile.replace("+", ".")
