"""The in-place path's reach rule: which GPUs it may re-cut, and how a target layout is reached on one of them.

Under the stock mig-manager a GPU is re-cut only while idle. On a node opted into the in-place path
(`Node.in_place`, label `migctl.io/actuation=in-place`) the agent re-cuts the free part of a busy GPU through
NVML: instances in use stay where they are, free instances are kept or destroyed, and new ones are created at
placements from `ModelGeometry.place_around`. The planner (what a busy GPU may become), the simulator (what
the change costs: one NVML operation per destroy or create) and the agent (what it does) read it here, once.

Lazy reclamation (HAMi's term): a free instance whose profile the target still has is kept where it sits
rather than destroyed and created again, unless keeping it blocks the placement of what must be created; then
every free instance is destroyed and the target is placed around the instances in use alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from migctl.core.cluster import Gpu, Node
from migctl.core.geometry import CanonicalLayout, ModelGeometry, Placement, canonical

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
        """NVML operations (one per GPU instance destroyed or created): what the change takes on the GPU."""
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
    use, or None when it cannot: the target lacks an instance in use, or nothing fits around them."""
    used, free = where
    need = Counter(dict(canonical(target)))
    need.subtract(p.profile for p in used)
    if any(c < 0 for c in need.values()):
        return None  # an instance in use is not in the target: it cannot be destroyed
    keep: list[Placement] = []
    room = Counter(need)
    for p in free:
        if room[p.profile] > 0:
            keep.append(p)
            room[p.profile] -= 1
    for kept in (tuple(keep), ()) if keep else ((),):
        rest = Counter(need)
        rest.subtract(p.profile for p in kept)
        placed = geo.place_around(canonical(rest), (*used, *kept))
        if placed is not None:
            gone = list(free)
            for p in kept:
                gone.remove(p)
            return Reach(kept, tuple(gone), placed)
    return None


def _by_start(p: Placement) -> tuple[int, str]:
    return (p.start, p.profile)
