"""Planner rules, state-transition style: a snapshot in, a plan out, one rule per test."""

from __future__ import annotations

import gc

import pytest

from migctl.core import planner as planner_module
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import Node, Pod, Requirement, Resources, Snapshot, Taint, Term
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import Planner, plan
from migctl.core.search import budgets
from tests.unit.builders import CATALOG, mig, node, tolerate, vram, whole

ALL_1G_H100 = {"1g.10gb": 7}
BALANCED_H100 = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}


def run(nodes: list[Node], pods: list[Pod], **settings: object) -> dict[str, object]:
    return plan(Snapshot(tuple(nodes), tuple(pods)), PlannerSettings(**settings)).to_dict()  # type: ignore[arg-type]


def assigned(result: dict[str, object]) -> dict[str, tuple[str, object, str]]:
    return {a["pod"]: (a["node"], a["gpu"], a["profile"]) for a in result["assignments"]}  # type: ignore[attr-defined]


def targets(result: dict[str, object], name: str) -> list[dict[str, int]]:
    (n,) = [n for n in result["nodes"] if n["name"] == name]  # type: ignore[attr-defined]
    return [g["target"] for g in n["gpus"]]


def test_idle_gpu_is_reshaped_for_a_profile_it_lacks() -> None:
    result = run([node("n1", "h100-80gb", [ALL_1G_H100])], [mig("big", "3g.40gb")])
    assert assigned(result) == {"ns/big": ("n1", 0, "3g.40gb")}
    (target,) = targets(result, "n1")
    assert target["3g.40gb"] >= 1
    assert geometry(CATALOG.model("h100-80gb")).is_valid(target)
    assert result["summary"]["gpus_reconfigured"] == 1  # type: ignore[index]


def test_existing_free_instance_is_used_without_reconfiguring() -> None:
    result = run([node("n1", "h100-80gb", [BALANCED_H100])], [mig("p", "2g.20gb")])
    assert assigned(result)["ns/p"][2] == "2g.20gb"
    assert result["summary"]["gpus_reconfigured"] == 0  # type: ignore[index]


def test_vram_demand_gets_the_smallest_profile_that_fits() -> None:
    result = run([node("n1", "h100-80gb", [BALANCED_H100])], [vram("a", 7), vram("b", 15)])
    got = assigned(result)
    assert got["ns/a"][2] == "1g.10gb"  # 9984 MiB covers 7 GiB
    assert got["ns/b"][2] == "2g.20gb"  # 1g.10gb is too small; 2g.20gb is the smallest that fits


def test_busy_gpu_is_never_changed_without_evictions() -> None:
    busy = node("n1", "h100-80gb", [ALL_1G_H100], used=[{"1g.10gb": 1}])
    result = run([busy], [mig("big", "3g.40gb")])
    assert result["assignments"] == []
    assert targets(result, "n1") == [ALL_1G_H100]


def test_unknown_usage_treats_every_gpu_as_busy() -> None:
    n = node("n1", "h100-80gb", [ALL_1G_H100, ALL_1G_H100], usage_known=False, gpu_pods=[("x/y", 0)])
    result = run([n], [mig("big", "3g.40gb"), mig("small", "1g.10gb")])
    assert set(assigned(result)) == {"ns/small"}  # served from the free pool, nothing reshaped
    assert assigned(result)["ns/small"][1] is None
    assert result["summary"]["gpus_reconfigured"] == 0  # type: ignore[index]


def test_higher_priority_is_placed_first_when_capacity_is_short() -> None:
    n = node("n1", "h100-80gb", [{"7g.80gb": 1}])
    result = run([n], [mig("low", "7g.80gb", priority=0), mig("high", "7g.80gb", priority=100)])
    assert set(assigned(result)) == {"ns/high"}


