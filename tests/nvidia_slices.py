"""ResourceSlice, DeviceClass and DeviceTaintRule dicts shaped exactly like NVIDIA's DRA driver writes them.

Pure builders (no client, no I/O) for unit tests and for the cluster tier's fake `gpu.nvidia.com` driver, which
posts what `node_slices` returns. The shapes follow kubernetes-sigs/dra-driver-nvidia-gpu @95932046 (2026-08-07),
cmd/gpu-kubelet-plugin/{driver.go,partitions.go,mig.go,deviceinfo.go} and the Helm chart's DeviceClasses; the facts
and the two modes are written down in docs/dra.md. Profiles, placements, GI profile ids and memory come from
migctl's catalog, so a test cannot drift from what the planner believes.

Stable API (another helper's fake driver imports it; change only by adding keyword arguments):

- `node_slices(node, model, gpus=1, *, mode="dynamic", static_layouts=None, mig_mode_on=False, generation=1)`
  -> list of ResourceSlice dicts. `dynamic`: one counter slice first, then one device slice per GPU (the k8s 1.35+
  "split" form), devices sorted by name. `static`: one slice holding every device; `static_layouts[i]` is GPU i's
  MIG instances as `Placement`s (None or missing: MIG off, the whole GPU is the device).
- `device_classes(model=None)`: NVIDIA's `gpu.nvidia.com` and `mig.nvidia.com` classes, plus one class per plain
  profile of `model` with `extendedResourceName: nvidia.com/mig-<profile>` (the driver's demo form).
- `profile_class(profile)`: that one per-profile class.
- `taint_rule(name, node, device, key=..., effect="NoSchedule")`: a DeviceTaintRule fencing one device.
- `slice_generate_name(index, node)`: the `generateName` the driver's slice controller uses; each slice dict also
  carries a deterministic `metadata.name` (`generateName` + `x0000`) so unit tests can name it. A fake driver that
  lets the API server pick names should replace `name` by `generateName`.

What differs from a real node, on purpose: UUIDs are uuid5 of the node and index, PCI bus ids count up with the
minor (so slice order = minor order, as on real nodes where minors follow bus ids), versions are illustrative, and
the engine capacities (multiprocessors, copyEngines, decoders, encoders, jpegEngines, ofaEngines) and their
counters are left out: the catalog does not hold them. Memory and memory slices, which decide placement, are exact.
In static mode the real driver lists devices in Go map order (random per publish); here they are sorted.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any, Literal

from migctl.core.dra import naming
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import GpuModel, Profile
from migctl.core.hardware.naming import resource_name
from migctl.wire.names import PLACEMENT_TAINT as FENCE_KEY

DRIVER = naming.DRIVER
API = "resource.k8s.io/v1"
_MIB = 2**20
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))

Json = dict[str, Any]


def quantity(value: int) -> str:
    """A byte count as apimachinery prints a BinarySI quantity: the largest binary suffix that divides it."""
    for suffix, unit in _BINARY:
        if value and value % unit == 0:
            return f"{value // unit}{suffix}"
    return str(value)


def slice_generate_name(index: int, node: str) -> str:
    """`00000-gpu.nvidia.com-<node>-`: index first (five hex digits), so name order is the driver's order."""
    return f"{index:05x}-{DRIVER}-{node}-"


def gpu_uuid(node: str, minor: int) -> str:
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"migctl-test/{node}/gpu/{minor}"))


def mig_uuid(node: str, minor: int, profile: str, start: int) -> str:
    return "MIG-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"migctl-test/{node}/gpu/{minor}/{profile}@{start}"))


def pci_bus_id(minor: int) -> str:
    return f"0000:{0x10 + minor:02x}:00.0"


def _gpu_attrs(node: str, model: GpuModel, minor: int) -> Json:
    product = model.nvml_names[0] if model.nvml_names else model.display_name
    return {
        "brand": {"string": "Nvidia"},
        "cudaDriverVersion": {"version": "13.0.0"},
        "driverVersion": {"version": "580.126.20"},
        "productName": {"string": product},
        "resource.kubernetes.io/pciBusID": {"string": pci_bus_id(minor)},
    }


def _whole(node: str, model: GpuModel, minor: int, memory_mib: int) -> Json:
    attrs = _gpu_attrs(node, model, minor) | {
        "type": {"string": "gpu"},
        "uuid": {"string": gpu_uuid(node, minor)},
    }
    return {"name": naming.gpu_device_name(minor), "attributes": attrs, "capacity": _memory(memory_mib)}


def _mig_attrs(node: str, model: GpuModel, minor: int, profile: Profile) -> Json:
    return _gpu_attrs(node, model, minor) | {
        "type": {"string": "mig"},
        "parentUUID": {"string": gpu_uuid(node, minor)},
        "profile": {"string": profile.name},
    }


def _memory(mib: int) -> Json:
    return {"memory": {"value": quantity(mib * _MIB)}}


def _slices_counters(start: int, size: int) -> Json:
    return {naming.memory_slice_counter(i): {"value": "1"} for i in range(start, start + size)}


def _named_profiles(model: GpuModel) -> list[Profile]:
    """Profiles NVIDIA can name: those with a GI profile id (the catalog lacks a few, e.g. A30 2g.12gb+me)."""
    return [p for p in model.profiles if p.profile_id is not None]


