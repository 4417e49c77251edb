"""The greedy's strategies as records: each says how one planner pass orders pods and breaks ties between options.

`plan()` runs `stranded-first`; when it leaves out pods some GPU could serve, the others compete and the best plan
by the objective wins (`passes.py`). A strategy changes only the order of pods and the terms of a `Cost` before
or around stranded memory (`objective.py`); the objective that compares the plans stays the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Order(Enum):
    """Which pods of a priority go first."""

    LARGEST = "largest"  # larger demands first within a priority
    ASCENDING = "ascending"  # smaller demands first within a priority (more pods of a tier that cannot all fit)
    SMALLEST = "smallest"  # smallest demands first across priorities (the local search claims room back)


class Scarcity(Enum):
    """Which GPU kinds a pod that fits several kinds avoids (the cost term before stranded memory)."""

    RIGID = "rigid"  # kinds that pods with no other kind still need
    DEMAND = "demand"  # kinds that all pods still to place need most


class Balance(Enum):
    """How unevenly a node's GPU memory, CPU and memory would be left free counts."""

    FIRST = "first"  # before stranded memory
    TIES = "ties"  # among options of equal cost, before the GPU order


@dataclass(frozen=True)
class Strategy:
    """The rules of one greedy pass. `name` is how plans, docs and tests refer to it."""

    name: str
    order: Order = Order.LARGEST
    pack: bool = False  # each pod takes the least share of a GPU it can (cost term before stranded memory)
    scarcity: Scarcity | None = None
    balance: Balance | None = None
    reshape_last: bool = False  # reshape only when no existing instance fits
    changes: bool = True  # False: no layout changes and no evictions (the floor every plan must beat)

    def sort_key(
        self, size: int, priority: int, boosted: bool, kinds: int, created: str, key: str
    ) -> tuple[object, ...]:
        """Order of pods in the pass: priority first (but for `Order.SMALLEST`), pods an earlier pass left out
        (`boosted`) first within it, then pods that fit fewer GPU kinds, then size."""
        return (
            size if self.order is Order.SMALLEST else 0,
            -priority,
            not boosted,
            kinds,
            size if self.order is Order.ASCENDING else -size,
            created,
            key,
        )


STRANDED_FIRST = Strategy("stranded-first")
STRATEGIES = (
    STRANDED_FIRST,
    Strategy("pack-first", pack=True),
    Strategy("pressure-first", scarcity=Scarcity.RIGID),
    Strategy("demand-first", scarcity=Scarcity.DEMAND),
    Strategy("balance-first", balance=Balance.FIRST),
    Strategy("balance-ties", balance=Balance.TIES),
    Strategy("small-first", order=Order.SMALLEST),
    Strategy("ascending", order=Order.ASCENDING),
    Strategy("existing-first", reshape_last=True),
    Strategy("no-changes", changes=False),
)
BY_NAME = {s.name: s for s in STRATEGIES}


def strategy(which: Strategy | str) -> Strategy:
    """The strategy record of a name (or the record itself); ValueError for an unknown name."""
    if isinstance(which, Strategy):
        return which
    found = BY_NAME.get(which)
    if found is None:
        raise ValueError(f"unknown planner strategy {which!r}")
    return found