def test_lower_priority_is_evicted_only_when_allowed() -> None:
    n = node("n1", "h100-80gb", [ALL_1G_H100], usage_known=False, gpu_pods=[("ns/old", 0)])
    pods = [mig("urgent", "7g.80gb", priority=1000)]
    assert run([n], pods)["evictions"] == []
    result = run([n], pods, evictions="lower-priority")
    assert [e["pod"] for e in result["evictions"]] == ["ns/old"]  # type: ignore[attr-defined]
    assert assigned(result)["ns/urgent"][2] == "7g.80gb"


def test_a_pod_no_gpu_here_can_serve_frees_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """200 GiB on one GPU fits no model here: evicting a node's pods could not help, so no node is even tried
    (at 1,000 nodes each try rebuilt a node's GPUs, for every such pod)."""
    n = node("n1", "h100-80gb", [ALL_1G_H100], usage_known=False, gpu_pods=[("ns/old", 0)])
    tried: list[str] = []
    swap = planner_module.passes.Planner._swap_slots

    def counting(self: Planner, ns: object, new: object) -> object:
        tried.append(ns.node.name)  # type: ignore[attr-defined]
        return swap(self, ns, new)  # type: ignore[arg-type]

    monkeypatch.setattr(planner_module.passes.Planner, "_swap_slots", counting)
    result = run(
        [n], [vram("huge", 200, priority=1000), mig("urgent", "7g.80gb", priority=1000)], evictions="lower-priority"
    )
    assert [e["for_pod"] for e in result["evictions"]] == ["ns/urgent"]  # type: ignore[attr-defined]
    assert tried == ["n1"]  # for the pod a freed node can serve, and only for it


def test_equal_priority_is_never_evicted() -> None:
    n = node("n1", "h100-80gb", [ALL_1G_H100], usage_known=False, gpu_pods=[("ns/old", 1000)])
    result = run([n], [mig("urgent", "7g.80gb", priority=1000)], evictions="lower-priority")
    assert result["evictions"] == []
    assert result["assignments"] == []


def test_stranded_memory_decides_between_gpus() -> None:
    """A 7 GiB pod fits a free 3g.40gb on n1 (30 GiB wasted) or a reshaped idle GPU on n2: less stranded wins."""
    n1 = node("n1", "h100-80gb", [{"3g.40gb": 2}], used=[{"3g.40gb": 1}])
    n2 = node("n2", "h100-80gb", [{"7g.80gb": 1}])
    result = run([n1, n2], [vram("small", 7)])
    assert assigned(result)["ns/small"][:2] == ("n2", 0)
    assert assigned(result)["ns/small"][2] == "1g.10gb"


def test_reshaped_gpu_is_filled_before_another_is_touched() -> None:
    n = node("n1", "h100-80gb", [{"7g.80gb": 1}, {"7g.80gb": 1}])
    # pre-shaping would cut GPU 1 in the same relabel (test_forecast.py); here only the consolidation counts
    result = run([n], [vram(f"p{i}", 7) for i in range(5)], preshape=False)
    gpus = {a[1] for a in assigned(result).values()}
    assert gpus == {0}
    assert result["summary"]["gpus_reconfigured"] == 1  # type: ignore[index]


def test_plan_never_leaves_a_mig_gpu_empty_or_invalid() -> None:
    n = node("n1", "a100-40gb", [{"7g.40gb": 1}, {"1g.5gb": 7}])
    result = run([n], [mig("a", "3g.20gb"), vram("b", 4), vram("c", 9)])
    geo = geometry(CATALOG.model("a100-40gb"))
    for t in targets(result, "n1"):
        assert t, "a MIG-enabled GPU must keep at least one instance"
        assert geo.is_valid(t)


