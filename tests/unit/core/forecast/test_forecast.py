"""The demand forecast, the completion it prefers, and pre-shaping without thrash (docs/planning.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from pydantic import ValidationError

from migctl.core.forecast.estimate import forecast
from migctl.core.forecast.spare import Completions
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import Gpu, Node, Pod, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Plan
from migctl.core.model.settings import ForecastPrior, PlannerSettings, PriorClass
from migctl.core.planner import plan
from tests.unit.builders import CATALOG, mig, node, vram

H100 = "h100-80gb"


def running(pod: Pod, where: str = "busy") -> Pod:
    return replace(pod, node=where, phase="Running")


def at(pod: Pod, t: int) -> Pod:
    return replace(pod, created=f"2026-12-01T08:{t:02d}:00Z")


def test_forecast_weighs_pods_by_recency_of_creation() -> None:
    # newest first: a pending 15 GiB pod (r=0), two running 7 GiB pods created together (r=1), a 30 GiB (r=3)
    pods = [
        at(vram("new", 15), 9),
        running(at(vram("a", 7), 5)),
        running(at(vram("b", 6), 5)),
        running(at(vram("old", 30), 1)),
        at(vram("done", 7), 0),
    ]
    pods[-1] = replace(pods[-1], phase="Succeeded")  # finished pods are no demand
    snap = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), tuple(pods))
    fc = forecast(snap, PlannerSettings(forecast_half_life_pods=1))
    mf = fc.of(H100)
    assert mf is not None and fc.pods_read == 4
    by = {c.profile: c for c in mf.classes}
    assert set(by) == {"1g.10gb", "1g.20gb", "3g.40gb"}  # the smallest profile each request takes on an H100
    total = 1 + 0.5 + 0.5 + 0.125
    assert by["1g.20gb"].share == pytest.approx(1 / total)
    assert by["1g.10gb"].share == pytest.approx(1 / total)
    assert by["3g.40gb"].share == pytest.approx(0.125 / total)
    assert by["1g.10gb"].need_mib == (7 + 6) * 1024 // 2  # mean real need of the class
    assert [c.profile for c in mf.classes] == ["3g.40gb", "1g.20gb", "1g.10gb"]  # largest first


def test_forecast_prior_counts_as_pods_of_evidence_and_exact_profiles_stay_exact() -> None:
    prior = ForecastPrior(
        name="inference", classes=(PriorClass(vram="7Gi", weight=3), PriorClass(profile="2g.20gb")), pods=4
    )
    snap = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (at(mig("p", "3g.40gb"), 1),))
    fc = forecast(snap, PlannerSettings(forecast_prior=prior))
    mf = fc.of(H100)
    assert mf is not None and fc.prior == "inference" and mf.evidence == pytest.approx(5)
    by = {c.key: c for c in mf.classes}
    assert by[("p", "3g.40gb")].share == pytest.approx(1 / 5)
    assert by[("p", "2g.20gb")].share == pytest.approx(1 / 5)
    assert by[("v", CATALOG.model(H100).profile("1g.10gb").memory_mib)].share == pytest.approx(3 / 5)
    assert by[("p", "2g.20gb")].accepts == ("2g.20gb",)  # an exact request takes only its profile
    assert "inference" in fc.describe()[0]


def test_prior_class_needs_exactly_one_kind() -> None:
    with pytest.raises(ValidationError, match="exactly one"):
        PriorClass(profile="1g.10gb", vram="7Gi")


def _served_slots(target: dict[str, int], gib: float) -> int:
    """Instances of `target` that a pod of `gib` fits in."""
    m = CATALOG.model(H100)
    return sum(c for p, c in target.items() if m.profile(p).memory_mib >= gib * 1024)


def test_completion_follows_the_forecast_not_the_largest_free_instances() -> None:
    # the issue's case: one 7 GiB pod on an idle H100; recent pods were all small
    history = [running(at(vram(f"h{i}", 7), i)) for i in range(20)]
    snap = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (*history, at(vram("p", 7), 30)))
    (gp,) = plan(snap).nodes[0].gpus
    target = dict(gp.target.layout)
    assert _served_slots(target, 7) == 7  # 6 x 1g.10gb + 1g.20gb: seven pods of the mix, not four
    assert target != {"1g.10gb": 2, "1g.20gb": 1, "4g.40gb": 1}  # the old usefulness tie-break's choice
    # the same pod when recent pods needed 35 GiB: the spare room keeps instances they fit in
    history = [running(at(vram(f"h{i}", 35), i)) for i in range(20)]
    snap = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (*history, at(vram("p", 7), 30)))
    (gp,) = plan(snap).nodes[0].gpus
    assert _served_slots(dict(gp.target.layout), 35) >= 1


def test_forecast_off_plans_for_the_snapshots_pods_alone() -> None:
    # `planner.forecast: false` is the objective the exact reference proves: the same pod and history as above
    # get the layout of least stranded memory now, and the plan equals one for a snapshot without the history
    history = [running(at(vram(f"h{i}", 7), i), "elsewhere") for i in range(20)]
    with_history = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (*history, at(vram("p", 7), 30)))
    alone = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (at(vram("p", 7), 30),))
    off = PlannerSettings(forecast=False)
    assert forecast(with_history, off).models == {}
    (gp,) = plan(with_history, off).nodes[0].gpus
    assert _served_slots(dict(gp.target.layout), 7) < 7
    assert plan(with_history, off).summary.stranded_mib_after < plan(with_history).summary.stranded_mib_after
    assert plan(with_history, off).nodes == plan(alone, off).nodes


def test_spare_value_ranks_the_issue_example() -> None:
    history = [running(at(vram(f"h{i}", 7), i)) for i in range(20)]
    mf = forecast(Snapshot((node("n", H100, [{"7g.80gb": 1}]),), tuple(history))).of(H100)
    comp = Completions(geometry(CATALOG.model(H100)), mf)
    many = comp.served({"1g.10gb": 5, "1g.20gb": 1})
    few = comp.served({"1g.10gb": 1, "1g.20gb": 1, "4g.40gb": 1})
    # the pods the spare instances hold, each at its need plus a GPU's memory per pod (a pod counts as a pod)
    per_pod = 7 * 1024 + comp.pod_mib
    assert many == round(6 * per_pod) and few == round(3 * per_pod)


def _applied(snap: Snapshot, result: Plan) -> Snapshot:
    """The snapshot once the plan's layouts are in place (the pods stay where they were)."""
    nodes = []
    for n in snap.nodes:
        (npl,) = [p for p in result.nodes if p.name == n.name]
        gpus = tuple(Gpu(g.index, g.target, dict(o.used or {}), False) for g, o in zip(npl.gpus, n.gpus, strict=True))
        nodes.append(replace(n, gpus=gpus))
    return replace(snap, nodes=tuple(nodes))


