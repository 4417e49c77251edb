"""ResourceClaims and ResourceClaimTemplates -> `ClaimSpec`s, allocations in use, and each pending pod's claims.

An allocated claim (`status.allocation`) holds its devices whether or not a process runs: every result is an
`Allocation` (results with adminAccess hold nothing). A pending pod's claims come from `spec.resourceClaims[]`:
`resourceClaimName` names a claim; `resourceClaimTemplateName` names a template, whose claim the resourceclaim
controller generates and records in `status.resourceClaimStatuses[]`; until it has, the template's spec stands in
for the claim (named `<pod>-<entry>`, reported on the template). A bad object costs only itself; a pod whose claim
or template is missing or unreadable gets a problem and no claims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast

from migctl.adapters.dra import read
from migctl.adapters.dra.read import FieldError
from migctl.core.dra.claims import ClaimSpec, Constraint, ExactRequest, Request
from migctl.core.dra.devices import Allocation, DeviceId, ObjectProblem
from migctl.core.model.cluster import Toleration

CLAIM, TEMPLATE = "ResourceClaim", "ResourceClaimTemplate"


@dataclass(frozen=True)
class ClaimReading:
    """Claims by `namespace/name`, the allocations of the allocated ones, templates by `namespace/name`."""

    claims: Mapping[str, ClaimSpec]
    allocations: tuple[Allocation, ...] = ()
    allocated: frozenset[str] = frozenset()
    templates: Mapping[str, ClaimSpec] | None = None
    problems: tuple[ObjectProblem, ...] = ()

    @property
    def in_use(self) -> frozenset[DeviceId]:
        return frozenset(a.device for a in self.allocations)


@dataclass(frozen=True)
class PodClaims:
    """A pod's claims still to allocate (in `spec.resourceClaims` order) and those already allocated."""

    pod: str
    pending: tuple[ClaimSpec, ...] = ()
    allocated: tuple[str, ...] = ()
    problems: tuple[ObjectProblem, ...] = ()


def read_claims(claims: Iterable[Mapping[str, Any]], templates: Iterable[Mapping[str, Any]] = ()) -> ClaimReading:
    """Read every claim and template; a malformed one is skipped with a problem naming the field."""
    problems: list[ObjectProblem] = []
    specs: dict[str, ClaimSpec] = {}
    allocations: list[Allocation] = []
    allocated: set[str] = set()
    for i, obj in enumerate(claims):
        ns, name = _ident(obj, i)
        try:
            spec = _spec(read.mapping(obj.get("spec"), "spec"), "spec", ns, name, CLAIM, f"{ns}/{name}")
            results = _allocation(obj, f"{ns}/{name}")
        except FieldError as e:
            problems.append(ObjectProblem(CLAIM, f"{ns}/{name}", e.path, e.message))
            continue
        specs[spec.key] = spec
        if results is not None:
            allocated.add(spec.key)
            allocations += results
    tmpl: dict[str, ClaimSpec] = {}
    for i, obj in enumerate(templates):
        ns, name = _ident(obj, i)
        try:
            outer = read.mapping(obj.get("spec"), "spec")
            spec = _spec(read.mapping(outer.get("spec"), "spec.spec"), "spec.spec", ns, name, TEMPLATE, f"{ns}/{name}")
        except FieldError as e:
            problems.append(ObjectProblem(TEMPLATE, f"{ns}/{name}", e.path, e.message))
            continue
        tmpl[spec.key] = spec
    return ClaimReading(specs, tuple(allocations), frozenset(allocated), tmpl, tuple(problems))


def _ident(obj: Mapping[str, Any], i: int) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(meta, Mapping)
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) and ns else "default", name if isinstance(name, str) and name else f"#{i}")


def _spec(spec: Mapping[str, Any], prefix: str, ns: str, name: str, kind: str, obj: str) -> ClaimSpec:
    devices = read.mapping(spec.get("devices"), f"{prefix}.devices")
    requests = tuple(
        _request(r, f"{prefix}.devices.requests[{i}]")
        for i, r in enumerate(read.maps(devices.get("requests"), f"{prefix}.devices.requests"))
    )
    constraints = []
    for i, c in enumerate(read.maps(devices.get("constraints"), f"{prefix}.devices.constraints")):
        path = f"{prefix}.devices.constraints[{i}]"
        constraints.append(
            Constraint(
                tuple(read.strings(c.get("requests"), f"{path}.requests")),
                read.text(c.get("matchAttribute"), f"{path}.matchAttribute"),
                read.text(c.get("distinctAttribute"), f"{path}.distinctAttribute"),
                path,
            )
        )
    return ClaimSpec(ns, name, requests, tuple(constraints), kind, obj)


def _request(r: Mapping[str, Any], path: str) -> Request:
    name = read.text(r.get("name"), f"{path}.name", required=True)
    if r.get("exactly") is not None:
        return Request(
            name, exactly=_exact(read.mapping(r["exactly"], f"{path}.exactly"), f"{path}.exactly"), path=path
        )
    if r.get("firstAvailable") is not None:
        subs = tuple(
            (
                read.text(s.get("name"), f"{path}.firstAvailable[{i}].name", required=True),
                _exact(s, f"{path}.firstAvailable[{i}]"),
            )
            for i, s in enumerate(read.maps(r["firstAvailable"], f"{path}.firstAvailable"))
        )
        if not subs:
            raise FieldError(f"{path}.firstAvailable", "expected at least one subrequest")
        return Request(name, first_available=subs, path=path)
    if r.get("deviceClassName") is not None:
        raise FieldError(path, "a resource.k8s.io/v1beta1 request (deviceClassName at the top); read claims as v1")
    raise FieldError(path, "expected `exactly` or `firstAvailable`")


