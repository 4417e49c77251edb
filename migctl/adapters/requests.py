"""Container requests, read once for every component, as Kubernetes counts them.

Per container, a request defaults to its limit (the API server's defaulting; for extended resources such as
`nvidia.com/mig-1g.10gb` only limits may be written). Per pod, the effective request of a resource is the larger
of the app containers' sum (sidecars included) and the largest init container, plus overhead
(`core.demand.effective_requests`). The snapshot (`pods.py`), the fallback, the webhook's decision and the
actuator's drain check all read a container's `resources` here and nowhere else.

Each value is read through the one strict parser (`core/text/quantity.py`). A value it cannot read is kept apart with
why (`ContainerRequests.unreadable`), so each caller decides what it costs: a pending pod is rejected, a bound
pod's unreadable GPU resource may freeze its node, anything else is a warning on that pod.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from migctl.adapters.fields import mapping, maps
from migctl.core.model.demand import effective_requests
from migctl.core.text.quantity import parse_quantity
from migctl.core.vram.decide import ContainerAsk


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container's requests: those read, and those that could not be (resource -> why)."""

    where: str  # spec.containers[i] or spec.initContainers[i]
    init: bool
    restartable: bool  # an init container with restartPolicy Always: a sidecar
    values: Mapping[str, Decimal]
    unreadable: Mapping[str, str] = field(default_factory=dict)

    def problem(self, resource: str) -> str:
        """The unreadable value of `resource`, with the field's path."""
        return f"{self.where}.resources[{resource}]: {self.unreadable[resource]}"


def written(container: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A container's requests as written, a limit standing in where no request is given; TypeError naming the
    field when `resources`, its limits or its requests are not objects."""
    res = container.get("resources")
    res = res if type(res) is dict else mapping(res, f"{where}.resources")
    limits, requests = res.get("limits"), res.get("requests")
    merged: dict[str, Any] = dict(limits if type(limits) is dict else mapping(limits, f"{where}.resources.limits"))
    merged.update(requests if type(requests) is dict else mapping(requests, f"{where}.resources.requests"))
    return merged


def read_container(container: Mapping[str, Any], where: str, init: bool = False) -> ContainerRequests:
    values: dict[str, Decimal] = {}
    unreadable: dict[str, str] = {}
    for k, v in written(container, where).items():
        try:
            values[str(k)] = parse_quantity(v)
        except ValueError as e:
            unreadable[str(k)] = str(e)
    restartable = init and container.get("restartPolicy") == "Always"
    return ContainerRequests(where, init, restartable, values, unreadable)


def read_containers(spec: Mapping[str, Any]) -> tuple[list[ContainerRequests], list[ContainerRequests]]:
    """(app containers, init containers in order); TypeError naming the field when a list or an entry is not
    what Kubernetes writes."""
    raw_apps = maps(spec.get("containers"), "spec.containers")
    apps = [read_container(c, f"spec.containers[{i}]") for i, c in enumerate(raw_apps)]
    raw_inits = spec.get("initContainers")
    inits = (
        []
        if raw_inits is None
        else [
            read_container(c, f"spec.initContainers[{i}]", init=True)
            for i, c in enumerate(maps(raw_inits, "spec.initContainers"))
        ]
    )
    return apps, inits


def read_overhead(spec: Mapping[str, Any]) -> dict[str, Decimal] | None:
    """The pod's overhead (set by its RuntimeClass); ValueError naming the field on a value that cannot be read."""
    raw = spec.get("overhead")
    if raw is None:
        return None
    out = {}
    for k, v in mapping(raw, "spec.overhead").items():
        try:
            out[str(k)] = parse_quantity(v)
        except ValueError as e:
            raise ValueError(f"spec.overhead[{k}]: {e}") from e
    return out


def effective(
    apps: Sequence[ContainerRequests], inits: Sequence[ContainerRequests], overhead: Mapping[str, Decimal] | None
) -> dict[str, Decimal]:
    """The pod's effective request per resource, from the values that could be read."""
    return effective_requests([c.values for c in apps], [(c.values, c.restartable) for c in inits], overhead)


def effective_of(pod: Mapping[str, Any], resource: str) -> Decimal:
    """A Pod object's effective request of one resource; ValueError naming the field when a value of that
    resource (or the overhead) cannot be read. (The fallback's units; the other resources do not matter there.)"""
    spec = mapping(pod.get("spec"), "spec")
    apps, inits = read_containers(spec)
    for c in (*apps, *inits):
        if resource in c.unreadable:
            raise ValueError(c.problem(resource))
    raw = mapping(spec.get("overhead"), "spec.overhead").get(resource)
    try:
        overhead = None if raw is None else {resource: parse_quantity(raw)}
    except ValueError as e:
        raise ValueError(f"spec.overhead[{resource}]: {e}") from e
    return effective(apps, inits, overhead).get(resource, Decimal(0))


def holds_any(pod: Mapping[str, Any], resources: Callable[[str], bool]) -> bool:
    """Whether a bound Pod object holds something of a resource that `resources(name)` says is a device: a
    positive value, or one that cannot be read (the safe side: it may hold one). A value of 0 holds nothing."""
    spec = mapping(pod.get("spec"), "spec")
    apps, inits = read_containers(spec)
    for c in (*apps, *inits):
        if any(resources(k) and v > 0 for k, v in c.values.items()) or any(resources(k) for k in c.unreadable):
            return True
    return False


def vram_containers(pod: Mapping[str, Any], resource: str) -> list[ContainerAsk] | None:
    """A Pod object's containers as the webhook's decision reads them (`core/vram/decide.decide`), app
    containers first, when any names the VRAM `resource`; None otherwise."""
    asks = vram_asks(pod, resource)
    return asks if any(a.vram_text is not None for a in asks) else None


def vram_asks(pod: Mapping[str, Any], resource: str) -> list[ContainerAsk]:
    """Every container of a Pod object as `decide` reads it: its name, kind, the resources it names and its
    VRAM request (read, or why not)."""
    spec = pod.get("spec") or {}
    out = []
    for init, key in ((False, "containers"), (True, "initContainers")):
        for i, c in enumerate(spec.get(key) or []):
            named = written(c, f"spec.{key}[{i}]")
            raw = named.get(resource)
            value, error = None, ""
            if raw is not None:
                try:
                    value = parse_quantity(raw)
                except ValueError as e:
                    error = str(e)
            out.append(
                ContainerAsk(
                    init=init,
                    index=i,
                    name=str(c.get("name") or f"#{i}"),
                    sidecar=init and c.get("restartPolicy") == "Always",
                    named=tuple(str(k) for k in named),
                    vram_text=None if raw is None else str(raw),
                    vram=value,
                    vram_error=error,
                )
            )
    return out
