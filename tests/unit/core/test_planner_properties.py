"""Hypothesis properties of the planner over random clusters: valid, deterministic, never worse than doing nothing."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migctl.core.cluster import Node, Pod, Snapshot
from migctl.core.geometry import geometry
from migctl.core.plan import Plan
from migctl.core.planner import plan
from migctl.core.settings import PlannerSettings
from tests.unit.builders import CATALOG, mig, node, vram

MODELS = ["a100-40gb", "h100-80gb", "a30-24gb", "h200-141gb"]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    seed = draw(st.integers(0, 2**32 - 1))
    rnd = random.Random(seed)
    nodes: list[Node] = []
    for i in range(draw(st.integers(1, 4))):
        model = CATALOG.model(rnd.choice(MODELS))
        geo = geometry(model)
        layouts = [dict(rnd.choice(geo.base_layouts)) for _ in range(rnd.randint(1, 3))]
        used = []
        for lay in layouts:
            u = {p: rnd.randint(0, c) for p, c in lay.items()} if rnd.random() < 0.4 else {}
            used.append({p: c for p, c in u.items() if c})
        unknown = rnd.random() < 0.2 and any(used)
        nodes.append(
            node(
                f"n{i}",
                model.id,
                layouts,
                used,
                usage_known=not unknown,
                gpu_pods=[(f"run/p{i}", rnd.randint(0, 2))] if any(used) else [],
            )
        )
    pods: list[Pod] = []
    for j in range(draw(st.integers(1, 14))):
        prio = rnd.choice([0, 0, 100, 1000])
        if rnd.random() < 0.5:
            pods.append(vram(f"v{j}", rnd.choice([3, 5, 7, 9, 15, 19, 30, 38, 60, 70, 120]), priority=prio))
        else:
            model = CATALOG.model(rnd.choice(MODELS))
            prof = rnd.choice(model.base_profiles).name
            pods.append(mig(f"m{j}", prof, count=rnd.choice([1, 1, 1, 2]), priority=prio))
    return Snapshot(tuple(nodes), tuple(pods))


def _check_valid(snap: Snapshot, result: Plan) -> None:
    nodes = {n.name: n for n in snap.nodes}
    for np in result.nodes:
        n = nodes[np.name]
        assert n.model is not None
        geo = geometry(n.model)
        for g in np.gpus:
            gpu = n.gpus[g.index]
            if g.target.mig_enabled:
                assert g.target.layout, "MIG-enabled GPU with zero instances"
                assert geo.is_valid(g.target.layout)
            if g.changed:
                assert gpu.busy is False, "changed a GPU that is busy or whose usage is unknown"
                assert not n.frozen_reason
    # every assignment has an instance: per GPU the target covers it; per node the free pool covers the rest
    for np in result.nodes:
        n = nodes[np.name]
        per_gpu: dict[int | None, Counter[str]] = {}
        for a in result.assignments:
            if a.node == np.name:
                per_gpu.setdefault(a.gpu, Counter())[a.profile] += 1
        for g in np.gpus:
            want = per_gpu.get(g.index, Counter())
            have = Counter(dict(g.target.layout))
            if not g.changed and n.gpus[g.index].used:
                have -= Counter(dict(n.gpus[g.index].used or {}))
            assert not (want - have), f"{np.name} gpu {g.index}: {dict(want)} not in {dict(have)}"
        pool = per_gpu.get(None, Counter())
        assert not (pool - Counter(dict(n.mig_free)))
    placed = Counter(a.pod for a in result.assignments)
    units = {p.key: p.units for p in snap.pods}
    assert all(placed[k] == units[k] for k in placed), "a pod was placed partially"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_plans_are_valid(snap: Snapshot) -> None:
    _check_valid(snap, plan(snap))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_plans_with_evictions_are_valid(snap: Snapshot) -> None:
    result = plan(snap, PlannerSettings(evictions="lower-priority"))
    assert len(result.evictions) <= 10
    placed_prio = {p.key: p.priority for p in snap.pods}
    for e in result.evictions:
        assert e.priority < placed_prio[e.for_pod]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots(), st.randoms())
def test_plans_are_deterministic(snap: Snapshot, rnd: random.Random) -> None:
    first = plan(snap).to_dict()
    nodes, pods = list(snap.nodes), list(snap.pods)
    rnd.shuffle(nodes)
    rnd.shuffle(pods)
    assert plan(Snapshot(tuple(nodes), tuple(pods))).to_dict() == first


def _placed_by_priority(result: Plan, snap: Snapshot) -> list[int]:
    prio = {p.key: p.priority for p in snap.pods}
    placed = {a.pod for a in result.assignments}
    levels = sorted({p.priority for p in snap.pods}, reverse=True)
    return [sum(1 for k in placed if prio[k] == lv) for lv in levels]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snapshots())
def test_never_worse_than_doing_nothing(snap: Snapshot) -> None:
    """Objective 1 of the plan is at least that of leaving every layout as it is."""
    frozen = Snapshot(tuple(Node(**{**n.__dict__, "frozen_reason": "test: no changes"}) for n in snap.nodes), snap.pods)
    assert _placed_by_priority(plan(snap), snap) >= _placed_by_priority(plan(frozen), snap)
