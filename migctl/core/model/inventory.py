"""The node agent's inventory: what NVML says about a node's GPUs, published as the annotation `migctl.io/gpus`.

The agent (`migctl agent`) writes it on its own Node; the planner, the fallback scheduler and `migctl plan` read
it. It is compact JSON of a versioned schema, so a reader can recognise a version it does not know instead of
misreading it. Hardware is the only source of per-GPU truth here: which GPU a MIG device lives on, its placement,
and whether a process runs on it. The device plugin and GFD only report node-wide counts.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from migctl.core.model.gpu_config import GpuConfig
from migctl.core.text.label_values import MAX_GPU_MEMORY_MIB, MAX_GPUS_PER_NODE
from migctl.errors import InputError, Problem, from_validation_error
from migctl.wire import names
from migctl.wire.versions import UnknownVersionError, check_version

INVENTORY_ANNOTATION = names.GPUS

NonNegative = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(gt=0)]
PciId = Annotated[str, Field(pattern=r"^0x[0-9A-F]{8}$")]
Memory = Annotated[int, Field(gt=0, le=MAX_GPU_MEMORY_MIB)]  # sane bounds: the annotation is input like any other


class ForeignInventoryError(InputError, UnknownVersionError):
    """An inventory of another version (a newer or older agent, mid-upgrade): not damage. An InputError, so a
    reader that only knows those still leaves the inventory out; an UnknownVersionError, so one that knows the
    difference can say which it is."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MigDevice(_Strict):
    """One GPU instance (with its compute instance, a MIG device) as NVML reports it."""

    profile: str = Field(description="go-nvlib name from NVML numbers, e.g. 3g.40gb or 1g.10gb+me")
    profile_id: NonNegative = Field(description="NVML profile id (nvmlGpuInstanceProfileInfo_t.id)")
    gi: NonNegative = Field(description="GPU instance id")
    start: NonNegative = Field(description="first placement unit (memory slice)")
    size: Positive = Field(description="placement units occupied")
    memory_mib: Memory
    uuid: str = Field(min_length=1, description="MIG device UUID (MIG-...), what NVIDIA_VISIBLE_DEVICES accepts")
    busy: bool | None = Field(description="a process runs on it; None when NVML cannot say")


class GpuInfo(_Strict):
    """One physical GPU."""

    index: Annotated[int, Field(ge=0, lt=MAX_GPUS_PER_NODE)]
    uuid: str = Field(min_length=1)
    name: str = Field(min_length=1, description="NVML device name, e.g. NVIDIA A100-SXM4-40GB")
    memory_mib: Memory = Field(description="total framebuffer memory, MiB")
    mig_capable: bool
    mig_enabled: bool = Field(description="current MIG mode")
    mig_pending: bool = Field(description="MIG mode after the next GPU reset")
    busy: bool | None = Field(description="a process runs on the GPU (any of its MIG devices); None when unknown")
    instances: tuple[MigDevice, ...] = Field((), max_length=7 * 8)
    pci_device_id: PciId | None = Field(
        None, description="NVML pciDeviceId as mig-parted's device-filter writes it (0xDDDDVVVV); None: not read"
    )
    pci_subsystem_id: PciId | None = Field(None, description="NVML pciSubSystemId (0xSSSSVVVV); None: not read")

    @model_validator(mode="after")
    def _consistent(self) -> GpuInfo:
        if self.instances and not self.mig_enabled:
            raise ValueError("instances are listed but MIG is disabled")
        taken: list[tuple[int, int]] = []
        for d in sorted(self.instances, key=lambda d: d.start):
            for s, z in taken:
                if d.start < s + z and s < d.start + d.size:
                    raise ValueError(f"instance {d.uuid} at [{d.start}, {d.size}] overlaps [{s}, {z}]")
            taken.append((d.start, d.size))
        return self

    @property
    def config(self) -> GpuConfig:
        """The layout this GPU has now, in mig-parted's terms."""
        if not self.mig_enabled:
            return GpuConfig.disabled()
        return GpuConfig.mig(Counter(d.profile for d in self.instances))

    def used(self) -> dict[str, int] | None:
        """Busy instances per profile; None when any instance's state is unknown."""
        if any(d.busy is None for d in self.instances):
            return None
        return dict(Counter(d.profile for d in self.instances if d.busy))

    def idle(self) -> dict[str, int] | None:
        """Idle instances per profile; None when any instance's state is unknown."""
        if any(d.busy is None for d in self.instances):
            return None
        return dict(Counter(d.profile for d in self.instances if not d.busy))


class Inventory(_Strict):
    """Everything the agent knows about one node's GPUs."""

    version: Literal["v1"] = "v1"  # `wire.versions.VERSION`; `parse_inventory` checks it before the schema
    driver: str = ""
    gpus: tuple[GpuInfo, ...] = Field((), max_length=MAX_GPUS_PER_NODE)
    profiles: dict[str, Memory] = Field(
        default_factory=dict, description="live memory (MiB) of each GPU-instance profile the GPUs offer"
    )

    @model_validator(mode="after")
    def _unique(self) -> Inventory:
        indices = [g.index for g in self.gpus]
        if len(set(indices)) != len(indices):
            raise ValueError(f"duplicate GPU index in {indices}")
        return self

    def to_annotation(self) -> str:
        """Compact, key-sorted JSON: the same hardware state always gives the same string."""
        return json.dumps(self.model_dump(mode="json"), separators=(",", ":"), sort_keys=True)

    def gpu(self, index: int) -> GpuInfo | None:
        return next((g for g in self.gpus if g.index == index), None)

    @property
    def total_mib(self) -> int | None:
        """Total memory of the node's MIG-capable GPUs (the largest, for mixed drivers), for naming."""
        values = [g.memory_mib for g in self.gpus if g.mig_capable]
        return max(values) if values else None


def parse_inventory(raw: str, node: str) -> Inventory:
    """Read the annotation; InputError names the node, the annotation and the field. Its version is checked by
    the one rule (`wire.versions.check_version`: unversioned reads as v1); another version raises
    `ForeignInventoryError`."""
    where = f"node {node}"
    field = f"metadata.annotations[{INVENTORY_ANNOTATION}]"
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as e:
        raise InputError(where, [Problem(field, f"not valid JSON ({e.msg} at {e.pos})")]) from e
    if not isinstance(data, dict):
        raise InputError(where, [Problem(field, f"expected a JSON object, got {type(data).__name__}")])
    try:
        check_version(data, f"{field}.version")
    except UnknownVersionError as e:
        raise ForeignInventoryError(where, str(e)) from e
    gpus = data.get("gpus")
    if isinstance(gpus, list) and len(gpus) > MAX_GPUS_PER_NODE:
        raise InputError(where, [Problem(f"{field}.gpus", f"{len(gpus)} GPUs; at most {MAX_GPUS_PER_NODE} per node")])
    try:
        return Inventory.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(where, e, prefix=field) from e
