"""Kubernetes resource quantities (`7Gi`, `500m`, `1.5`, `8e9`) parsed exactly, without the Kubernetes client.

The planner works in integers: CPU in millicores, memory and VRAM in bytes (VRAM also in MiB). Parsing follows
the apimachinery grammar: a signed decimal number, then a binary (Ki..Ei), decimal (n, u, m, k, M..E) or
exponent (e3, E-2) suffix.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation
from functools import lru_cache

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"), "": Decimal(1), "k": Decimal("1e3"),
    "M": Decimal("1e6"), "G": Decimal("1e9"), "T": Decimal("1e12"), "P": Decimal("1e15"), "E": Decimal("1e18"),
}  # fmt: skip
_RE = re.compile(r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$")
MIB = 2**20


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity; raises ValueError saying what a quantity looks like."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a quantity")
    if isinstance(text, int | float):
        return Decimal(str(text))
    return _parse_text(text)


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    """Cached: a snapshot spells the same few quantities thousands of times (Decimals are immutable)."""
    m = _RE.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a Kubernetes quantity (expected e.g. 7Gi, 8192Mi, 500m, 2)")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation as e:  # pragma: no cover - the regex already guarantees a number
        raise ValueError(f"{text!r} is not a Kubernetes quantity") from e
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return num * _BINARY[suffix]
    if suffix in _DECIMAL:
        return num * _DECIMAL[suffix]
    return num * (Decimal(10) ** int(suffix[1:]))


def to_millicores(text: str | int | float) -> int:
    return math.ceil(parse_quantity(text) * 1000)


def to_bytes(text: str | int | float) -> int:
    return math.ceil(parse_quantity(text))


def to_int(text: str | int | float) -> int:
    return math.ceil(parse_quantity(text))
