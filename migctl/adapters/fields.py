"""Typed access to fields of Kubernetes objects read as plain dicts: anyone can write a wrong type into YAML.

Absent or null reads as empty; a present value of the wrong type raises TypeError naming the field path, what
was expected and (shortened) what was found, so the one object becomes a rejection or warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def mapping(value: Any, where: str) -> Mapping[str, Any]:
    """An object field that must be a mapping (absent or null reads as empty); TypeError naming the path."""
    if type(value) is dict:  # what every loader gives: no ABC check (a snapshot reads hundreds of thousands)
        return value
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected an object, got {type(value).__name__} {short(value)}")
    return value


def items(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TypeError(f"{where}: expected a list, got {type(value).__name__} {short(value)}")
    return value


def maps(value: Any, where: str) -> list[Mapping[str, Any]]:
    """A list of objects (containers, tolerations, terms): each element must be an object."""
    if type(value) is list and all(type(v) is dict for v in value):
        return value  # the common case, checked without building the element paths
    return [item(v, f"{where}[{i}]") for i, v in enumerate(items(value, where))]


def item(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"{where}: expected an object, got {type(value).__name__} {short(value)}")
    return value


def short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
