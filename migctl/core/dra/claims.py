"""A ResourceClaim's spec as migctl's demand: `GpuDemand`s (profile, vram, gpu) and whether they must share a GPU.

A request's DeviceClass selectors are ANDed with its own (class first, as the allocator evaluates them), and the
conjunction's `cel.meaning` over the catalog's offers decides the demand:
- only whole GPUs admitted -> kind `gpu`;
- MIG devices of one profile name -> kind `profile`;
- MIG devices whose plain profiles are every plain profile from some memory up (on every model and product the
  catalog knows) -> kind `vram` with that memory, the least admitted: `memory.isGreaterThan(quantity('10Gi'))`
  becomes "at least 11008 MiB" because no catalog profile lies between;
- anything else (two profiles, a memory ceiling) is a problem: migctl's demand holds one profile or a floor.
`whole_gpu_ok` says the selectors also admit a whole GPU: on a DynamicMIG node first fit takes `gpu-<n>` before any
`gpu-<n>-mig-...` (names sort so), which the planner must know.

firstAvailable (up to 8 subrequests): the demand is the first subrequest that some catalog model can serve; a
subrequest no model can serve is skipped (the allocator skips it too, on every node), but a subrequest migctl cannot
read stops the claim: the allocator would try it first and migctl cannot say whether it fits. The planner creates
what the first servable subrequest asks; on a node that already offers a later one, kube-scheduler may take that.

`matchAttribute: gpu.nvidia.com/parentUUID` over two or more devices sets `same_gpu` (requests named, or all).
Every problem (unknown DeviceClass, unreadable selector, count out of range, allocationMode All, ...) is an
`ObjectProblem` with the claim's (or template's) kind, name and field path; it costs only that claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from migctl.core.dra import cel
from migctl.core.dra.devices import ObjectProblem
from migctl.core.dra.naming import DRIVER
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import GpuDemand, Toleration

MAX_COUNT = 32  # resourceapi.AllocationResultsMaxSize: devices per claim
MAX_SUBREQUESTS = 8  # firstAvailable
PARENT_UUID = f"{DRIVER}/parentUUID"


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """`exactly` of a request, or one firstAvailable subrequest. `path` is its field path in the object."""

    device_class: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    mode: Literal["ExactCount", "All"] = "ExactCount"
    tolerations: tuple[Toleration, ...] = ()
    admin_access: bool = False
    capacity: bool = False  # asks consumable capacity (KEP-5075): a share of a device, not a device
    path: str = ""


@dataclass(frozen=True, slots=True)
class Request:
    """One request: `exactly`, or `first_available` as (subrequest name, request) in priority order."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[tuple[str, ExactRequest], ...] = ()
    path: str = ""


@dataclass(frozen=True, slots=True)
class Constraint:
    """`constraints[]`: requests it covers (empty: all) and the attribute to match or keep distinct."""

    requests: tuple[str, ...] = ()
    match_attribute: str = ""
    distinct_attribute: str = ""
    path: str = ""


@dataclass(frozen=True)
class ClaimSpec:
    """A claim's device spec. `kind`/`object` name what problems are reported on (a template's pending claim is
    reported on the template); `key` is the claim's `namespace/name`."""

    namespace: str
    name: str
    requests: tuple[Request, ...]
    constraints: tuple[Constraint, ...] = ()
    kind: str = "ResourceClaim"
    object: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def problem(self, path: str, message: str) -> ObjectProblem:
        return ObjectProblem(self.kind, self.object or self.key, path, message)


@dataclass(frozen=True, slots=True)
class DeviceClassSpec:
    """A DeviceClass: its selectors, its `extendedResourceName` ("" if none), its creation time (RFC 3339)."""

    name: str
    selectors: tuple[str, ...] = ()
    extended_resource: str = ""
    created: str = ""


@dataclass(frozen=True)
class RequestDemand:
    """What one request asks: the demand, the request name as a result names it (`req` or `req/sub`), the MIG
    profiles its selectors admit on some model, and whether they admit a whole GPU too."""

    request: str
    demand: GpuDemand
    whole_gpu_ok: bool = False
    profiles: frozenset[str] = frozenset()