def _dynamic_devices(node: str, model: GpuModel, minor: int, mig_mode_on: bool) -> list[Json]:
    full = model.full_profile
    counter_set = naming.counter_set_name(minor)
    devices: list[Json] = []
    if not mig_mode_on:  # an Ampere GPU with MIG mode on is not offered whole (nvlib.go)
        whole = _whole(node, model, minor, full.memory_mib)
        whole["consumesCounters"] = [
            {
                "counterSet": counter_set,
                "counters": _memory(full.memory_mib) | _slices_counters(0, model.placement_units),
            }
        ]
        devices.append(whole)
    for p in _named_profiles(model):
        assert p.profile_id is not None
        for start, size in p.placements:
            devices.append(
                {
                    "name": naming.mig_device_name(minor, p.name, p.profile_id, start),
                    "attributes": _mig_attrs(node, model, minor, p),
                    "capacity": _memory(p.memory_mib),
                    "consumesCounters": [
                        {"counterSet": counter_set, "counters": _memory(p.memory_mib) | _slices_counters(start, size)}
                    ],
                }
            )
    return sorted(devices, key=lambda d: str(d["name"]))


def _static_devices(node: str, model: GpuModel, minor: int, layout: Sequence[Placement] | None) -> list[Json]:
    if layout is None:
        return [_whole(node, model, minor, model.memory_mib)]
    out = []
    for inst in layout:
        p = model.profile(inst.profile)
        if p.profile_id is None:
            raise ValueError(f"{model.id} {p.name}: the catalog has no GI profile id, so NVIDIA's name is unknown")
        if (inst.start, inst.size) not in p.placements:
            raise ValueError(f"{model.id} {p.name} has no placement ({inst.start}, {inst.size})")
        attrs = _mig_attrs(node, model, minor, p) | {"uuid": {"string": mig_uuid(node, minor, p.name, inst.start)}}
        capacity = _memory(p.memory_mib) | {
            naming.memory_slice_capacity(i): {"value": "1"} for i in range(inst.start, inst.start + inst.size)
        }
        out.append(
            {
                "name": naming.mig_device_name(minor, p.name, p.profile_id, inst.start),
                "attributes": attrs,
                "capacity": capacity,
            }
        )
    return sorted(out, key=lambda d: str(d["name"]))


def _slice(node: str, index: int, count: int, generation: int, spec: Json) -> Json:
    generate = slice_generate_name(index, node)
    return {
        "apiVersion": API,
        "kind": "ResourceSlice",
        "metadata": {"name": generate + "x0000", "generateName": generate},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": count},
            **spec,
        },
    }


def node_slices(
    node: str,
    model: GpuModel,
    gpus: int = 1,
    *,
    mode: Literal["static", "dynamic"] = "dynamic",
    static_layouts: Sequence[Sequence[Placement] | None] | None = None,
    mig_mode_on: bool = False,
    generation: int = 1,
) -> list[Json]:
    """The ResourceSlices NVIDIA's kubelet plugin publishes for `node` with `gpus` GPUs of `model`."""
    if mode == "dynamic":
        counter_sets = [
            {
                "name": naming.counter_set_name(minor),
                "counters": _memory(model.full_profile.memory_mib) | _slices_counters(0, model.placement_units),
            }
            for minor in range(gpus)
        ]
        out = [_slice(node, 0, gpus + 1, generation, {"sharedCounters": counter_sets})]
        for minor in range(gpus):
            devices = _dynamic_devices(node, model, minor, mig_mode_on)
            out.append(_slice(node, minor + 1, gpus + 1, generation, {"devices": devices}))
        return out
    layouts = list(static_layouts or [])
    devices = []
    for minor in range(gpus):
        devices += _static_devices(node, model, minor, layouts[minor] if minor < len(layouts) else None)
    return [_slice(node, 0, 1, generation, {"devices": devices})]


def _class(name: str, expression: str, extended: str | None = None) -> Json:
    spec: Json = {"selectors": [{"cel": {"expression": expression}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": API, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


GPU_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
MIG_CLASS_CEL = "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'"


def profile_class_name(profile: str) -> str:
    """`mig-1g-12gb.gpu.nvidia.com` for `1g.12gb` (demo/specs/extended-resources/mig-1g-12gb.yaml)."""
    return "mig-" + re.sub(r"[^a-z0-9-]", "-", profile.lower().replace(".", "-")).strip("-") + "." + DRIVER


def profile_class(profile: str) -> Json:
    return _class(
        profile_class_name(profile),
        f"{MIG_CLASS_CEL} && device.attributes['gpu.nvidia.com'].profile == '{profile}'",
        resource_name(profile),
    )


def device_classes(model: GpuModel | None = None) -> list[Json]:
    """The chart's classes (`gpu.nvidia.com` maps `nvidia.com/gpu`), plus per-profile classes of `model`."""
    out = [_class("gpu.nvidia.com", GPU_CLASS_CEL, "nvidia.com/gpu"), _class("mig.nvidia.com", MIG_CLASS_CEL)]
    if model is not None:
        out += [profile_class(p.name) for p in model.base_profiles]
    return out


def taint_rule(name: str, node: str, device: str, key: str = FENCE_KEY, effect: str = "NoSchedule") -> Json:
    """A DeviceTaintRule that taints one device (selected by driver, pool and device name, KEP-5055)."""
    return {
        "apiVersion": API,
        "kind": "DeviceTaintRule",
        "metadata": {"name": name},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": node, "device": device},
            "taint": {"key": key, "value": "reserved", "effect": effect},
        },
    }
