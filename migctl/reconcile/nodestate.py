"""The phase annotations on a node, read strictly: a node migctl is changing is either readable or `problem` says why.

The state of an in-flight reconfiguration lives only in annotations (`migctl.io/plan-id`, `phase`, `phase-since`,
`target`, `rollback`), which anyone with node patch rights can edit. A value migctl cannot trust must never leave
the node tainted, so `read_state` never raises: it returns a `NodeState` whose `problem` names the annotation, the
value and what was expected, and the actuator rolls such a node back (docs/troubleshooting.md). What is checked:
* `plan-id`: present, short, printable; `target` a JSON object of the documented shape (`_TargetDoc`) whose
  `plan` equals `plan-id` (a mismatch means two writers mixed their annotations);
* `phase`: one of `PHASES`; `phase-since`: plain ASCII decimal seconds, not in the future (beyond clock skew);
* `rollback` (phase `rolling-back` only): a JSON object of `_RollbackDoc`'s shape.

`target` and `rollback` carry a `version` (`wire/versions.py`; unversioned reads as v1). One of another version
was written by a migctl this one does not know: `NodeState.foreign` says so, and the actuator leaves the node
alone (never rolls it back: the other migctl may still be driving it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from migctl.core.model.gpu_config import GpuConfig
from migctl.wire import layout
from migctl.wire.layout import GpuLayout
from migctl.wire.names import PHASE, PHASE_SINCE, PLAN_ID, ROLLBACK, TARGET
from migctl.wire.versions import VERSION, UnknownVersionError, check_version

DRAINING, APPLYING, VERIFYING, ROLLING_BACK = "draining", "applying", "verifying", "rolling-back"
# The in-place path's phases (controller/inplace.py): waiting for bound pods' admission, for the agent, for allocatable.
ADMITTING, AGENT_APPLYING, ADVERTISING = "in-place-admitting", "in-place-applying", "in-place-advertising"
IN_PLACE_PHASES = (ADMITTING, AGENT_APPLYING, ADVERTISING)
# The static-MIG DRA path's (controller/dra.py): fencing the changed GPUs' devices, waiting for claims that landed on
# them after planning, for the agent, for the node's ResourceSlices. Never a node taint.
DRA_FENCING, DRA_DRAINING = "dra-fencing", "dra-draining"
DRA_APPLYING, DRA_ADVERTISING = "dra-applying", "dra-advertising"
DRA_PHASES = (DRA_FENCING, DRA_DRAINING, DRA_APPLYING, DRA_ADVERTISING)
PHASES = (DRAINING, APPLYING, VERIFYING, ROLLING_BACK, *IN_PLACE_PHASES, *DRA_PHASES)
PHASE_ANNOTATIONS = (PLAN_ID, PHASE, PHASE_SINCE, TARGET, ROLLBACK)
MAX_CLOCK_SKEW_S = 300.0  # a phase-since further in the future would postpone every timeout: unreadable
_SECONDS = re.compile(r"[0-9]{1,12}(\.[0-9]{1,9})?")
_PLAN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_MAX_SHOWN = 80

Name = Annotated[str, Field(min_length=1, max_length=253)]


def wire_layouts(gpus: Mapping[int, GpuConfig]) -> dict[int, GpuLayout]:
    """GPU configs as the wire's layout records (`migctl.wire.layout`)."""
    return {i: GpuLayout(g.mig_enabled, dict(g.layout)) for i, g in gpus.items()}


def layout_json(gpus: Mapping[int, GpuConfig]) -> dict[str, Any]:
    """The per-GPU part of `migctl.io/layout` and `migctl.io/target`: {"0": {"mig": true, "layout": {...}}, ...}."""
    return layout.gpus_doc(wire_layouts(gpus))


class _Doc(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)  # extra: a newer writer's fields


class _GpuDoc(_Doc):
    mig: bool
    layout: dict[Annotated[str, Field(min_length=1, max_length=40)], Annotated[int, Field(ge=1, le=64)]] = {}


class _TargetDoc(_Doc):
    plan: Annotated[str, Field(pattern=_PLAN_ID.pattern)]
    config: Name
    gpus: dict[Annotated[str, Field(pattern=r"^[0-9]{1,3}$")], _GpuDoc] = Field(max_length=64)
    evict: list[Name] = Field([], max_length=10000)
    keep: list[Name] = Field([], max_length=10000)
    pods: list[Name] = Field([], max_length=10000)
    previous_config: Name | None = None
    started: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0