def test_node_selector_affinity_and_taints_are_honoured() -> None:
    tainted = node(
        "gpu-a", "h100-80gb", [{"7g.80gb": 1}], labels={"pool": "a"}, taints=[Taint("dedicated", "x", "NoSchedule")]
    )
    plain = node("gpu-b", "h100-80gb", [{"7g.80gb": 1}], labels={"pool": "b"})
    pods = [
        mig("sel", "3g.40gb", node_selector=(("pool", "a"),)),  # only gpu-a, whose taint it does not tolerate
        mig("tol", "3g.40gb", node_selector=(("pool", "a"),), tolerations=tolerate("dedicated", "x")),
        mig("aff", "3g.40gb", affinity=(Term((Requirement("pool", "NotIn", ("a",)),)),)),
    ]
    result = run([tainted, plain], pods)
    got = assigned(result)
    assert "ns/sel" not in got
    assert got["ns/tol"][0] == "gpu-a"
    assert got["ns/aff"][0] == "gpu-b"
    reasons = {u["pod"]: u["reason"] for u in result["unplaced"]}  # type: ignore[attr-defined]
    assert "untolerated taint dedicated=x:NoSchedule" in reasons["ns/sel"]


def test_cpu_shortage_blocks_a_node() -> None:
    small = node("n1", "h100-80gb", [{"7g.80gb": 1}], cpu_m=1000)
    pod = Pod("ns", "p", requests=Resources(4000, 0, 1), gpu=mig("x", "3g.40gb").gpu)
    result = run([small], [pod])
    assert result["assignments"] == []
    assert "insufficient cpu" in result["unplaced"][0]["reason"]  # type: ignore[index]


def test_frozen_node_is_not_reshaped() -> None:
    n = node("n1", "h100-80gb", [{"7g.80gb": 1}], frozen="reconfiguration in progress")
    result = run([n], [mig("p", "3g.40gb")])
    assert result["assignments"] == []
    assert "reconfiguration in progress" in result["unplaced"][0]["reason"]  # type: ignore[index]


def test_exclude_label_opts_a_node_out() -> None:
    n = node("n1", "h100-80gb", [{"7g.80gb": 1}], labels={"migctl.io/exclude": "true"})
    assert run([n], [mig("p", "3g.40gb")])["assignments"] == []


def test_whole_gpu_needs_mode_change_permission() -> None:
    n = node("n1", "h100-80gb", [{"7g.80gb": 1}])
    assert run([n], [whole("w")])["assignments"] == []
    result = run([n], [whole("w")], allow_mig_mode_change=True)
    assert assigned(result)["ns/w"] == ("n1", 0, "gpu")
    (g,) = result["nodes"][0]["gpus"]  # type: ignore[index]
    assert g["mig_enabled"] == {"current": True, "target": False}


def test_free_whole_gpu_serves_whole_gpu_demand() -> None:
    n = node("n1", "h100-80gb", [None, {"7g.80gb": 1}])
    result = run([n], [whole("w")])
    assert assigned(result)["ns/w"] == ("n1", 0, "gpu")


def test_a_whole_gpu_pod_left_out_is_told_none_is_free_once_the_last_is_taken() -> None:
    """One free MIG-disabled GPU, two whole-GPU pods, mode changes off: the second is told why, from the GPUs
    as the plan leaves them (the first took the free one)."""
    n = node("n1", "h100-80gb", [None, {"7g.80gb": 1}])
    result = run([n], [whole("a", priority=1), whole("b")])
    assert assigned(result)["ns/a"] == ("n1", 0, "gpu")
    (left,) = result["unplaced"]  # type: ignore[misc]
    assert left["reason"].startswith("needs a whole GPU with MIG disabled; none is free")  # type: ignore[index]


def test_profile_pod_with_annotation_counts_its_real_waste() -> None:
    n = node("n1", "a100-40gb", [{"1g.5gb": 7}])
    pod = mig("nb", "1g.5gb")
    annotated = Pod(pod.namespace, pod.name, gpu=pod.gpu, need_mib=3072)
    result = run([n], [annotated])
    assert result["summary"]["internal_waste_mib"] == CATALOG.model("a100-40gb").profile("1g.5gb").memory_mib - 3072  # type: ignore[index]


