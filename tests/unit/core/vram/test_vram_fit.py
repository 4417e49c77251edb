"""Per-GPU best fit for the fallback: tightest GPU, priorities, planner constraints, clear reasons, the report."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.model.cluster import Node, Pod, Resources, Taint, Toleration
from migctl.core.vram.board import VramGpu, VramNode
from migctl.core.vram.fit import VramPod, fit, human, report

GIB = 2**30


def vnode(name: str, free_gib: list[int], cap_gib: int = 16, unattributed: int = 0, **kw: object) -> VramNode:
    gpus = tuple(VramGpu(i, f"GPU-{name}-{i}", cap_gib * GIB, (cap_gib - f) * GIB) for i, f in enumerate(free_gib))
    return VramNode(Node(name, **kw), gpus, unattributed * GIB, "gfd")  # type: ignore[arg-type]


def vpod(name: str, gib: float, priority: int = 0, **kw: object) -> VramPod:
    return VramPod(Pod("ns", name, priority=priority, **kw), int(gib * GIB))  # type: ignore[arg-type]


def test_best_fit_picks_the_gpu_left_tightest_across_nodes() -> None:
    nodes = [vnode("a", [10, 6]), vnode("b", [5, 16])]
    (p,) = fit(nodes, [vpod("x", 5)]).placements
    assert (p.node, p.gpu, p.uuid, p.free_after) == ("b", 0, "GPU-b-0", 0)


def test_pods_go_by_priority_then_size() -> None:
    nodes = [vnode("a", [8])]
    result = fit(nodes, [vpod("low-big", 8), vpod("high-small", 2, priority=10)])
    assert [p.pod for p in result.placements] == ["ns/high-small"]
    assert result.unplaced[0].pod == "ns/low-big"


def test_constraints_of_the_planner_apply() -> None:
    tainted = vnode("tainted", [16], taints=(Taint("gpu", "x"),))
    busy = vnode("busy", [16], allocatable=Resources(4000, 64 * GIB, 110), used=Resources(3500, 0, 1))
    ok = vnode("ok", [16], labels={"pool": "gpu"})
    pods = [vpod("x", 4, requests=Resources(1000, GIB, 1), node_selector=(("pool", "gpu"),))]
    (p,) = fit([tainted, busy, ok], pods).placements
    assert p.node == "ok"
    only_bad = fit([tainted, busy], [vpod("y", 4, requests=Resources(1000, GIB, 1))])
    reason = only_bad.unplaced[0].reason
    assert "0/2 GPU nodes fit" in reason and "untolerated taint gpu=x" in reason and "insufficient CPU" in reason


def test_split_free_vram_is_explained() -> None:
    result = fit([vnode("a", [7, 7])], [vpod("big", 12)])
    (u,) = result.unplaced
    assert "no single GPU has 12 GiB of VRAM free" in u.reason
    assert "largest free on one GPU: 7 GiB on a GPU 0" in u.reason
    assert "a has 14 GiB free in total but split across 2 GPUs" in u.reason


def test_unattributed_use_is_assumed_on_every_gpu() -> None:
    """2 GiB held by a pod without a GPU annotation could be on either GPU: neither may promise it."""
    result = fit([vnode("a", [6, 6], unattributed=2)], [vpod("x", 5)])
    assert not result.placements and result.unplaced


def test_excluded_node_is_never_used() -> None:
    node = VramNode(Node("n"), (VramGpu(0, None, 16 * GIB),), reason="every GPU has MIG on")
    result = fit([node], [vpod("x", 1)])
    assert "every GPU has MIG on" in result.unplaced[0].reason


def test_placements_never_overcommit_a_gpu() -> None:
    rng = random.Random(7)
    for _ in range(200):
        nodes = [vnode(f"n{i}", [rng.randint(0, 16) for _ in range(rng.randint(1, 4))]) for i in range(3)]
        pods = [vpod(f"p{j}", rng.choice([0.5, 1, 2, 4, 8, 12]), rng.randint(0, 2)) for j in range(10)]
        result = fit(nodes, pods)
        for n in nodes:
            for g in n.gpus:
                placed = sum(p.units for p in result.placements if (p.node, p.gpu) == (n.node.name, g.index))
                assert placed <= n.free(g)
                assert result.free_after[(n.node.name, g.index)] == n.free(g) - placed
        assert len(result.placements) + len(result.unplaced) == len(pods)


def test_report_shows_free_vram_placements_and_stranded_leftovers() -> None:
    nodes = [vnode("a", [7, 5])]
    out = report(nodes, [vpod("x", 4), vpod("big", 12)], "migctl.io/vram", 1)
    assert out["pods_placed"] == 1 and out["pending_pods"] == 2
    assert out["placements"][0] | {} == {
        "pod": "ns/x",
        "node": "a",
        "gpu": 1,
        "uuid": "GPU-a-1",
        "request_mib": 4096,
        "free_after_mib": 1024,
    }
    gpus = out["nodes"][0]["gpus"]
    assert [(g["free_mib"], g["free_after_mib"]) for g in gpus] == [(7168, 7168), (5120, 1024)]
    # The smallest pending request is 4 GiB: the 1 GiB left on GPU 1 is stranded, GPU 0's 7 GiB is not.
    assert [g["stranded_mib"] for g in gpus] == [0, 1024] and out["stranded_mib"] == 1024
    # big went first (larger): 7 + 5 GiB were free then, on two GPUs.
    assert "a has 12 GiB free in total but split across 2 GPUs" in out["unplaced"][0]["reason"]


def _scan_fit(
    nodes: list[VramNode], pods: list[VramPod]
) -> tuple[list[tuple[str, str, int, int]], list[tuple[str, str]]]:
    """The rule as first written, every GPU read for every pod: the oracle for `Board`'s sorted lists."""
    from migctl.core.model.placement import static_misfit

    free = {(n.node.name, g.index): n.free(g) for n in nodes for g in n.gpus}
    room = {n.node.name: n.node.free for n in nodes}
    placed, left_out = [], []
    for vp in sorted(pods, key=lambda p: (-p.pod.priority, -p.units, p.pod.created, p.pod.key)):
        best: tuple[int, str, int] | None = None
        for n in nodes:
            if n.reason or static_misfit(vp.pod, n.node) is not None or not vp.pod.requests.fits_in(room[n.node.name]):
                continue
            for g in n.gpus:
                left = free[(n.node.name, g.index)] - vp.units
                if left >= 0 and (best is None or (left, n.node.name, g.index) < best):
                    best = (left, n.node.name, g.index)
        if best is None:
            left_out.append((vp.pod.key, _scan_reason(vp, nodes, free, room)))
            continue
        free[(best[1], best[2])] = best[0]
        room[best[1]] = room[best[1]] - vp.pod.requests
        placed.append((vp.pod.key, best[1], best[2], best[0]))
    return placed, left_out


