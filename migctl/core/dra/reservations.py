"""What a plan reserves on a DynamicMIG node: per GPU, the placements its new instances will take, for the fences
that steer first fit there (`fences.plan_fences`).

DynamicMIG makes a claim's partition when the claim is allocated, so the plan's "re-cut" of such a GPU is not
carried out by anyone: it is the set of instances the plan means its pending pods to get, at the placements the
in-place rule gives (`ModelGeometry.place_around`, the partitions already allocated staying where they are).
"""

from __future__ import annotations

from collections import Counter

from migctl.core.dra.fences import Reservation
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import Node
from migctl.core.model.plan import NodePlan


def reservations(node: Node, plan: NodePlan) -> tuple[Reservation, ...]:
    """The placements `plan` wants made on `node`'s changed GPUs (a GPU index is the GPU's minor on DRA nodes);
    empty for a GPU whose target cannot be reached around its allocated partitions."""
    if node.model is None:
        return ()
    geo = geometry(node.model)
    gpus = {g.index: g for g in node.gpus}
    out: list[Reservation] = []
    for gp in plan.gpus:
        gpu = gpus.get(gp.index)
        if not gp.changed or gpu is None:
            continue
        if not gp.target.mig_enabled:
            out.append(Reservation(gp.index, "", 0, node.model.placement_units))
            continue
        fixed = tuple(i.placement for i in gpu.instances or () if i.in_use)
        add = Counter(dict(gp.target.layout)) - Counter(p.profile for p in fixed)
        placed = geo.place_around(tuple(sorted(add.items())), fixed)
        out += [Reservation(gp.index, p.profile, p.start, p.size) for p in placed or ()]
    return tuple(out)