@dataclass(frozen=True)
class ClaimDemand:
    """A claim as demand. `gpu` merges equal demands (like `Pod.gpu`). `foreign`: it asks only other drivers'
    devices (no GPU demand, no problem). With `problems`, the claim cannot be planned; the rest still can."""

    claim: str
    gpu: tuple[GpuDemand, ...] = ()
    same_gpu: bool = False
    same_gpu_requests: tuple[str, ...] = ()
    requests: tuple[RequestDemand, ...] = ()
    notes: tuple[str, ...] = ()
    problems: tuple[ObjectProblem, ...] = ()
    foreign: bool = False


@dataclass
class _Work:
    spec: ClaimSpec
    problems: list[ObjectProblem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    foreign: int = 0


def claim_demand(spec: ClaimSpec, classes: Mapping[str, DeviceClassSpec], catalog: Catalog) -> ClaimDemand:
    """The demand of one claim (see the module docstring for the rules)."""
    w = _Work(spec)
    demands: list[RequestDemand] = []
    counts: dict[str, int] = {}
    for req in spec.requests:
        got = _request(w, req, classes, catalog)
        if got is not None:
            demands.append(got)
            counts[req.name] = got.demand.count
    same, same_requests = _constraints(w, counts, {d.request.split("/")[0]: d for d in demands})
    if w.foreign and not demands and not w.problems:
        return ClaimDemand(spec.key, notes=tuple(w.notes), foreign=True)
    return ClaimDemand(
        spec.key,
        gpu=merge([d.demand for d in demands]) if not w.problems else (),
        same_gpu=same,
        same_gpu_requests=same_requests,
        requests=tuple(demands),
        notes=tuple(w.notes),
        problems=tuple(w.problems),
    )


def merge(demands: Sequence[GpuDemand]) -> tuple[GpuDemand, ...]:
    """Equal demands summed, in order of first appearance."""
    out: dict[tuple[str, str, int], GpuDemand] = {}
    for d in demands:
        key = (d.kind, d.profile, d.vram_mib)
        prev = out.get(key)
        out[key] = d if prev is None else GpuDemand(d.kind, prev.count + d.count, d.profile, d.vram_mib)
    return tuple(out.values())


def _request(w: _Work, req: Request, classes: Mapping[str, DeviceClassSpec], catalog: Catalog) -> RequestDemand | None:
    if req.exactly is not None:
        return _exact(w, req.name, req.exactly, classes, catalog)
    if not req.first_available:
        w.problems.append(w.spec.problem(req.path, "a request needs `exactly` or `firstAvailable`"))
        return None
    if len(req.first_available) > MAX_SUBREQUESTS:
        w.problems.append(w.spec.problem(f"{req.path}.firstAvailable", f"at most {MAX_SUBREQUESTS} subrequests"))
        return None
    for sub_name, sub in req.first_available:
        before = len(w.problems)
        got = _exact(w, f"{req.name}/{sub_name}", sub, classes, catalog, skip_unservable=True)
        if got is not None or len(w.problems) > before:
            return got
    w.problems.append(
        w.spec.problem(f"{req.path}.firstAvailable", "no subrequest asks for a device any catalog model offers")
    )
    return None


def _exact(
    w: _Work,
    name: str,
    ex: ExactRequest,
    classes: Mapping[str, DeviceClassSpec],
    catalog: Catalog,
    skip_unservable: bool = False,
) -> RequestDemand | None:
    spec = w.spec
    if ex.admin_access:
        w.notes.append(f"request {name}: adminAccess monitors devices in use; it is no demand")
        return None
    if ex.capacity:
        w.problems.append(spec.problem(f"{ex.path}.capacity", "consumable capacity shares a device; MIG is not shared"))
        return None
    if ex.mode == "All":
        w.problems.append(
            spec.problem(
                f"{ex.path}.allocationMode",
                "allocationMode All takes every matching device of a node; migctl plans ExactCount requests",
            )
        )
        return None
    if not 1 <= ex.count <= MAX_COUNT:
        w.problems.append(spec.problem(f"{ex.path}.count", f"expected a count from 1 to {MAX_COUNT}, got {ex.count}"))
        return None
    dc = classes.get(ex.device_class)
    if dc is None:
        w.problems.append(spec.problem(f"{ex.path}.deviceClassName", f"DeviceClass {ex.device_class!r} does not exist"))
        return None
    try:
        class_sel = [cel.parse(e) for e in dc.selectors]
        class_meaning = cel.meaning(class_sel, catalog)
        if not class_meaning.offers and not class_meaning.errors:
            w.foreign += 1
            w.notes.append(f"request {name}: DeviceClass {dc.name} admits no device of {DRIVER}")
            return None
    except cel.UnreadableSelector as e:
        w.problems.append(spec.problem(f"{ex.path}.deviceClassName", f"DeviceClass {dc.name}: {e}"))
        return None
    selectors = list(class_sel)
    for i, expr in enumerate(ex.selectors):
        try:
            selectors.append(cel.parse(expr))
        except cel.UnreadableSelector as e:
            w.problems.append(spec.problem(f"{ex.path}.selectors[{i}].cel.expression", e.why))
            return None
    try:
        m = cel.meaning(selectors, catalog)
    except cel.UnreadableSelector as e:
        w.problems.append(spec.problem(f"{ex.path}.selectors", str(e)))
        return None
    if m.errors:
        offer, why = m.errors[0]
        w.problems.append(
            spec.problem(f"{ex.path}.selectors", f"fails on {offer.model} {offer.profile or 'GPU'}: {why}")
        )
        return None
    if not m.offers and skip_unservable:
        w.notes.append(f"subrequest {name}: no catalog model offers it; the next one is read")
        return None
    demand = _demand_of(m, ex.count, catalog)
    if isinstance(demand, str):
        w.problems.append(spec.problem(f"{ex.path}.selectors", demand))
        return None
    return RequestDemand(name, demand, whole_gpu_ok="gpu" in m.kinds and demand.kind != "gpu", profiles=m.profiles)


def _demand_of(m: cel.Meaning, count: int, catalog: Catalog) -> GpuDemand | str:
    """The one GpuDemand the admitted offers amount to, or why there is none."""
    if not m.offers:
        return "the selectors admit no device any catalog model offers"
    if m.kinds == {"gpu"}:
        return GpuDemand("gpu", count)
    migs = [o for o in m.offers if o.kind == "mig"]
    names = {o.profile for o in migs}
    if len(names) == 1:
        return GpuDemand("profile", count, profile=names.pop())
    plain = [o for o in migs if not catalog.model(o.model).profile(o.profile).attributes]
    if plain:
        floor = min(o.memory_mib for o in plain)
        pairs = {(o.model, o.product) for o in cel.offers(catalog)}
        wanted = {
            (mod, prod, p.name)
            for mod, prod in pairs
            for p in catalog.model(mod).base_profiles
            if p.memory_mib >= floor
        }
        if wanted <= {(o.model, o.product, o.profile) for o in plain}:
            return GpuDemand("vram", count, vram_mib=floor)
    shown = ", ".join(sorted(names)[:6]) + (", ..." if len(names) > 6 else "")
    return (
        f"the selectors admit profiles {shown}: migctl's demand is one profile or a memory floor "
        "(every plain profile from some memory up)"
    )


def _constraints(
    w: _Work, counts: Mapping[str, int], demands: Mapping[str, RequestDemand]
) -> tuple[bool, tuple[str, ...]]:
    spec = w.spec
    names = {r.name for r in spec.requests}
    same, grouped = False, set[str]()
    for i, c in enumerate(spec.constraints):
        path = c.path or f"spec.devices.constraints[{i}]"
        unknown = [r for r in c.requests if r.split("/")[0] not in names]
        if unknown:
            w.problems.append(spec.problem(f"{path}.requests", f"names no request of the claim: {unknown[0]!r}"))
            continue
        if c.distinct_attribute:
            w.notes.append(f"constraint {i}: distinctAttribute {c.distinct_attribute} is not planned")
            continue
        if c.match_attribute != PARENT_UUID:
            w.notes.append(f"constraint {i}: matchAttribute {c.match_attribute} is not planned")
            continue
        covered = [r for r in (c.requests or tuple(counts)) if r.split("/")[0] in counts]
        if any(demands[r.split("/")[0]].demand.kind == "gpu" for r in covered):
            w.problems.append(
                spec.problem(
                    f"{path}.matchAttribute", f"whole GPUs carry no {PARENT_UUID}: the constraint can never hold"
                )
            )
            continue
        if sum(counts[r.split("/")[0]] for r in covered) >= 2:
            same = True
            grouped.update(r.split("/")[0] for r in covered)
    return same, tuple(sorted(grouped))