class _RollbackDoc(_Doc):
    reason: Annotated[str, Field(max_length=4000)]
    cause: Annotated[str, Field(pattern=r"^[a-z-]{1,40}$")] = "error"
    relabel: bool
    backoff: bool = True
    uncertain: bool = False


class UnreadableError(ValueError):
    """An annotation value migctl cannot use; the message names the annotation, the value and the expectation."""


class ForeignStateError(UnreadableError, UnknownVersionError):
    """A value of another migctl version: an UnknownVersionError to `read_state`, which leaves the node alone;
    and unreadable to a caller that only skips what it cannot read."""


class LeftAlone(Exception):  # noqa: N818 (an outcome, not a failure of this migctl)
    """The actuator will not act on a node whose state another migctl version wrote (`NodeState.foreign`)."""


def _shown(value: str | None) -> str:
    if value is None:
        return "<missing>"
    return repr(value if len(value) <= _MAX_SHOWN else value[:_MAX_SHOWN] + "...")


def _parse(doc: type[_Doc], key: str, text: str) -> Any:
    """The document, or UnreadableError naming the field; UnknownVersionError when another version wrote it."""
    _check_version(key, text)
    try:
        return doc.model_validate_json(text)
    except ValidationError as e:
        first = e.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise UnreadableError(f"{key}={_shown(text)}: {where}: {first['msg']}") from None


def _check_version(key: str, text: str) -> None:
    """Only the version is looked at here: a value whose shape this migctl does not know is still of a version."""
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return  # not JSON: the document's own check says why
    if isinstance(data, dict):
        try:
            check_version(data, key)
        except UnknownVersionError as e:
            raise ForeignStateError(str(e)) from None