def _scan_reason(
    vp: VramPod, nodes: list[VramNode], free: dict[tuple[str, int], int], room: dict[str, Resources]
) -> str:
    from migctl.core.model.placement import static_misfit, tally

    pod, want = vp.pod, human(vp.units, 1)
    if not nodes:
        return f"no GPU node without MIG advertises VRAM; the pod asks for {want} on one GPU"
    reasons: Counter[str] = Counter()
    eligible = []
    for n in nodes:
        misfit = n.reason or static_misfit(pod, n.node)
        if misfit:
            reasons[misfit] += 1
        elif not pod.requests.fits_in(room[n.node.name]):
            reasons["insufficient CPU, memory or pod slots"] += 1
        else:
            eligible.append(n)
    head = tally(reasons, len(nodes))
    if not eligible:
        return f"{head}; the pod asks for {want} of VRAM on one GPU"
    largest = min(
        ((free[(n.node.name, g.index)], n.node.name, g.index) for n in eligible for g in n.gpus),
        key=lambda t: (-t[0], t[1], t[2]),
        default=None,
    )
    split = [
        (sum(free[(n.node.name, g.index)] for g in n.gpus), n.node.name, len(n.gpus))
        for n in eligible
        if sum(free[(n.node.name, g.index)] for g in n.gpus) >= vp.units
    ]
    msg = f"{head}; no single GPU has {want} of VRAM free"
    if largest is not None:
        msg += f" (largest free on one GPU: {human(largest[0], 1)} on {largest[1]} GPU {largest[2]})"
    if split:
        total, name, count = max(split)
        msg += f"; {name} has {human(total, 1)} free in total but split across {count} GPUs"
    return msg


@given(st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_the_sorted_board_places_as_reading_every_gpu_does(seed: int) -> None:
    """Random clusters: GPUs of several sizes, excluded, tainted, labelled and CPU-short nodes, pods pinned by
    hostname or a pool, tolerating or not; and every left-out pod's explanation names a real GPU and node."""
    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(1, 7)):
        name = f"n{i}"
        nodes.append(
            VramNode(
                Node(
                    name,
                    labels={"kubernetes.io/hostname": name, "pool": rng.choice("ab")},
                    taints=(Taint("gpu", "x"),) if rng.random() < 0.2 else (),
                    allocatable=Resources(rng.choice((2000, 8000)), 64 * GIB, 110),
                ),
                tuple(VramGpu(g, None, 16 * GIB, rng.randint(0, 16) * GIB // 2) for g in range(rng.randint(0, 3))),
                rng.choice((0, 0, GIB)),
                "gfd",
                "busy with MIG pods" if rng.random() < 0.1 else "",
            )
        )
    pods = []
    for j in range(rng.randint(1, 25)):
        selector: tuple[tuple[str, str], ...] = ()
        r = rng.random()
        if r < 0.3:
            selector = (("kubernetes.io/hostname", f"n{rng.randint(0, 7)}"),)
        elif r < 0.5:
            selector = (("pool", rng.choice("ab")),)
        pods.append(
            vpod(
                f"p{j}",
                rng.randint(1, 20) / 2,
                priority=rng.choice((0, 10)),
                requests=Resources(rng.choice((500, 1500)), GIB, 1),
                node_selector=selector,
                tolerations=(Toleration("gpu", "Equal", "x", "NoSchedule"),) if rng.random() < 0.3 else (),
            )
        )
    result = fit(nodes, pods)
    placed, left_out = _scan_fit(nodes, pods)
    assert [(p.pod, p.node, p.gpu, p.free_after) for p in result.placements] == placed
    assert [(u.pod, u.reason) for u in result.unplaced] == left_out
