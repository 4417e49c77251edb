"""What a reconcile knows of each node besides the snapshot: its labels and annotations, migctl's taint, and what
migctl remembers of it (`NodeRecord`, read from its annotations so every replica sees the same).

The live controller builds these from its watched Node objects (`adapters/views.py`); the simulator builds them
from its model, with the record as a value (no annotation strings to parse back).
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

from migctl.config import ControllerSettings
from migctl.reconcile.guards import NodeRecord
from migctl.reconcile.nodestate import PHASE_ANNOTATIONS, Target, UnreadableError, abandoned, read_state
from migctl.wire.names import TARGET


@dataclass(frozen=True)
class NodeFacts:
    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    tainted: bool = False  # carries migctl's reconfiguring taint
    known: NodeRecord | None = None  # the record, where the caller holds it as a value
    dra: str = ""  # the snapshot's `Node.dra`: how NVIDIA's DRA driver serves the node's GPUs ("" not at all)

    @property
    def record(self) -> NodeRecord:
        return self.known if self.known is not None else NodeRecord.from_annotations(self.name, self.annotations)

    @property
    def in_flight(self) -> bool:
        """A change is under way (phase annotations), or migctl's taint is left on the node."""
        return self.tainted or any(self.annotations.get(k) for k in PHASE_ANNOTATIONS)


def reserved_pods(facts: Iterable[NodeFacts]) -> set[str]:
    """The pending pods in-flight changes are for: left out of planning, so nobody plans them twice."""
    out: set[str] = set()
    for f in facts:
        if f.annotations.get(TARGET):
            with contextlib.suppress(UnreadableError):
                out.update(Target.from_json(str(f.annotations[TARGET])).pods)
    return out


def resumptions(
    facts: Iterable[NodeFacts], busy: Collection[str], not_before: Mapping[str, float], now: float,
    settings: ControllerSettings,
) -> list[tuple[str, str]]:  # fmt: skip
    """Nodes left mid-way that no worker drives: (node, "") to drive it on, or (node, why) to release it (a
    dry-run controller releases only what no live controller can still be driving). `not_before`: the backoff
    of resumes that failed."""
    out = []
    for f in facts:
        if f.name in busy or not f.in_flight or not_before.get(f.name, 0.0) > now:
            continue
        if not settings.dry_run:
            out.append((f.name, ""))
        elif abandoned(read_state(f.annotations, now), now, settings):
            out.append((f.name, "released: abandoned mid-phase, and this controller is in dry run"))
    return out
