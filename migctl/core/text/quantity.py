"""Kubernetes resource quantities (`7Gi`, `500m`, `1.5`, `8e9`) parsed exactly and strictly, without the client.

The planner works in integers: CPU in millicores, memory and VRAM in bytes (VRAM also in MiB). Parsing follows
the apimachinery grammar: a signed decimal number, then a binary (Ki..Ei), decimal (n, u, m, k, M..E) or
exponent (e3, E-2) suffix.

This is the one parser every edge uses (adapter, webhook, fallback, actuator), and it is strict because its
input is whatever anyone could write into a pod: ASCII digits only (`²` passes `str.isdigit()`), no inf or
nan, a bounded text length and exponent, and a bounded magnitude (Kubernetes itself keeps quantities within
int64), so no value can overflow a Decimal context, build a 5000-digit integer, or make a later loop run
forever. Every error names the value and says what was expected; callers prefix the object and field.
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
# ASCII digits only ([0-9], not \d: `\d` matches every Unicode digit); MAX_TEXT bounds the exponent digits.
_RE = re.compile(
    r"^(?P<num>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
MIB = 2**20
MAX_TEXT = 64  # characters: the longest quantity Kubernetes itself round-trips is well below this
MAX_EXPONENT = 30  # |e| of an exponent suffix
MAX_MAGNITUDE = Decimal(2**63 - 1)  # Kubernetes keeps quantities within int64
EXPECTED = "expected a Kubernetes quantity such as 7Gi, 8192Mi, 500m or 2"


def parse_quantity(text: object) -> Decimal:
    """The exact value of a quantity; raises ValueError naming the value and what was expected."""
    if type(text) is str:  # the common case first: a snapshot has tens of thousands
        return _parse_text(text)
    if isinstance(text, bool) or not isinstance(text, str | int | float | Decimal):
        raise ValueError(f"{_show(text)} is not a quantity ({EXPECTED}, got {type(text).__name__})")
    if isinstance(text, float | Decimal):
        if not math.isfinite(text):
            raise ValueError(f"{text!r} is not a quantity ({EXPECTED}; infinity and NaN are not amounts)")
        return _bounded(Decimal(str(text)), repr(text))
    if isinstance(text, int):
        return _bounded(Decimal(text), repr(text))
    return _parse_text(text)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= MAX_TEXT + 2 else text[: MAX_TEXT - 3] + "...'"


def _bounded(value: Decimal, shown: str) -> Decimal:
    if abs(value) > MAX_MAGNITUDE:
        raise ValueError(f"{shown} is out of range (a quantity's magnitude is at most {MAX_MAGNITUDE}, about 9.2e18)")
    return value


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal:
    """Cached: a snapshot spells the same few quantities thousands of times (Decimals are immutable)."""
    stripped = text.strip()
    if len(stripped) > MAX_TEXT:
        raise ValueError(f"{_show(text)} is not a quantity (longer than {MAX_TEXT} characters; {EXPECTED})")
    m = _RE.match(stripped)
    if not m:
        raise ValueError(f"{_show(text)} is not a Kubernetes quantity ({EXPECTED})")
    try:
        num = Decimal(m.group("num"))
    except InvalidOperation as e:  # pragma: no cover - the regex already guarantees a number
        raise ValueError(f"{_show(text)} is not a Kubernetes quantity ({EXPECTED})") from e
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        value = num * _BINARY[suffix]
    elif suffix in _DECIMAL:
        value = num * _DECIMAL[suffix]
    else:
        exponent = int(suffix[1:])
        if abs(exponent) > MAX_EXPONENT:
            raise ValueError(f"{_show(text)} is out of range (exponent {exponent}; at most ±{MAX_EXPONENT})")
        value = num.scaleb(exponent)
    return _bounded(value, repr(text))


def to_millicores(text: object) -> int:
    return math.ceil(parse_quantity(text) * 1000)


def to_bytes(text: object) -> int:
    return math.ceil(parse_quantity(text))


def to_int(text: object) -> int:
    return math.ceil(parse_quantity(text))


def to_count(value: Decimal, maximum: int, bound: str = "") -> int:
    """A whole, non-negative count of at most `maximum` (GPUs, MIG instances); `bound` says what the maximum is
    (e.g. "per pod"). ValueError otherwise."""
    if value != value.to_integral_value() or value < 0:
        raise ValueError(f"{value} is not a whole non-negative count")
    if value > maximum:
        raise ValueError(f"{value} is out of range (a count of at most {maximum}{' ' + bound if bound else ''})")
    return int(value)