def test_running_pods_with_annotations_count_their_waste_on_their_own_node() -> None:
    """Stranded-before counts the running pods' waste, each against its own node's model (two models here)."""
    a40, h100 = CATALOG.model("a100-40gb"), CATALOG.model("h100-80gb")
    nodes = [node("a", "a100-40gb", [{"1g.5gb": 7}], [{"1g.5gb": 1}]), node("h", "h100-80gb", [{"1g.10gb": 7}])]
    running = [
        Pod("ns", "on-a", gpu=mig("x", "1g.5gb").gpu, node="a", need_mib=1024),
        Pod("ns", "on-h", gpu=mig("y", "1g.10gb").gpu, node="h", need_mib=2048),
        Pod("ns", "elsewhere", gpu=mig("z", "1g.10gb").gpu, node="gone", need_mib=2048),
    ]
    quiet = run(nodes, [])["summary"]["stranded_mib_before"]  # type: ignore[index]
    result = run(nodes, running)
    waste = a40.profile("1g.5gb").memory_mib - 1024 + h100.profile("1g.10gb").memory_mib - 2048
    assert result["summary"]["stranded_mib_before"] == quiet + waste  # type: ignore[index]


def test_multi_instance_pod_lands_on_one_node() -> None:
    n1 = node("n1", "h100-80gb", [{"7g.80gb": 1}])
    n2 = node("n2", "h100-80gb", [{"7g.80gb": 1}, {"7g.80gb": 1}])
    result = run([n1, n2], [mig("pair", "3g.40gb", count=3)])
    rows = [a for a in result["assignments"] if a["pod"] == "ns/pair"]  # type: ignore[attr-defined]
    assert len(rows) == 3
    assert {r["node"] for r in rows} == {"n2"}


def test_request_larger_than_any_gpu_gets_a_reason() -> None:
    result = run([node("n1", "a100-40gb", [{"7g.40gb": 1}])], [vram("huge", 200)])
    assert "largest MIG instance" in result["unplaced"][0]["reason"]  # type: ignore[index]


def test_unknown_profile_gets_a_reason() -> None:
    result = run([node("n1", "a100-40gb", [{"7g.40gb": 1}])], [mig("x", "1g.18gb")])
    assert "no GPU model in the cluster offers MIG profile 1g.18gb" in result["unplaced"][0]["reason"]  # type: ignore[index]


def test_summary_counts_are_consistent() -> None:
    n = node("n1", "h100-80gb", [ALL_1G_H100, {"7g.80gb": 1}])
    result = run([n], [mig("a", "3g.40gb"), vram("b", 7), vram("c", 30)])
    s = result["summary"]
    placed = {a["pod"] for a in result["assignments"]}  # type: ignore[attr-defined]
    assert s["pods_placed"] == len(placed)  # type: ignore[index]
    assert s["pending_pods"] == len(placed) + len(result["unplaced"])  # type: ignore[arg-type, index]
    waste = sum(a["instance_mib"] - a["need_mib"] for a in result["assignments"])  # type: ignore[attr-defined]
    assert s["internal_waste_mib"] == waste  # type: ignore[index]
    changed = [g for nd in result["nodes"] for g in nd["gpus"] if g["changed"]]  # type: ignore[attr-defined]
    assert s["gpus_reconfigured"] == len(changed)  # type: ignore[index]
    assert s["unusable_mib"] == sum(g["unusable_mib"]["target"] for g in changed)  # type: ignore[index]


@pytest.mark.parametrize("model", ["a100-40gb", "h100-80gb", "a30-24gb", "rtx-pro-6000-blackwell-96gb"])
def test_every_target_serves_its_assignments(model: str) -> None:
    m = CATALOG.model(model)
    full = {m.full_profile.name: 1}
    n = node("n1", model, [full, full])
    sizes = [4, 7, 11, 20, 30]
    result = run([n], [vram(f"p{i}", s) for i, s in enumerate(sizes)])
    for g in result["nodes"][0]["gpus"]:  # type: ignore[index]
        need: dict[str, int] = {}
        for a in result["assignments"]:  # type: ignore[attr-defined]
            if a["gpu"] == g["index"]:
                need[a["profile"]] = need.get(a["profile"], 0) + 1
        for prof, c in need.items():
            assert g["target"].get(prof, 0) >= c


