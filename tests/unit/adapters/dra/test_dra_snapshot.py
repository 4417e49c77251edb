"""A DRA cluster read into the planner's snapshot (adapters/dra/snapshot.py), then one reconcile step on it: which
nodes are DRA nodes and in which mode, what their GPUs hold, a claim's demand, the pods a bad claim costs, and the
fences the step picks on a DynamicMIG node. The objects are NVIDIA's shapes (tests/nvidia_slices.py); no cluster."""

from __future__ import annotations

from typing import Any

from migctl.adapters.objects import read_cluster
from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import Placement
from migctl.core.planner import plan
from migctl.reconcile.decide import Windows
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.paths import DYNAMIC_MIG, path_of
from migctl.reconcile.step import Clock, DraFacts, Facts, step
from migctl.wire.names import ACTUATION, IN_PLACE
from tests.nvidia_slices import device_classes, node_slices

CATALOG = load_catalog()
A100 = CATALOG.model("a100-40gb")
Obj = dict[str, Any]


def node(name: str, **labels: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(labels)},
            "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}}}  # fmt: skip


def template(name: str, expression: str, cls: str = "mig.nvidia.com") -> Obj:
    req = {"name": "gpu", "exactly": {"deviceClassName": cls, "selectors": [{"cel": {"expression": expression}}]}}
    meta = {"name": name, "namespace": "ns"}
    spec = {"spec": {"devices": {"requests": [req]}}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": meta, "spec": spec}


def claim_pod(name: str, tmpl: str, created: str = "2026-12-07T10:00:00Z") -> Obj:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}", "creationTimestamp": created},
        "spec": {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": tmpl}],
                 "containers": [{"name": "c", "resources": {"claims": [{"name": "gpu"}]}}]},
        "status": {"phase": "Pending",
                   "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
    }  # fmt: skip


def profile(p: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{p}'"


def cluster(mode: str, *pods: Obj, labels: dict[str, str] | None = None) -> list[Obj]:
    seven = [Placement("1g.5gb", s, 1) for s in range(7)]
    layouts = [seven, seven] if mode == "static" else None
    kw: dict[str, Any] = {"static_layouts": layouts} if layouts else {}
    return [node("n1", **(labels or {})), *node_slices("n1", A100, 2, mode=mode, **kw), *device_classes(A100),
            template("small", profile("1g.5gb")), template("big", profile("7g.40gb")),
            template("bad", "device.attributes['gpu.nvidia.com'].profile.startsWith('1g')"), *pods]  # fmt: skip


def test_a_dynamic_mig_node_is_a_dra_node_whose_gpus_hold_only_their_allocated_partitions() -> None:
    snap, dra = read_cluster(cluster("dynamic", claim_pod("a", "small")), CATALOG)
    (n,) = snap.nodes
    assert n.dra == "dynamic" and n.in_place and not n.frozen_reason and n.model is not None
    assert [g.index for g in n.gpus] == [0, 1] and all(g.config.mig_enabled and not g.config.layout for g in n.gpus)
    assert not n.mig_free  # nothing is made before a claim is allocated
    (pod,) = snap.pending
    assert [(d.kind, d.profile) for d in pod.gpu] == [("profile", "1g.5gb")]
    assert set(dra.queue) == {"ns/a"} and dra.pools["n1"].mode.value == "dynamic"
    assert path_of(n.labels, ControllerSettings().in_place_selector, n.dra) is DYNAMIC_MIG


def test_a_static_node_is_frozen_unless_migctls_agent_runs_there() -> None:
    snap, _ = read_cluster(cluster("static"), CATALOG)
    (n,) = snap.nodes
    assert n.dra == "static" and f"{ACTUATION}={IN_PLACE}" in n.frozen_reason
    assert n.mig_free == {"1g.5gb": 14} and all(g.instances and len(g.instances) == 7 for g in n.gpus)
    opted, _ = read_cluster(cluster("static", labels={ACTUATION: IN_PLACE}), CATALOG)
    assert not opted.nodes[0].frozen_reason


def test_a_claim_migctl_cannot_read_costs_only_its_pod() -> None:
    snap, _ = read_cluster(cluster("dynamic", claim_pod("a", "small"), claim_pod("b", "bad")), CATALOG)
    assert [p.key for p in snap.pending] == ["ns/a"]
    ((key, why),) = snap.rejected
    assert key == "ns/b" and "startsWith" in why  # the expression, never guessed


def test_a_pod_whose_template_does_not_exist_is_rejected_naming_the_field() -> None:
    snap, _ = read_cluster(cluster("dynamic", claim_pod("a", "nowhere")), CATALOG)
    ((key, why),) = snap.rejected
    assert key == "ns/a" and "resourceClaimTemplateName" in why and "ns/nowhere" in why


def _step(objects: list[Obj], fences: dict[str, tuple[str, ...]] | None = None) -> Any:
    snap, dra = read_cluster(objects, CATALOG)
    settings = ControllerSettings(batch_stable_s=0, batch_max_s=0)
    facts = Facts(
        snap, {"n1": NodeFacts("n1", dra="dynamic")},
        dra=DraFacts(dra.pools, dra.classes, dra.queue, dra.allocated, fences if fences is not None else dra.fences),
    )  # fmt: skip
    return step(facts, Windows(settings), settings, Clock.at(1_800_000_000.0), plan)


def test_the_step_fences_first_fits_bad_choices_on_a_dynamic_mig_node() -> None:
    # 3g, 4g, 3g, 4g on two A100s (a 4g.20gb only at slice 0): first fit puts the first 3g at slice 0 of GPU 0, so
    # the second 4g finds no place; the plan puts a 4g at 0 and a 3g at 4 on each GPU, and the fences keep the
    # 3g claims off slice 0
    pods = [claim_pod(f"p{i}", t, f"2026-12-07T10:00:0{i}Z") for i, t in enumerate(["mid", "large", "mid", "large"])]
    objects = [*cluster("dynamic", *pods), template("mid", profile("3g.20gb")), template("large", profile("4g.20gb"))]
    out = _step(objects)
    assert not out.actions  # a DynamicMIG node is never started: the driver makes the partitions
    fence = out.fences["n1"]
    assert len(out.plan.assignments) == 4 and not out.plan.unplaced
    assert fence.add and all("3g20gb" in d and d.endswith("-0") for d in fence.add)  # 3g at slice 0, fenced
    chosen = [o for o in fence.prediction.outcomes if hasattr(o, "devices")]
    assert len(chosen) == 4 and not fence.bad  # with the fences, first fit places all four, as the plan does
    unfenced = plan_fences_off(objects)
    assert len([o for o in unfenced.outcomes if hasattr(o, "devices")]) == 3  # first fit alone strands the last 4g


def plan_fences_off(objects: list[Obj]) -> Any:
    from migctl.core.dra.firstfit import predict

    snap, dra = read_cluster(objects, CATALOG)
    queue = [dra.queue[p.key] for p in sorted(snap.pending, key=lambda p: p.created)]
    return predict([dra.pools["n1"]], queue, dra.classes, allocated=dra.allocated)


def test_without_pending_demand_no_fence_is_kept() -> None:
    out = _step(cluster("dynamic"), {"n1": ("gpu-0-mig-1g5gb-19-0",)})
    assert out.fences["n1"].lift == ("gpu-0-mig-1g5gb-19-0",) and not out.fences["n1"].fenced
