"""ResourceSlices of `gpu.nvidia.com` -> one `NodePool` per node, with the problems of the slices that cost them.

Per pool only the newest generation counts, and the pool is complete when it holds `resourceSliceCount` slices of
it (the allocator takes nothing from an incomplete pool). Devices keep the allocator's walk order: device slices by
name, devices as listed; a slice with `sharedCounters` contributes counters only (pools_*.go). The mode is what
the slices show: counters mean DynamicMIG, devices without counters static, no devices unknown.

A malformed slice (a field of the wrong shape) is dropped with a problem naming the field; its pool is then
incomplete. A slice that reads but contradicts the catalog (a profile the GPU's model lacks, a name that is not the
profile's, memory slices outside the profile's placements, a counter set whose memory slices are not the model's
placement units) keeps its devices for first fit, which reads counters, not the catalog, but that GPU's `model` is
None: migctl does not plan on a GPU whose slice it cannot square with the catalog.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from migctl.adapters.dra import read
from migctl.adapters.dra.read import FieldError
from migctl.core.dra import naming
from migctl.core.dra.devices import (
    CounterSet,
    CounterUse,
    Device,
    DraGpu,
    Mode,
    NodePool,
    ObjectProblem,
    mib_of,
)
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import Catalog, GpuModel
from migctl.core.model.cluster import Taint

KIND = "ResourceSlice"


@dataclass(frozen=True)
class SliceReading:
    pools: tuple[NodePool, ...]
    problems: tuple[ObjectProblem, ...] = ()

    def pool(self, node: str) -> NodePool | None:
        return next((p for p in self.pools if p.node == node), None)


@dataclass
class _Slice:
    name: str
    pool: str
    node: str
    generation: int
    count: int
    devices: list[tuple[int, Device]] = field(default_factory=list)  # (index in spec.devices, device)
    counter_sets: list[tuple[int, CounterSet]] = field(default_factory=list)


def read_slices(objects: Iterable[Mapping[str, Any]], catalog: Catalog, driver: str = naming.DRIVER) -> SliceReading:
    """Every pool of `driver` the slices describe (other drivers' slices are skipped)."""
    problems: list[ObjectProblem] = []
    by_pool: dict[str, list[_Slice]] = {}
    for i, obj in enumerate(objects):
        if obj.get("kind") not in (None, KIND):
            continue
        name = read.object_name(obj, f"#{i}")
        try:
            got = _slice(obj, name, driver)
        except FieldError as e:
            problems.append(ObjectProblem(KIND, name, e.path, e.message))
            continue
        if got is not None:
            by_pool.setdefault(got.pool, []).append(got)
    pools = []
    for pool_name in sorted(by_pool):
        pool, found = _pool(pool_name, by_pool[pool_name], driver, catalog)
        pools.append(pool)
        problems += found
    return SliceReading(tuple(pools), tuple(problems))


def _slice(obj: Mapping[str, Any], name: str, driver: str) -> _Slice | None:
    spec = read.mapping(obj.get("spec"), "spec")
    if read.text(spec.get("driver"), "spec.driver", required=True) != driver:
        return None
    pool = read.mapping(spec.get("pool"), "spec.pool")
    node = read.text(spec.get("nodeName"), "spec.nodeName")
    if not node:
        raise FieldError("spec.nodeName", f"expected the node's name ({driver} publishes one pool per node)")
    out = _Slice(
        name,
        read.text(pool.get("name"), "spec.pool.name", required=True),
        node,
        read.whole(pool.get("generation"), "spec.pool.generation", default=0),
        read.whole(pool.get("resourceSliceCount"), "spec.pool.resourceSliceCount", minimum=1),
    )
    for j, cs in enumerate(read.maps(spec.get("sharedCounters"), "spec.sharedCounters")):
        path = f"spec.sharedCounters[{j}]"
        counters = {
            str(k): read.measured(v, f"{path}.counters.{k}")
            for k, v in read.mapping(cs.get("counters"), f"{path}.counters").items()
        }
        out.counter_sets.append((j, CounterSet(read.text(cs.get("name"), f"{path}.name", required=True), counters)))
    for j, dev in enumerate(read.maps(spec.get("devices"), "spec.devices")):
        out.devices.append((j, _device(dev, f"spec.devices[{j}]", out, driver)))
    return out


def _device(dev: Mapping[str, Any], path: str, s: _Slice, driver: str) -> Device:
    name = read.text(dev.get("name"), f"{path}.name", required=True)
    attrs = {
        read.qualified(str(k), driver): read.attribute(v, f"{path}.attributes.{k}")
        for k, v in read.mapping(dev.get("attributes"), f"{path}.attributes").items()
    }
    capacity = {
        read.qualified(str(k), driver): read.measured(v, f"{path}.capacity.{k}")
        for k, v in read.mapping(dev.get("capacity"), f"{path}.capacity").items()
    }
    uses = []
    for k, use in enumerate(read.maps(dev.get("consumesCounters"), f"{path}.consumesCounters")):
        upath = f"{path}.consumesCounters[{k}]"
        set_name = read.text(use.get("counterSet"), f"{upath}.counterSet", required=True)
        for cname, v in read.mapping(use.get("counters"), f"{upath}.counters").items():
            uses.append(CounterUse(set_name, str(cname), read.measured(v, f"{upath}.counters.{cname}")))
    taints = tuple(
        Taint(
            read.text(t.get("key"), f"{path}.taints[{k}].key", required=True),
            read.text(t.get("value"), f"{path}.taints[{k}].value"),
            read.text(t.get("effect"), f"{path}.taints[{k}].effect", required=True),
        )
        for k, t in enumerate(read.maps(dev.get("taints"), f"{path}.taints"))
    )
    kind_attr = attrs.get(f"{driver}/type")
    kind: Literal["gpu", "mig", "other"] = "gpu" if kind_attr == "gpu" else "mig" if kind_attr == "mig" else "other"
    try:
        parsed: naming.ParsedName | None = naming.parse_device_name(name)
    except ValueError:
        parsed = None
    profile = attrs.get(f"{driver}/profile")
    memory = capacity.get(f"{driver}/memory")
    slices = sorted(
        i
        for i in (
            [naming.memory_slice_index(u.counter) for u in uses]
            + [naming.memory_slice_index(c.partition("/")[2]) for c in capacity]
        )
        if i is not None
    )
    if slices and slices != list(range(slices[0], slices[-1] + 1)):
        raise FieldError(f"{path}.consumesCounters", f"memory slices {slices} are not one contiguous range")
    uuid_attr = attrs.get(f"{driver}/uuid")
    parent = attrs.get(f"{driver}/parentUUID")
    return Device(
        name=name,
        pool=s.pool,
        slice=s.name,
        kind=kind,
        minor=parsed.minor if parsed and parsed.kind != "vfio" else None,
        driver=driver,
        gpu_uuid=str(parent if kind == "mig" and parent else uuid_attr if kind == "gpu" and uuid_attr else ""),
        mig_uuid=str(uuid_attr) if kind == "mig" and uuid_attr else "",
        profile=str(profile) if isinstance(profile, str) else "",
        profile_id=parsed.profile_id if parsed else None,
        memory_mib=mib_of(memory) if memory is not None else None,
        placement=Placement(str(profile or ""), slices[0], len(slices)) if slices else None,
        consumes=tuple(uses),
        taints=taints,
        attributes=attrs,
        capacity=capacity,
    )


def _pool(name: str, slices: list[_Slice], driver: str, catalog: Catalog) -> tuple[NodePool, list[ObjectProblem]]:
    problems: list[ObjectProblem] = []
    generation = max(s.generation for s in slices)
    current = sorted((s for s in slices if s.generation == generation), key=lambda s: s.name)
    complete = all(s.count == len(current) for s in current)
    devices = [d for s in current if not s.counter_sets for _, d in s.devices]
    counter_sets: dict[str, CounterSet] = {}
    for s in current:
        for j, cs in s.counter_sets:
            if cs.name in counter_sets:
                problems.append(
                    ObjectProblem(
                        KIND,
                        s.name,
                        f"spec.sharedCounters[{j}].name",
                        f"counter set {cs.name} is defined twice in pool {name}",
                    )
                )
                complete = False
            counter_sets[cs.name] = cs
    seen: set[str] = set()
    for d in devices:
        if d.name in seen:
            problems.append(
                ObjectProblem(KIND, d.slice, "spec.devices", f"device {d.name} is listed twice in pool {name}")
            )
            complete = False
        seen.add(d.name)
    consumes = any(d.consumes for d in devices)
    mode = Mode.DYNAMIC if counter_sets or consumes else Mode.STATIC if devices else Mode.UNKNOWN
    where = {(d.slice, d.name): j for s in current for j, d in s.devices}
    gpus = _gpus(devices, counter_sets, catalog, driver, mode, where, problems, current)
    node = current[0].node
    pool = NodePool(
        name=name,
        node=node,
        driver=driver,
        generation=generation,
        mode=mode,
        gpus=gpus,
        devices=tuple(devices),
        counter_sets=counter_sets,
        slices=tuple(s.name for s in current),
        complete=complete,
    )
    return pool, problems


def _gpus(
    devices: list[Device],
    counter_sets: Mapping[str, CounterSet],
    catalog: Catalog,
    driver: str,
    mode: Mode,
    where: Mapping[tuple[str, str], int],
    problems: list[ObjectProblem],
    current: list[_Slice],
) -> tuple[DraGpu, ...]:
    minors = sorted({d.minor for d in devices if d.minor is not None and d.kind in ("gpu", "mig")})
    out = []
    for minor in minors:
        mine = tuple(d for d in devices if d.minor == minor and d.kind in ("gpu", "mig"))
        whole = next((d for d in mine if d.kind == "gpu"), None)
        product = next((str(v) for d in mine if isinstance(v := d.attributes.get(f"{driver}/productName"), str)), "")
        uuid = whole.gpu_uuid if whole else next((d.gpu_uuid for d in mine if d.gpu_uuid), "")
        memory = whole.memory_mib if whole and mode is Mode.STATIC else None
        cs = counter_sets.get(naming.counter_set_name(minor))
        model = catalog.match_product(product, memory) if product else None
        if model is not None:  # profile names and memory as this node's driver reports them (A100 3g.39gb ...)
            live = {d.profile: d.memory_mib for d in mine if d.kind == "mig" and d.profile and d.memory_mib}
            model = model.with_live_memory(live, memory)
        gpu = DraGpu(minor, uuid, product, memory, mine, cs, model)
        if model is not None:
            why = _contradiction(gpu, model, mode)
            if why is not None:
                dev, message = why
                slice_name = dev.slice if dev else next((s.name for s in current if s.counter_sets), "")
                path = f"spec.devices[{where[(dev.slice, dev.name)]}]" if dev else "spec.sharedCounters"
                problems.append(ObjectProblem(KIND, slice_name, path, f"GPU {minor} ({model.id}): {message}"))
                gpu = replace(gpu, model=None)
        out.append(gpu)
    return tuple(out)


def _contradiction(gpu: DraGpu, model: GpuModel, mode: Mode) -> tuple[Device | None, str] | None:
    """The first thing in the GPU's devices (or counter set) that the catalog's placement rules deny."""
    units = model.placement_units
    if mode is Mode.DYNAMIC and gpu.counter_set is not None and gpu.counter_set.memory_slices != units:
        held = gpu.counter_set.memory_slices
        return (
            None,
            f"counter set {gpu.counter_set.name} has {held} memory slices; the model has {units} placement units",
        )
    for d in gpu.devices:
        if d.kind == "gpu":
            if mode is Mode.DYNAMIC and d.placement and (d.placement.start, d.placement.size) != (0, units):
                return d, f"the whole GPU draws memory slices {sorted(d.slices)}, not all {units}"
            continue
        why = _mig_contradiction(d, model)
        if why:
            return d, why
    return None


def _mig_contradiction(d: Device, model: GpuModel) -> str | None:
    name = model.aliases.get(d.profile, d.profile)
    if not model.has_profile(name):
        return f"device {d.name}: profile {d.profile!r} is not a profile of the model"
    p = model.profile(name)
    parsed = naming.parse_device_name(d.name)
    if parsed.legacy:
        by_id = naming.profile_by_id(model, parsed.profile_id or 0) if parsed.profile_id is not None else None
        if by_id is None or by_id.name != p.name:
            return f"device {d.name}: GI profile id {parsed.profile_id} is not {p.name}'s ({p.profile_id})"
        named = (parsed.start, parsed.size)
    else:
        named_profile = naming.profile_for(model, parsed.token, parsed.profile_id)
        if named_profile is None or named_profile.name != p.name:
            return (
                f"device {d.name}: the name is not {p.name}'s (token {naming.profile_token(p.name)}, id {p.profile_id})"
            )
        named = (parsed.start, p.memory_slices)
    placed = (d.placement.start, d.placement.size) if d.placement else named
    if placed != named:
        return f"device {d.name}: it holds memory slices {sorted(d.slices)}, but its name says start {named[0]}"
    if placed not in p.placements:
        return f"device {d.name}: {p.name} is never placed at {placed} on this model (placements {list(p.placements)})"
    return None
