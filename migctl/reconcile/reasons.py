"""Why a reconcile holds, refuses or starts something: a code that behaviour, metrics and tests read, and the text
that people read.

Rewording a message must never change what migctl does, so nothing compares or prefix-matches the text: the
code decides (an Event for every hold but a pause, a metric label per code), the text explains.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Code(StrEnum):
    """The closed set of reasons; the value is the metric label and the stable word in logs."""

    START = "start"
    DRY_RUN = "dry-run"  # would start, in dry run
    PAUSED = "paused"
    PROTECTED = "protected-pods"  # the change would evict opted-out pods
    EVICTION_BUDGET = "eviction-budget"
    CONCURRENCY = "concurrency"  # the path's max_concurrent_nodes is reached
    PATH_CANNOT = "path-cannot"  # the node's path cannot carry out this change (an in-place eviction, a MIG mode flip)
    IN_FLIGHT = "in-flight"  # migctl is changing the node now
    BACKOFF = "backoff"
    COOLDOWN = "cooldown"
    DWELL = "dwell"
    REFUSED = "refused"  # the node's path must not act on it (another component manages its MIG instances)


@dataclass(frozen=True)
class Reason:
    code: Code
    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def starts(self) -> bool:
        return self.code in (Code.START, Code.DRY_RUN)
