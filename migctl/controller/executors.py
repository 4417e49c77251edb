"""Each actuation path's executor, as ONE record per path: how a change on it begins, how a node in one of its
phases is driven on (a resume after a restart or failover) or released, and which phases it owns.

`reconcile/paths.py` says what a path is (its guard rails, refusals, fence); this table says who carries it out.
`loop.py` begins a change with `BEGIN[path.name]`; `Actuator.drive` and `Actuator.release` hand a node to the
executor that owns its phase (`owner`). A path that never actuates (DynamicMIG: the driver makes partitions at
allocation) has no entry. A new path is one more `Executor` here; its phases must also be in `nodestate.PHASES`
(read_state refuses any other), and the test checks that every phase has exactly one owner.

`unreadable` ends a change whose phase annotations cannot all be read but whose target can: None keeps the
stock rollback (rollback.py: untaint, relabel to the previous config if the GPUs may have changed); the DRA
path must also lift its fences, so it ends through its own final write instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, cast

from migctl.adapters.kube.interface import Obj
from migctl.controller.actuator_base import ActuatorBase
from migctl.controller.dra import drive_dra, fail_dra, release_dra, start_dra
from migctl.reconcile.nodestate import (
    APPLYING,
    DRA_PHASES,
    DRAINING,
    IN_PLACE_PHASES,
    ROLLING_BACK,
    VERIFYING,
    NodeState,
    Target,
)
from migctl.reconcile.paths import DRA_STATIC, IN_PLACE_PATH, STOCK, Path

Expect = Callable[[Obj], bool]  # re-checks that the fresh node still looks as planned
Begin = Callable[[ActuatorBase, str, Target, Expect], str]
Drive = Callable[[ActuatorBase, str, NodeState], str]
Release = Callable[[ActuatorBase, str, NodeState, str], str]


@dataclass(frozen=True)
class Executor:
    """One path's executor: `begin(actuator, node, target, expect)`, `drive(actuator, node, state)`,
    `release(actuator, node, state, why)` (end without driving further: dry run, out of scope), the `phases` it
    owns, and `unreadable` (see the module docstring)."""

    path: Path
    begin: Begin
    drive: Drive
    release: Release
    phases: tuple[str, ...]
    unreadable: Release | None = None


class _Steps(Protocol):
    """The stock and in-place entry points of `actuator.Actuator`, the only actuator there is. Named here, not
    imported: actuator.py dispatches through this table, so importing it would be a cycle."""

    def start(self, name: str, target: Target, expect: Expect) -> str: ...
    def drive_stock(self, name: str, state: NodeState) -> str: ...
    def release_stock(self, name: str, state: NodeState, why: str) -> str: ...
    def start_in_place(self, name: str, target: Target, expect: Expect) -> str: ...
    def drive_in_place(self, name: str, state: NodeState) -> str: ...
    def release_in_place(self, name: str, state: NodeState, why: str) -> str: ...


def _steps(a: ActuatorBase) -> _Steps:
    return cast(_Steps, a)


def _begin_stock(a: ActuatorBase, name: str, target: Target, expect: Expect) -> str:
    return _steps(a).start(name, target, expect)


def _drive_stock(a: ActuatorBase, name: str, state: NodeState) -> str:
    return _steps(a).drive_stock(name, state)


def _release_stock(a: ActuatorBase, name: str, state: NodeState, why: str) -> str:
    return _steps(a).release_stock(name, state, why)


def _begin_in_place(a: ActuatorBase, name: str, target: Target, expect: Expect) -> str:
    return _steps(a).start_in_place(name, target, expect)


def _drive_in_place(a: ActuatorBase, name: str, state: NodeState) -> str:
    return _steps(a).drive_in_place(name, state)


def _release_in_place(a: ActuatorBase, name: str, state: NodeState, why: str) -> str:
    return _steps(a).release_in_place(name, state, why)


EXECUTORS: Mapping[str, Executor] = {
    e.path.name: e
    for e in (
        Executor(STOCK, _begin_stock, _drive_stock, _release_stock, (DRAINING, APPLYING, VERIFYING, ROLLING_BACK)),
        Executor(IN_PLACE_PATH, _begin_in_place, _drive_in_place, _release_in_place, IN_PLACE_PHASES),
        Executor(DRA_STATIC, start_dra, drive_dra, release_dra, DRA_PHASES, unreadable=fail_dra),
    )
}
BEGIN: Mapping[str, Begin] = {name: e.begin for name, e in EXECUTORS.items()}
_BY_PHASE: Mapping[str, Executor] = {phase: e for e in EXECUTORS.values() for phase in e.phases}


def owner(phase: str) -> Executor:
    """The executor whose phase this is (read_state admits only `PHASES`; anything else is the stock path's, whose
    rollback handles what it cannot read)."""
    return _BY_PHASE.get(phase, EXECUTORS[STOCK.name])
