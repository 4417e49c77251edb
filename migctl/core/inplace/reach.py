"""The in-place path as the planner and the simulator read it: which GPUs it may re-cut, and what reaching a
target layout on one of them takes.

Under the stock mig-manager a GPU is re-cut only while idle. On a node opted into the in-place path
(`Node.in_place`, label `migctl.io/actuation=in-place`) the agent re-cuts the free part of a busy GPU through
NVML: instances in use stay where they are, free instances are kept or destroyed, and new ones are created at
placements from `ModelGeometry.place_around`. The agent's steps are `migctl.core.inplace.steps.plan_gpu`; the planner
(what a busy GPU may become) and the simulator (what a change costs: its instances destroyed and created) ask
the same function here, through the snapshot's `Placement`s.

Lazy reclamation (HAMi's term): a free instance whose profile the target still has is kept where it sits
rather than destroyed and created again, unless keeping it blocks the placement of what must be created.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, Placement, canonical
from migctl.core.inplace.steps import Found, plan_gpu
from migctl.core.model.cluster import Gpu, Node

# A busy GPU's instances as the in-place path reads them: (in use, free), each sorted by (start, profile).
Around = tuple[tuple[Placement, ...], tuple[Placement, ...]]


@dataclass(frozen=True)
class Reach:
    """How one GPU reaches a target layout in place: free instances kept and destroyed, instances created."""

    keep: tuple[Placement, ...]
    destroy: tuple[Placement, ...]
    create: tuple[Placement, ...]

    @property
    def operations(self) -> int:
        """GPU instances destroyed or created: what the change takes on the GPU (each is two NVML calls, the GPU
        instance and its compute instance)."""
        return len(self.destroy) + len(self.create)


def around(node: Node, gpu: Gpu) -> Around | None:
    """The instances of a busy GPU the in-place path may re-cut (`Around`), or None when it may not: a stock
    node, MIG off, the instances unknown, or nothing in use (an idle GPU is re-cut whole, as on the stock path)."""
    if not node.in_place or gpu.instances is None or not gpu.config.mig_enabled:
        return None
    used = tuple(sorted((i.placement for i in gpu.instances if i.in_use), key=_by_start))
    if not used:
        return None
    free = tuple(sorted((i.placement for i in gpu.instances if not i.in_use), key=_by_start))
    return used, free


def reach(geo: ModelGeometry, where: Around, target: Mapping[str, int] | CanonicalLayout) -> Reach | None:
    """How the GPU whose instances are `where` reaches `target` (profile counts) without moving an instance in
    use, or None when it cannot: the steps the agent takes (`migctl.core.inplace.steps.plan_gpu`, the one rule: the
    most free instances of the target kept where they sit, the rest destroyed, the missing ones created at
    `ModelGeometry.place_around`'s placements)."""
    used, free = where
    found = [_found(p, "in use") for p in used] + [_found(p, "") for p in free]
    steps = plan_gpu(geo, 0, found, dict(canonical(target)))
    if steps.blocked:
        return None
    gone = {(op.profile, op.start, op.size) for op in steps.ops if op.kind == "destroy"}
    return Reach(
        tuple(p for p in free if (p.profile, p.start, p.size) not in gone),
        tuple(p for p in free if (p.profile, p.start, p.size) in gone),
        tuple(Placement(op.profile, op.start, op.size) for op in steps.ops if op.kind == "create"),
    )


def _found(p: Placement, holder: str) -> Found:
    """An instance of the planner's or the simulator's inventory as the agent's rule reads it (the NVML ids are
    the agent's business; every instance reported here is whole, with its compute instance)."""
    return Found(p.profile, 0, p.start, p.size, 0, 0, "", holder)


def _by_start(p: Placement) -> tuple[int, str]:
    return (p.start, p.profile)
