"""The plan's figures and its objective key, each written once: `Summary.of`, `Plan.revised`, `Plan.key`, and
`Node.may_reconfigure`, the one rule of whether migctl may reshape a node."""

from __future__ import annotations

import pytest

from migctl.core.exact.model import node_models
from migctl.core.exact.state import _State
from migctl.core.forecast.over_time import _reshapable
from migctl.core.model.cluster import Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Assignment, GpuPlan, NodePlan, Plan, Summary, Unplaced, assignment_order
from migctl.core.model.settings import PlannerSettings
from migctl.core.objective import rank
from migctl.core.planner import plan
from migctl.core.vram.offers import offers_from_snapshot
from tests.unit.builders import mig, node

ONE_G = GpuConfig.mig({"1g.10gb": 7})
BIG = GpuConfig.mig({"3g.40gb": 2})
NODES = (
    NodePlan("n1", (GpuPlan(0, "h100-80gb", ONE_G, BIG, 1000, 200), GpuPlan(1, "h100-80gb", ONE_G, ONE_G, 300, 300))),
    NodePlan("n2", (GpuPlan(0, "h100-80gb", ONE_G, ONE_G, 40, 40),)),
)
ASSIGNMENTS = (
    Assignment("ns/b", "n2", 0, "1g.10gb", 9984, 9884),  # 100 MiB waste
    Assignment("ns/m", "n1", 0, "3g.40gb", 40192, 40192),  # a pod of two instances: one pod placed
    Assignment("ns/m", "n1", 1, "1g.10gb", 9984, 9934),  # 50 MiB waste
)


def _plan(running_waste: int = 77) -> Plan:
    summary = Summary.of(NODES, ASSIGNMENTS, pending_pods=3, running_waste_mib=running_waste, evictions=0)
    return Plan(summary, NODES, ASSIGNMENTS, (Unplaced("ns/c", "no room"),), ())


def test_summary_of_is_the_plan_formats_formula() -> None:
    """docs/plan-format.md: stranded MiB count every GPU's unusable MiB and running pods' waste, after also the
    placed pods' waste; `unusable_mib` and the counts only the GPUs whose layout changes."""
    assert _plan().summary == Summary(
        pending_pods=3,
        pods_placed=2,
        stranded_mib_before=1000 + 300 + 40 + 77,
        stranded_mib_after=200 + 300 + 40 + 77 + 150,
        internal_waste_mib=150,
        unusable_mib=200,
        evictions=0,
        gpus_reconfigured=1,
        nodes_reconfigured=1,
    )


def test_a_revision_recomputes_the_summary_and_keeps_running_pods_waste() -> None:
    base = _plan()
    assert base.running_waste_mib == 77
    recut = GpuPlan(0, "h100-80gb", ONE_G, BIG, 40, 200)
    nodes = (NODES[0], NodePlan("n2", (recut,)))
    moved = (Assignment("ns/b", "n2", 0, "3g.40gb", 40192, 9884), *ASSIGNMENTS[1:])
    got = base.revised(nodes, reversed(moved))
    assert got.summary == Summary.of(nodes, moved, pending_pods=3, running_waste_mib=77, evictions=0)
    assert got.summary.unusable_mib == 400 and got.summary.internal_waste_mib == 50 + 30308
    assert got.assignments == tuple(sorted(moved, key=assignment_order))
    assert got.unplaced == base.unplaced and got.running_waste_mib == 77
    assert base.revised(nodes, moved, ()).unplaced == ()


def test_the_key_ranks_priority_tiers_before_the_count_of_pods() -> None:
    """`Plan.key` is the objective (`rank` is it); `Plan.objective()` is its untiered projection."""
    high = Plan(Summary.of((), (), pending_pods=3, running_waste_mib=0, evictions=0), (), (), (), ())
    one = (Assignment("ns/vip", "n1", 0, "1g.10gb", 9984, 9984),)
    two = (Assignment("ns/a", "n1", 0, "1g.10gb", 9984, 9984), Assignment("ns/b", "n1", 1, "1g.10gb", 9984, 0))
    vip, many = high.revised((), one), high.revised((), two)
    snap = Snapshot((), (mig("vip", "1g.10gb", priority=10), mig("a", "1g.10gb"), mig("b", "1g.10gb")))
    prio = {p.key: p.priority for p in snap.pods}
    assert vip.key(prio) < many.key(prio)  # one pod of the higher tier beats two of the lower
    assert vip.key(prio) == ((-1, 0), 0, 0, 0, 0) and many.key(prio) == ((0, -2), 9984, 0, 0, 0)
    assert rank(vip, snap) == vip.key(prio)
    assert vip.objective() == (1, 0) and many.objective() == (2, 9984)  # untiered: the pair the bench reports


def test_the_exact_solvers_plan_counts_pods_of_several_instances_as_placed() -> None:
    """An exact state that changes nothing gives back its base plan, summary included (it once counted only the
    pods of one instance as placed: `pods_placed` 1 here instead of 2)."""
    snap = Snapshot(
        (node("n1", "h100-80gb", [{"3g.40gb": 2}, {"1g.10gb": 7}]), node("n2", "h100-80gb", [{"1g.10gb": 7}])),
        (mig("b", "1g.10gb"), mig("m", "3g.40gb", 2)),
    )
    base = plan(snap)
    assert base.summary.pods_placed == 2 and len(base.assignments) == 3
    assert _State.of(snap, base, snap.pending).plan() == base


@pytest.mark.parametrize(
    ("labels", "frozen", "exclude", "may"),
    [
        ({}, "", "migctl.io/exclude", True),
        ({"migctl.io/exclude": "true"}, "", "migctl.io/exclude", False),
        ({"migctl.io/exclude": "yes"}, "", "migctl.io/exclude", True),
        ({}, "migctl is reconfiguring it", "migctl.io/exclude", False),
        ({"migctl.io/exclude": "true"}, "", "example.com/skip", True),
        ({"example.com/skip": "true"}, "", "example.com/skip", False),
    ],
)
def test_may_reconfigure_is_one_rule_for_the_planner_the_exact_model_the_forecast_and_the_webhook(
    labels: dict[str, str], frozen: str, exclude: str, may: bool
) -> None:
    settings = PlannerSettings(exclude_label=exclude)
    n = node("n1", "h100-80gb", [{"1g.10gb": 7}], labels=labels, frozen=frozen)
    assert n.may_reconfigure(settings) is may
    snap = Snapshot((n,), (mig("big", "7g.80gb"),))
    assert bool(plan(snap, settings).assignments) is may  # the planner reshapes the idle GPU, or leaves it
    (nm,) = node_models([n], settings)
    assert bool(nm.classes) is may
    assert _reshapable(n, n.gpus[0], settings) is may
    ((offer,),) = [o.nodes for o in offers_from_snapshot(snap, settings)]
    assert offer.idle == (1 if may else 0)
