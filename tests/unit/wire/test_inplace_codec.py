"""The in-place target and status annotations: round trips, strict reading, and versions."""

from __future__ import annotations

import json

import pytest

from migctl.wire.inplace import (
    Held,
    Status,
    Target,
    UnknownVersionError,
    decode_status,
    decode_target,
    encode_status,
    encode_target,
)


def test_round_trips() -> None:
    t = Target("plan-7", {1: {"3g.40gb": 1, "1g.10gb": 2}, 0: {}})
    assert decode_target(encode_target(t)) == t
    s = Status("plan-7", "blocked", "GPU 0: 3g.40gb at 4 is in use by ns/p", {0: (Held("3g.40gb", 4, 4, True),)})
    assert decode_status(encode_status(s)) == s


def test_same_target_same_bytes() -> None:
    """The controller compares what it wrote with what it would write: key order must not matter."""
    a = encode_target(Target("p", {0: {"b": 1, "a": 2}, 1: {}}))
    b = encode_target(Target("p", {1: {}, 0: {"a": 2, "b": 1}}))
    assert a == b


@pytest.mark.parametrize("version", ["v2", 1, None])
def test_another_version_is_its_own_error(version: object) -> None:
    doc = {"plan": "p", "gpus": {}, "version": version}
    with pytest.raises(UnknownVersionError, match="was written by another migctl version"):
        decode_target(json.dumps(doc))
    with pytest.raises(UnknownVersionError):
        decode_status(json.dumps({**doc, "state": "applied"}))


def test_the_unversioned_form_reads_as_v1_like_every_migctl_document() -> None:
    """One rule of versions (`wire/versions.check_version`): no codec has a dialect of its own."""
    assert decode_target(json.dumps({"plan": "p", "gpus": {"0": {"1g.10gb": 2}}})) == Target("p", {0: {"1g.10gb": 2}})
    assert decode_status(json.dumps({"plan": "p", "state": "applied"})) == Status("p", "applied")


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"plan": "", "gpus": {}}, "plan"),
        ({"plan": "p", "gpus": []}, "gpus"),
        ({"plan": "p", "gpus": {"x": {}}}, "GPU index"),
        ({"plan": "p", "gpus": {"0": {"1g.10gb": -1}}}, "instance count"),
        ({"plan": "p", "gpus": {"0": {"1g.10gb": 99}}}, "instance count"),
        ({"plan": "p", "gpus": {"0": {"1g.10gb": True}}}, "instance count"),
    ],
)
def test_bad_target_names_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field) as e:
        decode_target(json.dumps({"version": "v1", **doc}))
    assert not isinstance(e.value, UnknownVersionError)


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"state": "done"}, "state"),
        ({"message": 5}, "message"),
        ({"gpus": {"0": [{"profile": "a", "start": 0, "size": 0, "in_use": True}]}}, "placement size"),
        ({"gpus": {"0": [{"profile": "a", "start": 0, "size": 1, "in_use": "yes"}]}}, "in_use"),
        ({"gpus": {"0": [{}] * 8}}, "at most"),
    ],
)
def test_bad_status_names_the_field(patch: dict[str, object], field: str) -> None:
    doc = {"version": "v1", "plan": "p", "state": "applied", "message": "", "gpus": {}} | patch
    with pytest.raises((ValueError, TypeError), match=field):
        decode_status(json.dumps(doc))