def _exact(e: Mapping[str, Any], path: str) -> ExactRequest:
    selectors = []
    for i, s in enumerate(read.maps(e.get("selectors"), f"{path}.selectors")):
        cel = read.mapping(s.get("cel"), f"{path}.selectors[{i}].cel")
        if not cel:
            raise FieldError(f"{path}.selectors[{i}]", "expected a cel selector (the only kind resource.k8s.io/v1 has)")
        selectors.append(read.text(cel.get("expression"), f"{path}.selectors[{i}].cel.expression", required=True))
    mode = read.text(e.get("allocationMode"), f"{path}.allocationMode") or "ExactCount"
    if mode not in ("ExactCount", "All"):
        raise FieldError(f"{path}.allocationMode", f"expected ExactCount or All, got {mode!r}")
    count = read.whole(e.get("count"), f"{path}.count", default=1, minimum=0)
    tolerations = tuple(
        Toleration(
            read.text(t.get("key"), f"{path}.tolerations[{i}].key"),
            read.text(t.get("operator"), f"{path}.tolerations[{i}].operator") or "Equal",
            read.text(t.get("value"), f"{path}.tolerations[{i}].value"),
            read.text(t.get("effect"), f"{path}.tolerations[{i}].effect"),
        )
        for i, t in enumerate(read.maps(e.get("tolerations"), f"{path}.tolerations"))
    )
    return ExactRequest(
        device_class=read.text(e.get("deviceClassName"), f"{path}.deviceClassName", required=True),
        selectors=tuple(selectors),
        count=count,
        mode=cast(Literal["ExactCount", "All"], mode),
        tolerations=tolerations,
        admin_access=read.boolean(e.get("adminAccess"), f"{path}.adminAccess"),
        capacity=e.get("capacity") is not None,
        path=path,
    )


def _allocation(obj: Mapping[str, Any], key: str) -> list[Allocation] | None:
    status = read.mapping(obj.get("status"), "status")
    if status.get("allocation") is None:
        return None
    alloc = read.mapping(status["allocation"], "status.allocation")
    devices = read.mapping(alloc.get("devices"), "status.allocation.devices")
    out = []
    for i, r in enumerate(read.maps(devices.get("results"), "status.allocation.devices.results")):
        path = f"status.allocation.devices.results[{i}]"
        if read.boolean(r.get("adminAccess"), f"{path}.adminAccess"):
            continue
        device = DeviceId(
            read.text(r.get("driver"), f"{path}.driver", required=True),
            read.text(r.get("pool"), f"{path}.pool", required=True),
            read.text(r.get("device"), f"{path}.device", required=True),
        )
        out.append(Allocation(key, read.text(r.get("request"), f"{path}.request", required=True), device))
    return out


def pod_claims(pod: Mapping[str, Any], reading: ClaimReading) -> PodClaims:
    """The claims a pod waits for, from its `spec.resourceClaims` and `status.resourceClaimStatuses`."""
    ns, name = _ident(pod, 0)
    key = f"{ns}/{name}"
    try:
        entries = read.maps(read.mapping(pod.get("spec"), "spec").get("resourceClaims"), "spec.resourceClaims")
        statuses = read.maps(
            read.mapping(pod.get("status"), "status").get("resourceClaimStatuses"), "status.resourceClaimStatuses"
        )
        generated = {
            read.text(s.get("name"), f"status.resourceClaimStatuses[{i}].name", required=True): read.text(
                s.get("resourceClaimName"), f"status.resourceClaimStatuses[{i}].resourceClaimName"
            )
            for i, s in enumerate(statuses)
        }
    except FieldError as e:
        return PodClaims(key, problems=(ObjectProblem("Pod", key, e.path, e.message),))
    pending: list[ClaimSpec] = []
    done: list[str] = []
    for i, entry in enumerate(entries):
        path = f"spec.resourceClaims[{i}]"
        entry_name = entry.get("name")
        claim_name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if isinstance(template, str) and template and generated.get(str(entry_name)):
            claim_name = generated[str(entry_name)]
        if isinstance(claim_name, str) and claim_name:
            claim_key = f"{ns}/{claim_name}"
            spec = reading.claims.get(claim_key)
            if spec is None:
                return _missing(
                    key, f"{path}.resourceClaimName", f"ResourceClaim {claim_key} does not exist (or is unreadable)"
                )
            (done.append(claim_key) if claim_key in reading.allocated else pending.append(spec))
            continue
        if isinstance(template, str) and template:
            tkey = f"{ns}/{template}"
            tspec = (reading.templates or {}).get(tkey)
            if tspec is None:
                return _missing(
                    key,
                    f"{path}.resourceClaimTemplateName",
                    f"ResourceClaimTemplate {tkey} does not exist (or is unreadable)",
                )
            pending.append(ClaimSpec(ns, f"{name}-{entry_name}", tspec.requests, tspec.constraints, TEMPLATE, tkey))
            continue
        return _missing(key, path, "expected resourceClaimName or resourceClaimTemplateName")
    return PodClaims(key, tuple(pending), tuple(done))


def _missing(pod: str, path: str, message: str) -> PodClaims:
    return PodClaims(pod, problems=(ObjectProblem("Pod", pod, path, message),))
