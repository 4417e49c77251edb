"""The `migctl.io/vram-choice` pod annotation: what the webhook chose for a pod's VRAM requests.

    {"version": "v1", "model": "h100-80gb", "products": ["NVIDIA-H100-80GB-HBM3"],
     "containers": [{"name": "main", "init": false, "request": "7Gi", "resource": "nvidia.com/mig-1g.10gb"}],
     "admission": "<AdmissionReview request uid>"}

Written on every pod the webhook rewrites (compact, sorted keys), for people and for the webhook's Event sender:
a pod made from `generateName` has no name at admission, so `admission` (only on such a pod) is how the sender
finds it once it exists. Versioned by the one rule (`versions.check_version`): the unversioned records of earlier
migctl read as v1; another version raises `UnknownVersionError`. Other damage raises ValueError or TypeError
naming the field, like the other codecs here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migctl.wire.layout import expect_object
from migctl.wire.names import VRAM_CHOICE
from migctl.wire.versions import VERSION, check_version


@dataclass(frozen=True)
class ContainerRecord:
    """One container's VRAM request (the quantity as written) and the resource it was given instead."""

    name: str
    init: bool  # in spec.initContainers
    request: str
    resource: str  # nvidia.com/mig-<profile>, or nvidia.com/gpu


@dataclass(frozen=True)
class VramChoice:
    """The model chosen, the products the pod's node affinity now names, and each container's choice."""

    model: str
    products: tuple[str, ...]
    containers: tuple[ContainerRecord, ...]
    admission: str = ""  # the admission request's uid, on a pod made from generateName only


def encode(choice: VramChoice) -> str:
    """The annotation's value: compact JSON with sorted keys (the same choice always writes the same bytes)."""
    doc: dict[str, Any] = {
        "version": VERSION,
        "model": choice.model,
        "products": list(choice.products),
        "containers": [
            {"name": c.name, "init": c.init, "request": c.request, "resource": c.resource} for c in choice.containers
        ],
    }
    if choice.admission:
        doc["admission"] = choice.admission
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def _text(data: Mapping[str, Any], key: str, where: str, *, required: bool = True) -> str:
    value = data.get(key, None if required else "")
    if not isinstance(value, str):
        raise TypeError(f"{where}.{key}: expected a string, got {value!r:.60}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def decode(raw: str) -> VramChoice:
    """The choice in an annotation value; UnknownVersionError (a ValueError) for another version, ValueError (bad
    JSON) or TypeError (a wrong or missing field) naming the field."""
    data = expect_object(json.loads(raw), VRAM_CHOICE)
    check_version(data, VRAM_CHOICE)
    products = []
    for i, p in enumerate(_list(data.get("products"), f"{VRAM_CHOICE}.products")):
        if not isinstance(p, str):
            raise TypeError(f"{VRAM_CHOICE}.products[{i}]: expected a string, got {p!r:.60}")
        products.append(p)
    containers = []
    for i, c in enumerate(_list(data.get("containers"), f"{VRAM_CHOICE}.containers")):
        where = f"{VRAM_CHOICE}.containers[{i}]"
        o = expect_object(c, where)
        init = o.get("init")
        if not isinstance(init, bool):
            raise TypeError(f"{where}.init: expected true or false, got {init!r:.40}")
        containers.append(
            ContainerRecord(_text(o, "name", where), init, _text(o, "request", where), _text(o, "resource", where))
        )
    return VramChoice(
        _text(data, "model", VRAM_CHOICE),
        tuple(products),
        tuple(containers),
        _text(data, "admission", VRAM_CHOICE, required=False),
    )
