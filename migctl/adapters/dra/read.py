"""Typed reads of DRA object fields, each failure a `FieldError` with the field path and what was expected.

On top of `migctl/adapters/fields.py` (objects and lists): strings, whole numbers, booleans, quantities, and the
DRA value shapes (a device attribute `{string|int|bool|version: ...}`, a capacity or counter `{value: <q>}`).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from migctl.adapters import fields
from migctl.core.dra.devices import AttrValue, Version
from migctl.core.text.quantity import parse_quantity

MAX_INT = 2**63 - 1


class FieldError(ValueError):
    """One bad field: where and what was expected."""

    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(f"{path}: {message}")


def _wrap(err: TypeError, path: str) -> FieldError:
    text = str(err)
    return FieldError(path, text.removeprefix(f"{path}: "))


def mapping(value: Any, path: str) -> Mapping[str, Any]:
    try:
        return fields.mapping(value, path)
    except TypeError as e:
        raise _wrap(e, path) from e


def maps(value: Any, path: str) -> list[Mapping[str, Any]]:
    try:
        return fields.maps(value, path)
    except TypeError as e:
        for i, v in enumerate(value if isinstance(value, list) else []):
            if not isinstance(v, Mapping):
                raise _wrap(e, f"{path}[{i}]") from e
        raise _wrap(e, path) from e


def strings(value: Any, path: str) -> list[str]:
    out = []
    for i, v in enumerate(_items(value, path)):
        out.append(text(v, f"{path}[{i}]", required=True))
    return out


def _items(value: Any, path: str) -> list[Any]:
    try:
        return fields.items(value, path)
    except TypeError as e:
        raise _wrap(e, path) from e


def text(value: Any, path: str, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise FieldError(path, "required field is missing")
        return ""
    if not isinstance(value, str):
        raise FieldError(path, f"expected a string, got {type(value).__name__} {fields.short(value)}")
    return value


def whole(value: Any, path: str, *, default: int | None = None, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if value is None and default is not None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(path, f"expected a whole number, got {type(value).__name__} {fields.short(value)}")
    if not minimum <= value <= maximum:
        raise FieldError(path, f"expected a whole number from {minimum} to {maximum}, got {value}")
    return value


def boolean(value: Any, path: str, default: bool = False) -> bool:
    if value is None:
        return default
    if not isinstance(value, bool):
        raise FieldError(path, f"expected true or false, got {type(value).__name__} {fields.short(value)}")
    return value


def quantity(value: Any, path: str) -> Decimal:
    """A quantity field (a string such as `40Gi`, or a number)."""
    try:
        return parse_quantity(value)
    except ValueError as e:
        raise FieldError(path, str(e)) from e


def measured(value: Any, path: str) -> Decimal:
    """`{value: <quantity>}` (a DeviceCapacity or a Counter)."""
    return quantity(mapping(value, path).get("value"), f"{path}.value")


def attribute(value: Any, path: str) -> AttrValue:
    """A DeviceAttribute: exactly one of string, int, bool, version."""
    m = mapping(value, path)
    set_ = [k for k in ("string", "int", "bool", "version") if m.get(k) is not None]
    if len(set_) != 1:
        raise FieldError(path, "expected exactly one of string, int, bool, version")
    k = set_[0]
    if k == "string":
        return text(m[k], f"{path}.string", required=True)
    if k == "int":
        return whole(m[k], f"{path}.int", minimum=-MAX_INT - 1)
    if k == "bool":
        return boolean(m[k], f"{path}.bool")
    return Version(text(m[k], f"{path}.version", required=True))


def qualified(name: str, driver: str) -> str:
    """An attribute or capacity key as CEL sees it: a bare key takes the driver as its domain."""
    return name if "/" in name else f"{driver}/{name}"


def object_name(obj: Mapping[str, Any], fallback: str) -> str:
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return name if isinstance(name, str) and name else fallback
