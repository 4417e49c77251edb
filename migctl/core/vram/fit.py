"""Per-GPU best fit of VRAM requests on GPUs without MIG (the fallback), and its report for `migctl plan`.

A node-level VRAM count lets the default scheduler bind a pod to a node whose free VRAM is split across GPUs,
and nothing then tells the container which GPU to use. migctl places pods that opt in (`schedulerName:
migctl`) itself: each pod goes to the single GPU whose free VRAM fits it most tightly (gpushare's best fit),
on a node that passes the planner's constraints (selectors, affinity, taints, CPU, memory, pod slots).

Everything is counted in units of the advertised resource (bytes by default), exactly as the pods request it
and the kube-scheduler accounts it, so rounding never disagrees between here and the node's capacity.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from migctl.core.model.cluster import Pod
from migctl.core.model.placement import tally
from migctl.core.vram.board import Board, VramNode
from migctl.wire import names

GPU_INDEX_ANNOTATION = names.GPU_INDEX
GPU_UUID_ANNOTATION = names.GPU_UUID
VISIBLE_DEVICES_ANNOTATION = names.VISIBLE_DEVICES
MIB = 2**20


@dataclass(frozen=True)
class VramPod:
    pod: Pod
    units: int  # the pod's effective request of the VRAM resource
    uid: str = ""


@dataclass(frozen=True)
class VramPlacement:
    pod: str
    node: str
    gpu: int
    uuid: str | None
    units: int
    free_after: int


@dataclass(frozen=True)
class VramUnplaced:
    pod: str
    units: int
    reason: str


@dataclass(frozen=True)
class VramFit:
    placements: tuple[VramPlacement, ...]
    unplaced: tuple[VramUnplaced, ...]
    free_after: dict[tuple[str, int], int] = field(default_factory=dict)  # (node, gpu) -> units


def human(units: int, unit_bytes: int) -> str:
    """`12 GiB`, `512 MiB`, `1.5 GiB`: readable in events and plan output."""
    b = units * unit_bytes
    if b >= 2**30:
        gib = b / 2**30
        return f"{gib:.0f} GiB" if gib == int(gib) else f"{gib:.2f} GiB"
    return f"{b / MIB:.0f} MiB" if b % MIB == 0 else f"{b} bytes"


def _order(p: VramPod) -> tuple[int, int, str, str]:
    return (-p.pod.priority, -p.units, p.pod.created, p.pod.key)


def fit(nodes: Sequence[VramNode], pods: Sequence[VramPod], unit_bytes: int = 1) -> VramFit:
    """Place pods (highest priority, then largest, first) on the GPU that leaves the least free VRAM (`Board`)."""
    board = Board(nodes)
    placements: list[VramPlacement] = []
    unplaced: list[VramUnplaced] = []
    for vp in sorted(pods, key=_order):
        pod = vp.pod
        if vp.units <= 0:
            unplaced.append(VramUnplaced(pod.key, vp.units, "requests no VRAM: add the VRAM resource to its limits"))
            continue
        best = board.best(pod, vp.units)
        if best is None:
            unplaced.append(VramUnplaced(pod.key, vp.units, why_unplaced(vp, board, unit_bytes)))
            continue
        n, g = best
        left = board.take(pod, n, g, vp.units)
        placements.append(VramPlacement(pod.key, n.node.name, g.index, g.uuid, vp.units, left))
    return VramFit(tuple(placements), tuple(unplaced), board.free)


def why_unplaced(vp: VramPod, board: Board, unit_bytes: int) -> str:
    """The scheduler-style explanation, ending with the per-GPU fact that matters: no single GPU has room."""
    pod, want = vp.pod, human(vp.units, unit_bytes)
    if not board.nodes:
        return f"no GPU node without MIG advertises VRAM; the pod asks for {want} on one GPU"
    misfits, fitting = board.fitting(pod)
    reasons = board.excluded + misfits
    short = board.short(pod)
    if short:
        reasons["insufficient CPU, memory or pod slots"] += short
    head = tally(reasons, len(board.nodes))
    if short == len(fitting):
        return f"{head}; the pod asks for {want} of VRAM on one GPU"
    largest = board.roomiest(pod)
    roomiest_node = board.largest_node(pod)
    msg = f"{head}; no single GPU has {want} of VRAM free"
    if largest is not None:
        msg += f" (largest free on one GPU: {human(largest[0], unit_bytes)} on {largest[1]} GPU {largest[2]})"
    if roomiest_node is not None and roomiest_node[0] >= vp.units:
        total, name, count = roomiest_node
        msg += f"; {name} has {human(total, unit_bytes)} free in total but split across {count} GPUs"
    return msg


# ---------------------------------------------------------------------------------------------------------
# Report for `migctl plan` (the `fallback` key of the JSON plan; docs/plan-format.md).


def report(nodes: Sequence[VramNode], pods: Sequence[VramPod], resource: str, unit_bytes: int) -> dict[str, Any]:
    """Per fallback node and GPU: capacity, free before and after placing the pending pods, and stranded VRAM.

    Stranded: VRAM left free on a GPU (after placement) that is smaller than the smallest pending request, so
    no pending pod can use it although the node's total might suggest otherwise.
    """
    result = fit(nodes, pods, unit_bytes)
    smallest = min((p.units for p in pods if p.units > 0), default=None)

    def mib(units: int) -> int:
        return units * unit_bytes // MIB

    out_nodes = []
    stranded_total = 0
    for n in sorted(nodes, key=lambda n: n.node.name):
        gpus = []
        for g in n.gpus:
            after = result.free_after.get((n.node.name, g.index), n.free(g))
            stranded = after if (smallest is not None and 0 < after < smallest and not n.reason) else 0
            stranded_total += stranded
            gpus.append(
                {
                    "index": g.index,
                    "uuid": g.uuid,
                    "capacity_mib": mib(g.capacity),
                    "used_mib": mib(g.used),
                    "free_mib": mib(n.free(g)),
                    "free_after_mib": mib(after),
                    "stranded_mib": mib(stranded),
                }
            )
        out_nodes.append(
            {
                "name": n.node.name,
                "source": n.source,
                "unattributed_mib": mib(n.unattributed),
                "excluded": n.reason or None,
                "gpus": gpus,
            }
        )
    return {
        "resource": resource,
        "unit_bytes": unit_bytes,
        "pending_pods": len(pods),
        "pods_placed": len(result.placements),
        "stranded_mib": mib(stranded_total),
        "nodes": out_nodes,
        "placements": [
            {
                "pod": p.pod,
                "node": p.node,
                "gpu": p.gpu,
                "uuid": p.uuid,
                "request_mib": mib(p.units),
                "free_after_mib": mib(p.free_after),
            }
            for p in result.placements
        ],
        "unplaced": [{"pod": u.pod, "request_mib": mib(u.units), "reason": u.reason} for u in result.unplaced],
    }
