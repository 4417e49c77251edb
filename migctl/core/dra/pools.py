"""A DynamicMIG node's pool as NVIDIA's kubelet plugin publishes it, built from a catalog model (no slices to read),
and the per-profile DeviceClasses through which `nvidia.com/mig-<profile>` pod specs reach it.

Why: the simulator runs first fit and migctl's fences (`fences.plan_fences`) on nodes that exist only as a model,
so it needs the `NodePool` the adapter would read from such a node's ResourceSlices, in the allocator's walk order.
The shape is the driver's (docs/dra.md, "DynamicMIG"): one counter set per GPU (`memory` = the full profile's,
`memory-slice-<i>` = 1 per placement unit) in a slice of its own, then one slice per GPU in minor order (PCI bus
order on a real node), each listing the whole GPU (unless MIG mode is on already) and every named profile at every
placement, sorted by name: that sort is first fit's order. Engine counters are left out (the catalog does not hold
them; only `+me` profiles would feel them). tests/unit/sim/test_sim_dra_pools.py holds it to the adapter's reading
of tests/nvidia_slices.py.
"""

from __future__ import annotations

import re
from decimal import Decimal

from migctl.core.dra import naming
from migctl.core.dra.claims import DeviceClassSpec
from migctl.core.dra.devices import MIB, CounterSet, CounterUse, Device, DraGpu, Mode, NodePool
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import GpuModel
from migctl.core.hardware.naming import resource_name

DOMAIN = naming.DRIVER
MIG_CLASS_CEL = f"device.driver == '{DOMAIN}' && device.attributes['{DOMAIN}'].type == 'mig'"


def slice_name(index: int, node: str) -> str:
    """The slice controller's name for slice `index` of `node` (index first, five hex digits: name order is the
    driver's order); the random suffix is fixed here."""
    return f"{index:05x}-{DOMAIN}-{node}-x0000"


def _uses(counter_set: str, memory_mib: int, start: int, size: int) -> tuple[CounterUse, ...]:
    memory = CounterUse(counter_set, "memory", Decimal(memory_mib * MIB))
    slices = (CounterUse(counter_set, naming.memory_slice_counter(i), Decimal(1)) for i in range(start, start + size))
    return (memory, *slices)


def _gpu(node: str, model: GpuModel, minor: int, mig_mode_on: bool) -> DraGpu:
    full, units = model.full_profile, model.placement_units
    cs_name = naming.counter_set_name(minor)
    where = slice_name(minor + 1, node)
    product = model.nvml_names[0] if model.nvml_names else model.display_name
    base = {f"{DOMAIN}/productName": product}
    devices = []
    if not mig_mode_on:  # an Ampere GPU whose MIG mode is on already is not offered whole
        devices.append(
            Device(
                name=naming.gpu_device_name(minor),
                pool=node,
                slice=where,
                kind="gpu",
                minor=minor,
                memory_mib=full.memory_mib,
                placement=Placement("", 0, units),
                consumes=_uses(cs_name, full.memory_mib, 0, units),
                attributes={**base, f"{DOMAIN}/type": "gpu"},
                capacity={f"{DOMAIN}/memory": Decimal(full.memory_mib * MIB)},
            )
        )
    for p in model.profiles:
        if p.profile_id is None:  # NVIDIA names a device by its GI profile id: one the catalog lacks is not offered
            continue
        for start, size in p.placements:
            devices.append(
                Device(
                    name=naming.mig_device_name(minor, p.name, p.profile_id, start),
                    pool=node,
                    slice=where,
                    kind="mig",
                    minor=minor,
                    profile=p.name,
                    profile_id=p.profile_id,
                    memory_mib=p.memory_mib,
                    placement=Placement(p.name, start, size),
                    consumes=_uses(cs_name, p.memory_mib, start, size),
                    attributes={**base, f"{DOMAIN}/type": "mig", f"{DOMAIN}/profile": p.name},
                    capacity={f"{DOMAIN}/memory": Decimal(p.memory_mib * MIB)},
                )
            )
    counters = {"memory": Decimal(full.memory_mib * MIB)} | {
        naming.memory_slice_counter(i): Decimal(1) for i in range(units)
    }
    ordered = tuple(sorted(devices, key=lambda d: d.name))
    return DraGpu(minor, product=product, devices=ordered, counter_set=CounterSet(cs_name, counters), model=model)


def dynamic_pool(node: str, model: GpuModel, gpus: int, *, mig_mode_on: bool = False, generation: int = 1) -> NodePool:
    """The pool of a DynamicMIG node `node` with `gpus` GPUs of `model`, devices in first fit's walk order."""
    if gpus < 1:
        raise ValueError(f"node {node}: a DynamicMIG pool needs at least one GPU, got {gpus}")
    members = tuple(_gpu(node, model, minor, mig_mode_on) for minor in range(gpus))
    counter_sets = {g.counter_set.name: g.counter_set for g in members if g.counter_set is not None}
    return NodePool(
        name=node,
        node=node,
        generation=generation,
        mode=Mode.DYNAMIC,
        gpus=members,
        devices=tuple(d for g in members for d in g.devices),
        counter_sets=counter_sets,
        slices=tuple(slice_name(i, node) for i in range(gpus + 1)),
    )


def profile_class_name(profile: str) -> str:
    """`mig-1g-10gb.gpu.nvidia.com` for `1g.10gb` (the driver's demo/specs/extended-resources form)."""
    return "mig-" + re.sub(r"[^a-z0-9-]", "-", profile.lower().replace(".", "-")).strip("-") + "." + DOMAIN


def profile_class(profile: str) -> DeviceClassSpec:
    """The DeviceClass that maps `nvidia.com/mig-<profile>` onto MIG devices of that profile."""
    selector = f"{MIG_CLASS_CEL} && device.attributes['{DOMAIN}'].profile == '{profile}'"
    return DeviceClassSpec(profile_class_name(profile), (selector,), resource_name(profile))


def profile_classes(model: GpuModel) -> dict[str, DeviceClassSpec]:
    """One class per plain profile of `model`, by class name."""
    return {c.name: c for c in (profile_class(p.name) for p in model.base_profiles)}
