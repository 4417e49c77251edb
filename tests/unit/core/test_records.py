"""`quick_init`: a frozen dataclass filled in one assignment is the same record as one its generated __init__
made (fields, defaults, eq, hash, repr, replace, pickling, frozen), and classes it cannot copy are refused."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import pytest

from migctl.core.cluster import Pod, Resources
from migctl.core.records import quick_init

SHARED = (1, 2)


@dataclass(frozen=True)
class Plain:
    a: str
    b: int = 0
    c: tuple[int, ...] = SHARED

    @cached_property
    def doubled(self) -> int:
        return 2 * self.b


@quick_init
@dataclass(frozen=True)
class Quick:  # Plain, filled in one assignment
    a: str
    b: int = 0
    c: tuple[int, ...] = SHARED

    @cached_property
    def doubled(self) -> int:
        return 2 * self.b


@pytest.mark.parametrize(("args", "kwargs"), [(("x",), {}), (("x", 3), {}), ((), {"a": "y", "c": (9,)})])
def test_a_quick_record_equals_the_generated_one(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    slow, quick = Plain(*args, **kwargs), Quick(*args, **kwargs)
    assert vars(quick) == vars(slow) and dataclasses.astuple(quick) == dataclasses.astuple(slow)
    assert quick == Quick(*args, **kwargs) and hash(quick) == hash(Quick(*args, **kwargs))
    assert repr(quick) == repr(slow).replace("Plain", "Quick")
    assert quick.doubled == slow.doubled and "doubled" in vars(quick)  # cached in the instance's dict
    assert dataclasses.replace(quick, b=5) == Quick(quick.a, 5, quick.c)
    assert pickle.loads(pickle.dumps(quick)) == quick == copy.copy(quick)
    with pytest.raises(dataclasses.FrozenInstanceError):
        quick.a = "z"  # type: ignore[misc]


def test_defaults_are_the_very_objects_and_the_signature_is_kept() -> None:
    assert Quick("x").c is SHARED
    assert str(inspect.signature(Quick)) == str(inspect.signature(Plain))
    with pytest.raises(TypeError):
        Quick()  # a is required
    with pytest.raises(TypeError):
        Quick("x", nope=1)


def test_the_pod_keeps_its_dataclass_signature_and_defaults() -> None:
    pod = Pod("ns", "p")
    assert pod.requests is Pod.__dataclass_fields__["requests"].default and pod.requests == Resources(pods=1)
    assert [p for p in inspect.signature(Pod).parameters] == [f.name for f in dataclasses.fields(Pod)]
    assert pod.key == "ns/p" and pod == Pod(namespace="ns", name="p")
    assert dataclasses.replace(pod, name="q").key == "ns/q"


def _cls(name: str, fields: dict[str, Any], **body: Any) -> type:
    return type(name, (), {"__annotations__": fields, **body})


@pytest.mark.parametrize(
    "make",
    [
        lambda: dataclass(_cls("Mutable", {"a": int})),
        lambda: dataclass(frozen=True, slots=True)(_cls("Slots", {"a": int})),
        lambda: dataclass(frozen=True)(_cls("Factory", {"a": list}, a=field(default_factory=list))),
        lambda: dataclass(frozen=True)(_cls("Post", {"a": int}, __post_init__=lambda self: None)),
        lambda: dataclass(frozen=True, kw_only=True)(_cls("Kw", {"a": int})),
        lambda: dataclass(frozen=True)(_cls("Init", {"a": int, "b": dataclasses.InitVar[int]})),
        lambda: dataclass(frozen=True)(_cls("Self", {"self": int})),
        lambda: _cls("NotADataclass", {}),
    ],
)
def test_a_class_it_cannot_copy_is_refused(make: Any) -> None:
    with pytest.raises(TypeError, match=r"quick_init|InitVar"):
        quick_init(make())
