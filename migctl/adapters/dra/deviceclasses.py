"""DeviceClasses -> `DeviceClassSpec`s, and which class serves a pod's extended-resource request.

KEP-5004 (GA in 1.37) lets a pod keep asking `nvidia.com/mig-1g.10gb: 1`: the scheduler turns the request into a
claim for the DeviceClass whose `extendedResourceName` is that name (when two classes name it, the newer wins and
the name breaks a tie, per the field's API doc), or, for `deviceclass.resource.kubernetes.io/<class>`, for that
class. `extended_claim` builds the claim the scheduler would, so the planner reads legacy and DRA pods alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migctl.adapters.dra import read
from migctl.adapters.dra.read import FieldError
from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec, ExactRequest, Request
from migctl.core.dra.devices import ObjectProblem
from migctl.core.model.cluster import epoch_s

KIND = "DeviceClass"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"


@dataclass(frozen=True)
class ClassReading:
    classes: Mapping[str, DeviceClassSpec]
    problems: tuple[ObjectProblem, ...] = ()


def read_device_classes(objects: Iterable[Mapping[str, Any]]) -> ClassReading:
    """Every readable DeviceClass by name; a malformed one is skipped with a problem naming the field."""
    out: dict[str, DeviceClassSpec] = {}
    problems: list[ObjectProblem] = []
    for i, obj in enumerate(objects):
        name = read.object_name(obj, f"#{i}")
        try:
            meta = read.mapping(obj.get("metadata"), "metadata")
            spec = read.mapping(obj.get("spec"), "spec")
            selectors = []
            for j, s in enumerate(read.maps(spec.get("selectors"), "spec.selectors")):
                cel = read.mapping(s.get("cel"), f"spec.selectors[{j}].cel")
                if not cel:
                    raise FieldError(f"spec.selectors[{j}]", "expected a cel selector")
                selectors.append(read.text(cel.get("expression"), f"spec.selectors[{j}].cel.expression", required=True))
            extended = read.text(spec.get("extendedResourceName"), "spec.extendedResourceName")
            created = read.text(meta.get("creationTimestamp"), "metadata.creationTimestamp")
        except FieldError as e:
            problems.append(ObjectProblem(KIND, name, e.path, e.message))
            continue
        out[name] = DeviceClassSpec(name, tuple(selectors), extended, created)
    return ClassReading(out, tuple(problems))


def class_for_resource(classes: Mapping[str, DeviceClassSpec], resource: str) -> DeviceClassSpec | None:
    """The class a pod's extended resource `resource` maps to, or None (then the device plugin's, if any)."""
    if resource.startswith(IMPLICIT_PREFIX):
        return classes.get(resource.removeprefix(IMPLICIT_PREFIX))
    named = [c for c in classes.values() if c.extended_resource == resource]
    if not named:
        return None
    return min(named, key=lambda c: (-(epoch_s(c.created) or 0.0), c.name))


def extended_claim(namespace: str, pod: str, container: int, index: int, count: int, cls: DeviceClassSpec) -> ClaimSpec:
    """The claim the scheduler generates for a pod's extended-resource request: request
    `container-<c>-request-<i>`, ExactCount `count` of `cls` (demo/specs/extended-resources)."""
    name = f"container-{container}-request-{index}"
    exact = ExactRequest(cls.name, count=count, path=f"spec.containers[{container}].resources")
    return ClaimSpec(
        namespace, f"{pod}-extended-resources", (Request(name, exactly=exact),), kind="Pod", object=f"{namespace}/{pod}"
    )
