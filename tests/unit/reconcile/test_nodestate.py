"""Phase annotations read strictly: any value migctl cannot trust becomes a `problem` naming the annotation, never
an exception (fuzzed), and a well-formed state round-trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.controller.failpoint import failpoint_hook, parse_failpoint
from migctl.core.model.gpu_config import GpuConfig
from migctl.errors import InputError
from migctl.reconcile.nodestate import (
    PHASE_ANNOTATIONS,
    PHASES,
    Rollback,
    Target,
    UnreadableError,
    read_since,
    read_state,
    target_configs,
)

NOW = 1_800_000_000.0
TARGET = Target("p0123456789", "migctl-x", {0: GpuConfig.mig({"3g.40gb": 2})}, previous_config="all-1g.10gb")
GOOD = {
    "migctl.io/plan-id": "p0123456789",
    "migctl.io/phase": "applying",
    "migctl.io/phase-since": f"{NOW - 5:.3f}",
    "migctl.io/target": TARGET.to_json(),
}

ODD_VALUES = ["", " ", "nan", "inf", "-1", "1e400", "1²", "１２３", "99999999999", "[]", "{}", "null", '"x"', "{b"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _mutated_target(draw: Any) -> str:
    """A target document with one field removed, retyped or set to a random JSON value."""
    doc = json.loads(TARGET.to_json())
    key = draw(st.sampled_from([*doc, "gpus.0", "gpus.0.layout", "gpus.0.mig"]))
    value = draw(json_values)
    if key.startswith("gpus."):
        path = key.split(".")[1:]
        holder = doc["gpus"]
        for p in path[:-1]:
            holder = holder[p]
        holder[path[-1]] = value
    elif draw(st.booleans()):
        doc.pop(key)
    else:
        doc[key] = value
    return json.dumps(doc)


@st.composite
def annotation_value(draw: Any, key: str) -> str | None:
    good = GOOD.get(key)
    choices = [
        st.none(),
        st.text(max_size=30),
        st.sampled_from(ODD_VALUES),
        json_values.map(json.dumps),
    ]
    if good is not None:
        choices.append(st.just(good))
    if key == "migctl.io/target" and draw(st.booleans()):
        return _mutated_target(draw)
    if key == "migctl.io/phase":
        choices.append(st.sampled_from(PHASES))
    if key == "migctl.io/rollback":
        choices.append(st.just(Rollback("why", "eviction", relabel=True).to_json()))
    return draw(st.one_of(*choices))


@st.composite
def annotations(draw: Any) -> dict[str, str]:
    out = {}
    for key in PHASE_ANNOTATIONS:
        value = draw(annotation_value(key))
        if value is not None:
            out[key] = value
    return out


@settings(max_examples=400, deadline=None)
@given(annotations())
def test_read_state_never_raises_and_is_usable_only_when_consistent(ann: dict[str, str]) -> None:
    state = read_state(ann, NOW)
    if state.foreign:  # another migctl version's: never usable here, and not a problem to roll back either
        assert not state.problem and "was written by another migctl version" in state.foreign
    elif not state.problem:
        assert state.phase in PHASES and state.target is not None and state.since is not None
        assert state.target.plan_id == state.plan_id == ann["migctl.io/plan-id"]
        assert state.since <= NOW + 300
        assert state.phase != "rolling-back" or state.rollback is not None
    else:
        assert state.problem.startswith("migctl.io/")
    assert state.in_flight == bool(ann)


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("migctl.io/phase-since", "yesterday", "ASCII digits"),
        ("migctl.io/phase-since", "1²", "ASCII digits"),
        ("migctl.io/phase-since", "nan", "ASCII digits"),
        ("migctl.io/phase-since", "99999999999", "in the future"),
        ("migctl.io/target", "[1, 2]", "migctl.io/target='[1, 2]'"),
        ("migctl.io/target", '{"plan": "p0123456789"}', "config"),
        ("migctl.io/plan-id", "p-other", "is for plan 'p0123456789'"),
        ("migctl.io/plan-id", "", "expected a plan id"),
        ("migctl.io/phase", "exploding", "expected one of draining"),
        ("migctl.io/phase", "rolling-back", "migctl.io/rollback=''"),
    ],
)
def test_each_unreadable_annotation_is_named_with_its_value(key: str, value: str, expected: str) -> None:
    state = read_state({**GOOD, key: value}, NOW)
    assert expected in state.problem and (key in state.problem or expected.startswith("migctl.io/")), state.problem
    if key in ("migctl.io/target", "migctl.io/plan-id"):
        assert state.target is None  # never relabel on a guess


def test_good_state_reads_back() -> None:
    state = read_state(GOOD, NOW)
    assert state.problem == "" and state.target == TARGET and state.since == NOW - 5 and state.phase == "applying"
    assert read_state({}, NOW).in_flight is False


def test_target_rejects_non_objects_and_wrong_types_with_the_field() -> None:
    for text, where in (('"x"', "(top level)"), ("[]", "(top level)"),
                        ('{"plan":"p1","config":"c","gpus":{"0":{"mig":"yes"}}}', "gpus.0.mig"),
                        ('{"plan":"p1","config":"c","gpus":{"x":{"mig":true}}}', "gpus.x"),
                        ('{"plan":"p1","config":"c","gpus":{},"started":1e999}', "started")):  # fmt: skip
        with pytest.raises(UnreadableError, match=r"migctl\.io/target") as e:
            Target.from_json(text)
        assert where in str(e.value), str(e.value)
    with pytest.raises(UnreadableError, match="future"):
        read_since(f"{NOW + 1000:.3f}", NOW)


def test_target_configs_only_from_a_readable_target() -> None:
    assert target_configs({"migctl.io/target": TARGET.to_json()}) == {"migctl-x", "all-1g.10gb"}
    assert target_configs({"migctl.io/target": '{"config": "w"}'}) == set()


def test_failpoint_is_inert_by_default_and_validated() -> None:
    assert failpoint_hook({}) is None
    assert parse_failpoint("evicted@2") == ("evicted", 2)
    with pytest.raises(InputError, match="unknown step 'nope'"):
        parse_failpoint("nope")
    with pytest.raises(InputError, match="count"):
        parse_failpoint("evicted@0")
    hook = failpoint_hook({"MIGCTL_FAILPOINT": "labelled@2"})
    assert hook is not None
    hook("n", "tainted")  # another step: nothing happens
    hook("n", "labelled")  # first occurrence of 2: nothing happens