def test_idle_gpu_is_preshaped_once_and_the_same_snapshot_never_reshapes_twice() -> None:
    busy = node("busy", H100, [{"1g.10gb": 7}], used=[{"1g.10gb": 7}])
    idle = node("idle", H100, [{"7g.80gb": 1}])
    history = [running(at(vram(f"h{i}", 7), i)) for i in range(24)]
    snap = Snapshot((busy, idle), tuple(history))
    assert plan(snap).summary.gpus_reconfigured == 0  # by default a quiet node is not paused for the forecast
    quiet = PlannerSettings(preshape_quiet_nodes=True)
    first = plan(snap, quiet)
    (gp,) = next(n for n in first.nodes if n.name == "idle").gpus
    assert gp.changed and _served_slots(dict(gp.target.layout), 7) == 7
    assert first.summary.gpus_reconfigured == 1
    again = plan(_applied(snap, first), quiet)
    assert again.summary.gpus_reconfigured == 0  # its layout is the forecast's best now: nothing to gain
    assert plan(snap, quiet) == first  # and the same snapshot gives the same plan
    cold = Snapshot((busy, idle), tuple(history[-8:]))  # 8 pods are less than half a window (32): no bet yet
    assert plan(cold, quiet).summary.gpus_reconfigured == 0


def test_preshaping_needs_a_gain_that_pays_for_the_pause() -> None:
    history = [running(at(vram(f"h{i}", 7), i)) for i in range(24)]
    busy = node("busy", H100, [{"1g.10gb": 7}], used=[{"1g.10gb": 7}])
    # 5 x 1g.10gb + 1g.20gb holds six of the seven pods a GPU's worth of the mix brings: one pod more to gain
    near = node("near", H100, [{"1g.10gb": 5, "1g.20gb": 1}])
    quiet = PlannerSettings(preshape_quiet_nodes=True)
    assert plan(Snapshot((busy, near), tuple(history)), quiet).summary.gpus_reconfigured == 1
    higher = plan(Snapshot((busy, near), tuple(history)), quiet.model_copy(update={"preshape_min_gain": 0.3}))
    assert higher.summary.gpus_reconfigured == 0  # one more pod does not pay for a pause at 30% of the GPU
    same = node("same", H100, [{"1g.10gb": 7}])  # as many pods of the mix as the best layout: nothing to gain
    assert plan(Snapshot((busy, same), tuple(history)), quiet).summary.gpus_reconfigured == 0
    off = plan(
        Snapshot((busy, node("idle", H100, [{"7g.80gb": 1}])), tuple(history)),
        PlannerSettings(preshape=False, preshape_quiet_nodes=True),
    )
    assert off.summary.gpus_reconfigured == 0