@dataclass(frozen=True)
class Target:
    """What one node is being changed to, and what the change may touch (persisted as `migctl.io/target`)."""

    plan_id: str
    config: str
    gpus: Mapping[int, GpuConfig]
    evict: tuple[str, ...] = ()  # pods (ns/name) the plan evicts
    keep: tuple[str, ...] = ()  # GPU pods on the node at plan time that stay (their GPU is unchanged)
    pods: tuple[str, ...] = ()  # pending pods this change is for
    previous_config: str | None = None  # the label before: what a rollback returns to
    started: float = 0.0

    def to_json(self) -> str:
        doc = {
            "version": VERSION,
            "plan": self.plan_id,
            "config": self.config,
            "gpus": layout_json(self.gpus),
            "evict": list(self.evict),
            "keep": list(self.keep),
            "pods": list(self.pods),
            "previous_config": self.previous_config,
            "started": self.started,
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_json(text: str) -> Target:
        """UnreadableError (naming the field) for anything but the shape `to_json` writes."""
        d: _TargetDoc = _parse(_TargetDoc, TARGET, text)
        gpus = {int(i): GpuConfig.mig(g.layout) if g.mig else GpuConfig.disabled() for i, g in d.gpus.items()}
        return Target(d.plan, d.config, gpus, tuple(d.evict), tuple(d.keep), tuple(d.pods), d.previous_config,
                      d.started)  # fmt: skip


@dataclass
class Rollback:
    """Why a node is rolled back and how (persisted as `migctl.io/rollback` while rolling back)."""

    reason: str
    cause: str  # metric label: eviction, unexpected-pod, mig-manager-failed, mig-manager-timeout, verify, error, ...
    relabel: bool  # the GPUs may have changed: return the label to the previous config
    backoff: bool = True
    uncertain: bool = False

    def to_json(self) -> str:
        return json.dumps({"version": VERSION, **self.__dict__}, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Rollback:
        d: _RollbackDoc = _parse(_RollbackDoc, ROLLBACK, text)
        return Rollback(d.reason, d.cause, d.relabel, d.backoff, d.uncertain)


@dataclass(frozen=True)
class NodeState:
    """A node's phase annotations as read; `problem` is "" only when every one is usable."""

    phase: str
    plan_id: str
    since: float | None
    target: Target | None  # None: unreadable, or its plan is not `plan_id`
    rollback: Rollback | None
    problem: str
    raw: tuple[str | None, ...]  # the annotation values as read: a write that releases the node expects them
    foreign: str = ""  # another migctl version wrote them: leave the node alone (never roll it back)

    @property
    def in_flight(self) -> bool:
        return any(v is not None for v in self.raw)


def raw_phase_annotations(annotations: Mapping[str, Any]) -> tuple[str | None, ...]:
    return tuple(None if annotations.get(k) is None else str(annotations[k]) for k in PHASE_ANNOTATIONS)


def read_since(text: str | None, now: float) -> float:
    """`phase-since`: what `f"{time:.3f}"` writes, and not in the future; else UnreadableError."""
    if text is None or not _SECONDS.fullmatch(text):
        raise UnreadableError(f"{PHASE_SINCE}={_shown(text)}: expected Unix seconds in ASCII digits")
    value = float(text)
    if value > now + MAX_CLOCK_SKEW_S:
        raise UnreadableError(f"{PHASE_SINCE}={_shown(text)}: {value - now:.0f} s in the future")
    return value


def read_state(annotations: Mapping[str, Any], now: float) -> NodeState:
    """Every phase annotation checked; never raises (see the module docstring for the rules)."""
    raw = raw_phase_annotations(annotations)
    plan_id, phase, since_text, target_text, rollback_text = raw
    problems: list[str] = []
    if plan_id is None or not _PLAN_ID.fullmatch(plan_id):
        problems.append(f"{PLAN_ID}={_shown(plan_id)}: expected a plan id such as p0123456789")
    if phase not in PHASES:
        problems.append(f"{PHASE}={_shown(phase)}: expected one of {', '.join(PHASES)}")
    since = None
    try:
        since = read_since(since_text, now)
    except UnreadableError as e:
        problems.append(str(e))
    target = None
    foreign: list[str] = []
    if target_text is None:
        problems.append(f"{TARGET} is missing")
    else:
        try:
            target = Target.from_json(target_text)
        except UnknownVersionError as e:
            foreign.append(str(e))
        except UnreadableError as e:
            problems.append(str(e))
    if target is not None and target.plan_id != plan_id:
        problems.append(f"{PLAN_ID}={_shown(plan_id)} but {TARGET} is for plan {target.plan_id!r}")
        target = None  # whose change is this? no relabel on a guess
    rollback = None
    if phase == ROLLING_BACK:
        try:
            rollback = Rollback.from_json(rollback_text or "")
        except UnknownVersionError as e:
            foreign.append(str(e))
        except UnreadableError as e:
            problems.append(str(e))
    if foreign:  # what this migctl cannot read of it is another migctl's business, not a problem to roll back
        problems = []
    return NodeState(
        str(phase or ""), str(plan_id or ""), since, target, rollback, "; ".join(problems), raw, "; ".join(foreign)
    )


def target_configs(annotations: Mapping[str, Any]) -> set[str]:
    """The configs an in-flight target still needs (its config, the one a rollback returns to); none if unreadable."""
    text = annotations.get(TARGET)
    if not text:
        return set()
    try:
        target = Target.from_json(str(text))
    except UnknownVersionError:  # another migctl's change: keep whatever configs it names, read leniently
        data = json.loads(str(text))
        return {str(data[k]) for k in ("config", "previous_config") if isinstance(data.get(k), str) and data[k]}
    except UnreadableError:
        return set()
    return {c for c in (target.config, target.previous_config) if c}


def phase_timeout(phase: str, settings: Any) -> float:
    """The longest a live controller stays in `phase` before it times out and rolls back."""
    if phase in DRA_PHASES:  # the same on the DRA path (fencing itself does not wait)
        return float(max(settings.dra_fence_settle_s, settings.dra_drain_timeout_s, settings.dra_agent_timeout_s,
                         settings.dra_advertise_timeout_s))  # fmt: skip
    if phase in IN_PLACE_PHASES:  # each in-place wait is bounded; the longest of them bounds every phase
        return float(max(settings.in_place_admission_timeout_s, settings.in_place_agent_timeout_s,
                         settings.in_place_advertise_timeout_s))  # fmt: skip
    return float(
        {DRAINING: settings.eviction_timeout_s, VERIFYING: settings.verify_timeout_s}.get(
            phase, settings.mig_manager_timeout_s
        )
    )


def abandoned(state: NodeState, now: float, settings: Any) -> bool:
    """No live controller can still be driving this node: unreadable, or its phase ran past its timeout by more
    than a poll, a resync and one API call (a live one would have moved it to rolling-back by then)."""
    if state.foreign:
        return False  # another migctl version's: never released by this one
    if state.problem or state.since is None:
        return True
    grace = settings.poll_interval_s + settings.resync_interval_s + settings.api_timeout_s
    return bool(now - state.since > phase_timeout(state.phase, settings) + grace)
