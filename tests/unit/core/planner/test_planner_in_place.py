"""The planner's in-place path: a busy GPU on a node opted in (`Node.in_place`) may be re-cut around its
instances in use. The agent's NVML work is not run here: the snapshot carries its inventory (`Gpu.instances`) at
its real interface, and the plan's target is checked with the same placement rule the agent applies
(`ModelGeometry.place_around`, through `migctl.core.inplace.reach.reach`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from migctl.core.hardware.geometry import geometry
from migctl.core.inplace.reach import around, reach
from migctl.core.model.cluster import Gpu, Instance, Node, Pod, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan
from tests.unit.builders import CATALOG, mig, node

A100 = CATALOG.model("a100-40gb")
GEO = geometry(A100)


def busy_node(name: str, instances: list[tuple[str, int, bool]], *, in_place: bool = True) -> Node:
    """One A100-40GB whose instances sit at (profile, start, in use); sizes from the catalog's placements."""
    held = []
    for profile, start, in_use in instances:
        size = dict(A100.profile(profile).placements)[start]
        held.append(Instance(profile, start, size, in_use))
    layout = Counter(i.profile for i in held)
    used = Counter(i.profile for i in held if i.in_use)
    base = node(name, "a100-40gb", [dict(layout)], [dict(used)])
    gpu = Gpu(0, GpuConfig.mig(dict(layout)), dict(used), None, tuple(held))
    return replace(base, gpus=(gpu,), in_place=in_place)


def running(name: str, profile: str, on: str) -> Pod:
    return replace(mig(name, profile), node=on, phase="Running", created="2026-01-01T00:00:00Z")


def plan_of(nodes: list[Node], pods: list[Pod]) -> Plan:
    return plan(Snapshot(tuple(nodes), tuple(pods)), PlannerSettings())


def target_of(result: Plan, name: str) -> dict[str, int]:
    (npl,) = [n for n in result.nodes if n.name == name]
    return dict(npl.gpus[0].target.layout)


def test_busy_gpu_on_an_in_place_node_is_re_cut_for_a_pending_pod_and_on_a_stock_node_is_not() -> None:
    # 1g.5gb in use at units 0 and 1; the pod's 3g.20gb fits at 4-7 beside them
    layout = [("1g.5gb", 0, True), ("1g.5gb", 1, True), ("1g.5gb", 2, False), ("1g.5gb", 3, False)]
    pods = [running("r0", "1g.5gb", "n1"), running("r1", "1g.5gb", "n1"), mig("big", "3g.20gb")]
    stock = plan_of([busy_node("n1", layout, in_place=False)], pods)
    assert stock.assignments == ()
    assert not stock.nodes[0].changed

    result = plan_of([busy_node("n1", layout)], pods)
    assert [(a.pod, a.node, a.gpu, a.profile) for a in result.assignments] == [("ns/big", "n1", 0, "3g.20gb")]
    target = target_of(result, "n1")
    assert target.get("3g.20gb", 0) >= 1 and target.get("1g.5gb", 0) >= 2
    where = around(busy_node("n1", layout), busy_node("n1", layout).gpus[0])
    assert where is not None
    moved = reach(GEO, where, target)
    assert moved is not None  # the agent can reach it without moving an instance in use


def test_in_use_instances_are_never_moved_by_a_plan() -> None:
    # in use at units 0 and 6: a 3g.20gb (units 0-3 or 4-7) fits only if one of them moved
    layout = [("1g.5gb", 0, True), ("1g.5gb", 6, True)]
    pods = [running("r0", "1g.5gb", "n1"), running("r6", "1g.5gb", "n1"), mig("big", "3g.20gb")]
    n1 = busy_node("n1", layout)
    assert GEO.is_valid({"1g.5gb": 2, "3g.20gb": 1})  # the counts alone would fit: only placement forbids it
    result = plan_of([n1], pods)
    assert result.assignments == ()
    assert not result.nodes[0].changed
    # a pod that fits around them is placed, and the target's new instances sit beside the fixed ones
    result = plan_of([n1], [*pods[:2], mig("mid", "2g.10gb")])
    assert [a.profile for a in result.assignments] == ["2g.10gb"]
    target = target_of(result, "n1")
    fixed = (where := around(n1, n1.gpus[0])) and where[0]
    assert fixed
    rest = Counter(target)
    rest.subtract(p.profile for p in fixed)
    placed = GEO.place_around(dict(+rest), fixed)
    assert placed is not None
    taken = 0
    for p in (*fixed, *placed):
        mask = ((1 << p.size) - 1) << p.start
        assert not taken & mask
        taken |= mask


def test_a_free_instance_the_forecast_still_wants_is_kept_not_remade() -> None:
    # in use: 3g.20gb at 4; free 1g.5gb at 0. Pending: a 2g.10gb. The running pods make 1g.5gb the forecast's
    # main class, so the target keeps a 1g.5gb, and reaching it keeps the free one where it sits
    layout = [("1g.5gb", 0, False), ("3g.20gb", 4, True)]
    n1 = busy_node("n1", layout)
    pods = [running("r", "3g.20gb", "n1")]
    pods += [replace(running(f"s{i}", "1g.5gb", "other"), created=f"2026-01-01T00:0{i}:00Z") for i in range(6)]
    pods += [replace(mig("p", "2g.10gb"), created="2026-01-01T00:10:00Z")]
    result = plan_of([n1], pods)
    assert [a.profile for a in result.assignments] == ["2g.10gb"]
    target = target_of(result, "n1")
    assert target.get("1g.5gb", 0) >= 1
    where = around(n1, n1.gpus[0])
    assert where is not None
    moved = reach(GEO, where, target)
    assert moved is not None
    assert moved.keep == (where[1][0],) and moved.destroy == ()
