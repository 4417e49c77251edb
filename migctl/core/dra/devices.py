"""Plain frozen records of what a DRA cluster holds for `gpu.nvidia.com`: devices, GPUs, a node's pool, an
allocation, and the problem a bad object costs.

Attributes and capacities are kept as the CEL environment sees them (k8s.io/dynamic-resource-allocation/cel,
compile.go): keyed by fully qualified name (`gpu.nvidia.com/profile`; a bare key in a slice takes the driver as its
domain), values typed as CEL types them: strings, ints, bools, `Version`s and exact `Decimal` quantities. So the
selector evaluator (`cel.py`) and the first-fit predictor (`firstfit.py`) read the same record the adapter built,
and a test can build one by hand. Mapping fields take no part in hashing (records stay hashable) but do in equality.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Literal

from migctl.core.dra.naming import DRIVER
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import GpuModel
from migctl.core.model.cluster import Taint

MIB = 2**20


@dataclass(frozen=True, slots=True)
class Version:
    """A `version` attribute (semver text, e.g. `580.126.20`): a type of its own, never equal to a string."""

    text: str


AttrValue = str | int | bool | Version


class Mode(StrEnum):
    """How a node's pool offers MIG: partitions made on demand (counters), made beforehand, or neither seen."""

    STATIC = "static"
    DYNAMIC = "dynamic"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True, order=True)
class DeviceId:
    """A device as an allocation result names it: driver, pool, device."""

    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class CounterUse:
    """One counter a device draws from a shared counter set when allocated (KEP-4815 consumesCounters)."""

    counter_set: str
    counter: str
    amount: Decimal


@dataclass(frozen=True)
class Device:
    """One device of a ResourceSlice, with what migctl reads of it.

    kind `gpu` is a whole GPU, `mig` a MIG device (made, for a static pool, or makeable, for a dynamic one), `other`
    anything else the driver lists (VFIO). `minor` is the GPU's minor from the name; `gpu_uuid` the GPU's UUID (the
    `parentUUID` of a MIG device); `mig_uuid` only for a made MIG device. `placement` is the memory-slice range when
    the slice shows it (counters or `memorySlice<i>` capacities), with the profile as named by `profile`.
    """

    name: str
    pool: str
    slice: str
    kind: Literal["gpu", "mig", "other"]
    minor: int | None = None
    driver: str = DRIVER
    gpu_uuid: str = ""
    mig_uuid: str = ""
    profile: str = ""
    profile_id: int | None = None
    memory_mib: int | None = None
    placement: Placement | None = None
    consumes: tuple[CounterUse, ...] = ()
    taints: tuple[Taint, ...] = ()
    attributes: Mapping[str, AttrValue] = field(default_factory=dict, hash=False)
    capacity: Mapping[str, Decimal] = field(default_factory=dict, hash=False)

    @property
    def id(self) -> DeviceId:
        return DeviceId(self.driver, self.pool, self.name)

    @property
    def slices(self) -> frozenset[int]:
        """The memory slices it holds (empty when unknown)."""
        p = self.placement
        return frozenset(range(p.start, p.start + p.size)) if p else frozenset()


@dataclass(frozen=True)
class CounterSet:
    """A named set of counters with their totals (one per DynamicMIG GPU: `gpu-<minor>-counter-set`)."""

    name: str
    counters: Mapping[str, Decimal] = field(default_factory=dict, hash=False)

    @property
    def memory_slices(self) -> int:
        """How many `memory-slice-<i>` counters it holds: the GPU's placement units."""
        return sum(1 for c in self.counters if c.startswith("memory-slice-"))


@dataclass(frozen=True)
class DraGpu:
    """One physical GPU of a node's pool: its identity, its catalog model when it matches, its devices (in walk
    order) and, on a dynamic pool, its counter set. `model` is None when the catalog does not know the product or
    the slice contradicts the catalog (the adapter then reports why)."""

    minor: int
    uuid: str = ""
    product: str = ""
    memory_mib: int | None = None
    devices: tuple[Device, ...] = ()
    counter_set: CounterSet | None = None
    model: GpuModel | None = field(default=None, hash=False, compare=False)

    @property
    def whole(self) -> Device | None:
        return next((d for d in self.devices if d.kind == "gpu"), None)

    @property
    def migs(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.kind == "mig")


@dataclass(frozen=True)
class NodePool:
    """A driver's pool on one node (NVIDIA: pool name = node name), at its newest generation.

    `devices` lists every device in the order the allocator walks them: the pool's device slices sorted by name,
    each slice's devices as listed (structured/internal/*/pools_*.go). `complete` is False while slices of the
    generation are missing: the allocator then takes nothing from the pool.
    """

    name: str
    node: str
    driver: str = DRIVER
    generation: int = 0
    mode: Mode = Mode.UNKNOWN
    gpus: tuple[DraGpu, ...] = ()
    devices: tuple[Device, ...] = ()
    counter_sets: Mapping[str, CounterSet] = field(default_factory=dict, hash=False)
    slices: tuple[str, ...] = ()
    complete: bool = True

    @cached_property
    def by_name(self) -> dict[str, Device]:
        return {d.name: d for d in self.devices}

    def gpu(self, minor: int) -> DraGpu | None:
        return next((g for g in self.gpus if g.minor == minor), None)


@dataclass(frozen=True, slots=True)
class Allocation:
    """One device of an allocated claim (`status.allocation.devices.results[]`): in use whether or not a process
    runs on it. `claim` is `namespace/name`; `request` as the result names it (`req` or `req/sub`)."""

    claim: str
    request: str
    device: DeviceId


@dataclass(frozen=True, slots=True)
class ObjectProblem:
    """Something wrong with one object: its kind and name, the field path and what was expected. It costs only
    that object (the reader goes on with the rest)."""

    kind: str
    name: str
    path: str
    message: str

    def __str__(self) -> str:
        where = f"{self.path}: " if self.path else ""
        return f"{self.kind} {self.name}: {where}{self.message}"

    def as_tuple(self) -> tuple[str, str, str]:
        """The snapshot's `(kind, name, what is wrong)` form (`Snapshot.problems`)."""
        return (self.kind, self.name, f"{self.path}: {self.message}" if self.path else self.message)


def mib_of(value: Decimal) -> int:
    """Bytes -> whole MiB (rounded down: a capacity never promises more than it has)."""
    return int(value // MIB)
