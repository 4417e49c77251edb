"""Frozen dataclasses made by the ten thousand (a snapshot's pods), built at the cost of one assignment.

A frozen dataclass's generated `__init__` calls `object.__setattr__` once per field (plain assignment is what
`frozen` forbids): half the cost of making a 15-field pod. `quick_init` gives such a class an `__init__` with the
same signature and defaults that sets the instance's `__dict__` in one call. The class stays the dataclass it
was (fields, eq, hash, repr, replace, frozen assignment all unchanged); only how an instance is filled differs.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, TypeVar

T = TypeVar("T")


def quick_init(cls: type[T]) -> type[T]:
    """`cls` (a frozen dataclass with a `__dict__`) with the one-assignment `__init__`. Only for plain fields
    with plain defaults: a default factory, `__post_init__`, an InitVar, keyword-only fields or `__slots__`
    would need what the generated `__init__` does, so those are refused (TypeError) rather than half-copied."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen:
        raise TypeError(f"{cls.__name__}: quick_init is for frozen dataclasses")
    if "__slots__" in cls.__dict__ or hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: quick_init cannot copy __slots__ or __post_init__")
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    for f in fields:
        if f.default_factory is not dataclasses.MISSING or not f.init or f.kw_only:
            raise TypeError(f"{cls.__name__}.{f.name}: quick_init takes only plain fields with plain defaults")
    generated = inspect.signature(cls.__init__)
    if [p for p in generated.parameters if p != "self"] != [f.name for f in fields]:
        raise TypeError(f"{cls.__name__}: its __init__ takes more than its fields (an InitVar?)")
    if any(f.name.startswith("__") or f.name == "self" for f in fields):
        raise TypeError(f"{cls.__name__}: quick_init's own names are self and __*")
    scope: dict[str, Any] = {"__set": object.__setattr__}
    args = []
    for i, f in enumerate(fields):
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            scope[f"__default_{i}"] = f.default  # the very default object, as the generated __init__ shares it
            args.append(f"{f.name}=__default_{i}")
    members = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    exec(f"def __init__(self, {', '.join(args)}):\n    __set(self, '__dict__', {{{members}}})\n", scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    init.__annotations__ = dict(cls.__init__.__annotations__)
    init.__doc__ = cls.__init__.__doc__
    setattr(cls, "__init__", init)  # noqa: B010 (mypy refuses assigning a method)
    return cls