def test_preshaping_leaves_busy_frozen_and_unknown_gpus_alone() -> None:
    history = tuple(running(at(vram(f"h{i}", 7), i)) for i in range(24))
    for n in (
        node("f", H100, [{"7g.80gb": 1}], frozen="mig.config.state pending"),
        node("u", H100, [{"7g.80gb": 1}], usage_known=False),
        node("x", H100, [{"7g.80gb": 1}], labels={"migctl.io/exclude": "true"}),
        node("b", H100, [{"7g.80gb": 1}], used=[{"7g.80gb": 1}]),
    ):
        quiet = PlannerSettings(preshape_quiet_nodes=True)
        assert plan(Snapshot((n,), history), quiet).summary.gpus_reconfigured == 0, n.name


def test_regroup_keeps_the_pods_and_serves_them_from_the_target() -> None:
    history = [running(at(vram(f"h{i}", 7), i)) for i in range(20)]
    pods = [at(vram(f"p{i}", 15), 40 + i) for i in range(3)]
    snap = Snapshot((node("n", H100, [{"7g.80gb": 1}]),), (*history, *pods))
    result = plan(snap)
    assert result.summary.pods_placed == 3
    (gp,) = result.nodes[0].gpus
    target = dict(gp.target.layout)
    assert geometry(CATALOG.model(H100)).is_valid(gp.target.layout)
    used: dict[str, int] = {}
    for a in result.assignments:
        used[a.profile] = used.get(a.profile, 0) + 1
    assert all(target.get(p, 0) >= c for p, c in used.items())
    # three 20 GB instances on one compute slice each leave four slices for small pods, not one
    assert _served_slots(target, 7) - 3 >= 2


def test_gpu_config_of_a_whole_gpu_is_never_preshaped() -> None:
    n = Node("w", model=CATALOG.model(H100), gpus=(Gpu(0, GpuConfig.disabled(), None, False),))
    history = tuple(running(at(vram(f"h{i}", 7), i)) for i in range(24))
    assert plan(Snapshot((n,), history)).summary.gpus_reconfigured == 0