def test_left_out_pod_goes_first_in_a_later_pass() -> None:
    """The greedy gives the first node (name order) to the big-GPU pod; the CPU-heavy pod then fits nowhere. A
    squeaky-wheel pass takes the left-out pod first, and both fit."""
    roomy = node("n1", "h100-80gb", [{"7g.80gb": 1}], cpu_m=16_000)
    tight = node("n2", "h100-80gb", [{"7g.80gb": 1}], cpu_m=2_000)
    big_gpu = Pod("ns", "big-gpu", requests=Resources(1_000, 0, 1), gpu=mig("x", "7g.80gb").gpu)
    big_cpu = Pod("ns", "big-cpu", requests=Resources(8_000, 0, 1), gpu=mig("y", "3g.40gb").gpu)
    got = assigned(run([roomy, tight], [big_gpu, big_cpu]))
    assert got["ns/big-cpu"][0] == "n1"
    assert got["ns/big-gpu"][0] == "n2"


def test_a_cpu_heavy_pod_goes_where_cpu_is_plentiful(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two one-GPU nodes, one short of CPU. The CPU-heavy high-priority pod takes the lean node's CPU in the
    greedy's name order, and no move of one pod gets it back (the roomy node's GPU is full of lower-priority
    pods): 8 of 14 land. Re-packing both nodes at once (the heavy pod trades places with light ones) lands all
    14; so does `balance-first`, which sends it where CPU and GPU memory stay evenly used in the first place."""
    lean = node("a-lean", "a100-40gb", [{"1g.5gb": 7}], cpu_m=8_000)
    roomy = node("b-roomy", "a100-40gb", [{"1g.5gb": 7}], cpu_m=64_000)
    heavy = Pod("ns", "heavy", 100, requests=Resources(8_000, 0, 1), gpu=vram("x", 4).gpu)
    light = [Pod("ns", f"light{i:02d}", requests=Resources(500, 0, 1), gpu=vram("x", 4).gpu) for i in range(13)]
    snap = Snapshot((lean, roomy), (heavy, *light))
    repacked = Planner(snap, strategy="stranded-first").run()
    assert len(repacked.assignments) == 14
    monkeypatch.setattr(budgets, "PASS_REPACK", 0)
    greedy = Planner(snap, strategy="stranded-first").run()
    assert len(greedy.assignments) == 8
    balanced = Planner(snap, strategy="balance-first").run()
    assert {a.pod: a.node for a in balanced.assignments}["ns/heavy"] == "b-roomy"
    assert len(balanced.assignments) == 14
    assert len(plan(snap).assignments) == 14


def test_pod_that_fits_one_model_is_not_crowded_out() -> None:
    """A 30 GiB pod fits an A100-40GB 7g or an H100 3g; the 3g.20gb pod fits only the A100. Both must land."""
    a100 = node("a100", "a100-40gb", [{"7g.40gb": 1}])
    h100 = node("h100", "h100-80gb", [{"7g.80gb": 1}])
    result = plan(Snapshot((a100, h100), (vram("flexible", 30), mig("rigid", "3g.20gb"))))
    placed = {a.pod: a.node for a in result.assignments}
    assert placed == {"ns/flexible": "h100", "ns/rigid": "a100"}


@pytest.mark.parametrize("enabled", [True, False])
def test_plan_pauses_the_garbage_collector_and_restores_it(enabled: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan() runs with the cyclic collector off (docs/planning.md) and leaves it as it found it, also on error."""
    seen: list[bool] = []
    real = planner_module.Planner.run

    def spy(self: Planner) -> object:
        seen.append(gc.isenabled())
        return real(self)

    monkeypatch.setattr(planner_module.Planner, "run", spy)
    (gc.enable if enabled else gc.disable)()
    try:
        run([node("n1", "h100-80gb", [ALL_1G_H100])], [mig("p", "1g.10gb")])
        assert seen == [False]
        assert gc.isenabled() is enabled
        monkeypatch.setattr(planner_module.Planner, "run", lambda self: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            run([node("n1", "h100-80gb", [ALL_1G_H100])], [mig("p", "1g.10gb")])
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
