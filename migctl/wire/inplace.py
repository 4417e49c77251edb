"""The in-place path's two node annotations: the controller's target and the agent's answer.

    migctl.io/in-place-target  {"version": "v1", "plan": "<id>", "gpus": {"0": {"1g.10gb": 2, "3g.40gb": 1}}}
    migctl.io/in-place-status  {"version": "v1", "plan": "<id>", "state": "applied", "message": "",
                                "gpus": {"0": [{"profile": "3g.40gb", "start": 4, "size": 4, "in_use": true}]}}

The target gives, per GPU index, the instances to reach as profile counts (a mig-parted `mig-devices` entry);
GPUs not listed are left alone. The agent chooses placements around the instances in use
(`ModelGeometry.place_around`, the same rule the planner checks). The status echoes the plan id it answers, so
the controller never reads an answer to an older target as the answer to the current one.

Both carry a `version` (`versions.check_version`, the one rule). A reader that meets another version raises
`UnknownVersionError`: the caller leaves the node alone and says so, instead of reading a newer writer's state as
garbage and undoing it. Other damage raises ValueError or TypeError naming the field, like `wire/layout.py`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from migctl.wire.layout import MAX_INSTANCES_PER_GPU
from migctl.wire.layout import expect_object as _object
from migctl.wire.values import gpu_index, parse_whole
from migctl.wire.versions import VERSION, UnknownVersionError, check_version

__all__ = ["VERSION", "Held", "State", "Status", "Target", "UnknownVersionError"]
MAX_TEXT = 1024  # a status message is for people: bounded, so a flood of errors cannot grow the Node object
MAX_PLACEMENT_UNIT = 64  # above any model's placement axis (8 on A100/H100, 12 on RTX PRO 6000)
State = Literal["applying", "applied", "blocked", "failed"]
STATES: tuple[State, ...] = ("applying", "applied", "blocked", "failed")


@dataclass(frozen=True)
class Target:
    """Per GPU index, the instances to reach (profile -> count); `plan` identifies this request."""

    plan: str
    gpus: Mapping[int, Mapping[str, int]]


@dataclass(frozen=True)
class Held:
    """One instance as the agent found it after acting: where it sits and whether something holds it."""

    profile: str
    start: int
    size: int
    in_use: bool


@dataclass(frozen=True)
class Status:
    """The agent's answer to the target `plan`: what it did and what each GPU it touched now holds."""

    plan: str
    state: State
    message: str = ""
    gpus: Mapping[int, tuple[Held, ...]] = field(default_factory=dict)


def _text(value: Any, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not value and not empty) or len(value) > MAX_TEXT:
        raise TypeError(f"{where}: expected a string of 1..{MAX_TEXT} characters, got {value!r:.60}")
    return value


def _document(raw: str, what: str) -> Mapping[str, Any]:
    data = _object(json.loads(raw), what)
    check_version(data, what)
    return data


def encode_target(target: Target) -> str:
    gpus = {str(i): dict(sorted(c.items())) for i, c in sorted(target.gpus.items())}
    return json.dumps({"version": VERSION, "plan": target.plan, "gpus": gpus}, sort_keys=True)


def decode_target(raw: str) -> Target:
    data = _document(raw, "in-place-target")
    plan = _text(data.get("plan"), "in-place-target.plan")
    gpus: dict[int, dict[str, int]] = {}
    for idx, counts in _object(data.get("gpus", {}), "in-place-target.gpus").items():
        where = f"in-place-target.gpus[{idx}]"
        gpus[gpu_index(idx)] = {
            _text(p, f"{where} profile"): parse_whole(n, MAX_INSTANCES_PER_GPU, "an instance count")
            for p, n in _object(counts, where).items()
        }
    return Target(plan, gpus)


def encode_status(status: Status) -> str:
    gpus = {
        str(i): [{"profile": h.profile, "start": h.start, "size": h.size, "in_use": h.in_use} for h in held]
        for i, held in sorted(status.gpus.items())
    }
    doc = {"version": VERSION, "plan": status.plan, "state": status.state, "message": status.message[:MAX_TEXT]}
    return json.dumps({**doc, "gpus": gpus}, sort_keys=True)


def decode_status(raw: str) -> Status:
    data = _document(raw, "in-place-status")
    plan = _text(data.get("plan"), "in-place-status.plan")
    state = data.get("state")
    if state not in STATES:
        raise ValueError(f"in-place-status.state: {state!r} is not one of {', '.join(STATES)}")
    message = _text(data.get("message", ""), "in-place-status.message", empty=True)
    gpus: dict[int, tuple[Held, ...]] = {}
    for idx, held in _object(data.get("gpus", {}), "in-place-status.gpus").items():
        where = f"in-place-status.gpus[{idx}]"
        if not isinstance(held, list) or len(held) > MAX_INSTANCES_PER_GPU:
            raise TypeError(f"{where}: expected a list of at most {MAX_INSTANCES_PER_GPU} instances")
        items = []
        for k, h in enumerate(held):
            o = _object(h, f"{where}[{k}]")
            in_use = o.get("in_use")
            if not isinstance(in_use, bool):
                raise TypeError(f"{where}[{k}].in_use: expected true or false, got {in_use!r:.40}")
            items.append(
                Held(
                    _text(o.get("profile"), f"{where}[{k}].profile"),
                    parse_whole(o.get("start"), MAX_PLACEMENT_UNIT, "a placement start"),
                    parse_whole(o.get("size"), MAX_PLACEMENT_UNIT, "a placement size", minimum=1),
                    in_use,
                )
            )
        gpus[gpu_index(idx)] = tuple(items)
    return Status(plan, state, message, gpus)
