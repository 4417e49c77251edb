"""The VRAM decision follows the planner's rules: the per-container instance rule (`demand.shared_instances`), the
placement filter (`static_misfit`, taints and cordon included), the exact geometry, and a cost per GPU class."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import pytest

from migctl.adapters.pod_rewrite import apply
from migctl.adapters.pods import placement_from_object, pod_from_object
from migctl.adapters.requests import vram_asks, vram_containers
from migctl.adapters.views import pod_view
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import GpuDemand, Node, Snapshot, Taint
from migctl.core.model.demand import effective_requests, profiles_for, shared_instances
from migctl.core.model.placement import NodeIndex
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram import offers as offers_module
from migctl.core.vram.decide import VramDecision, VramRules, decide
from migctl.core.vram.offers import NodeOffer, OfferIndex, gpus_needed, node_capacity, offers_from_snapshot
from tests.unit.builders import node

CATALOG = load_catalog()
H100 = CATALOG.model("h100-80gb")
PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def seen(p: dict[str, Any]) -> tuple[Mapping[str, str], str]:
    """What the webhook's decision reads of the Pod object, as the adapter reads it (`adapters.views.pod_view`)."""
    v = pod_view(p)
    return v.annotations, v.scheduler_name


def c(name: str, vram: str | None, **extra: Any) -> dict[str, Any]:
    res = {"limits": {"migctl.io/vram": vram}} if vram else {"limits": {"cpu": "1"}}
    return {"name": name, "image": "x", "resources": res, **extra}


def pod(apps: list[dict[str, Any]], inits: list[dict[str, Any]] = (), **spec: Any) -> dict[str, Any]:  # type: ignore[assignment]
    body: dict[str, Any] = {"containers": apps, **spec}
    if inits:
        body["initContainers"] = list(inits)
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ns"}, "spec": body}


def h100_nodes(*nodes: Node) -> OfferIndex:
    return OfferIndex(offers_from_snapshot(Snapshot(tuple(nodes), ())))


def decide_on(p: dict[str, Any], index: OfferIndex, **kw: Any) -> VramDecision:
    """The decision on the pod's containers and placement as the adapter reads them (as the webhook does)."""
    return decide(*seen(p), vram_asks(p, "migctl.io/vram"), placement_from_object(p), index, **kw)


# -- the per-container rule -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inits", "apps", "sizes", "where"),
    [
        ([], [5], [5], [0]),
        ([], [5, 7], [5, 7], [0, 1]),  # app containers run side by side: one instance each
        ([(70, False)], [5], [70], [0, 0]),  # a plain init container shares the app's instance, which grows
        ([(3, False)], [5, 9], [5, 9], [1, 0, 1]),  # ... the largest later one
        ([(70, False), (8, False)], [0], [70], [0, 0, -1]),  # init containers alone share one of their own
        ([(4, True)], [5], [4, 5], [0, 1]),  # a sidecar runs alongside: its own instance
        ([(4, True), (70, False)], [], [4, 70], [0, 1]),  # an init after a sidecar runs next to it
        ([(70, False), (4, True)], [], [70], [0, 0]),  # an init before a sidecar hands its instance on
    ],
)
def test_shared_instances(inits: list[tuple[int, bool]], apps: list[int], sizes: list[int], where: list[int]) -> None:
    assert shared_instances(inits, apps) == (sizes, where)


def _random_pod(rng: random.Random) -> dict[str, Any]:
    def size() -> str | None:
        return rng.choice([None, "3Gi", "5Gi", "9Gi", "15Gi", "30Gi", "39Gi", "70Gi"])

    inits = [c(f"i{k}", size(), **({"restartPolicy": "Always"} if rng.random() < 0.4 else {})) for k in range(3)]
    apps = [c(f"a{k}", size()) for k in range(rng.randint(1, 3))]
    return pod(apps, inits[: rng.randint(0, 3)])


def test_webhook_and_planner_count_the_same_instances() -> None:
    """For any mix of app, init and sidecar containers: the instances the rewritten pod holds (Kubernetes'
    effective request of the MIG resources the webhook writes) are the planner's demand for the original pod."""
    index = h100_nodes(node("n", "h100-80gb", [{}] * 8, labels=PRODUCT))
    rng = random.Random(7)
    checked = 0
    for _ in range(300):
        p = _random_pod(rng)
        d = decide_on(p, index)
        if d.action != "rewrite":
            continue
        planner = Counter[str]()
        for dem in pod_from_object(p, PlannerSettings()).gpu:
            planner[profiles_for(H100, dem)[0].name] += dem.count
        rewritten = pod_from_object(apply(p, d), PlannerSettings())
        assert {x.profile: x.count for x in rewritten.gpu} == dict(planner) == dict(d.instances), p
        checked += 1
    assert checked > 200


def test_a_large_init_container_shares_the_app_instance() -> None:
    """70Gi init + 5Gi app: both get 7g.80gb, the pod holds one instance (not 1g.10gb and 7g.80gb)."""
    p = pod([c("app", "5Gi")], [c("load", "70Gi")])
    d = decide_on(p, h100_nodes(node("n", "h100-80gb", [{"7g.80gb": 1}], labels=PRODUCT)))
    assert [(x.name, x.profile) for x in d.choices] == [("app", "7g.80gb"), ("load", "7g.80gb")]
    assert d.instances == (("7g.80gb", 1),)
    assert (d.capacity, d.waste_mib) == ("free", H100.profile("7g.80gb").memory_mib - 70 * 1024)
    out = pod_from_object(apply(p, d), PlannerSettings())
    assert out.gpu == (GpuDemand("profile", 1, profile="7g.80gb"),)
    eff = effective_requests([{"x": 1}], [({"x": 1}, False)])  # type: ignore[dict-item]
    assert eff == {"x": 1}  # the Kubernetes rule the shared profile relies on


# -- the planner's placement filter ---------------------------------------------------------------------------


def test_taints_and_cordon_rule_nodes_out_like_the_planner() -> None:
    tainted = node("a-tainted", "h100-80gb", [{"1g.10gb": 7}], labels=PRODUCT, taints=(Taint("gpu", "x"),))
    cordoned = node("b-cordoned", "h100-80gb", [{"1g.10gb": 7}], labels=PRODUCT)
    cordoned = Node(**{**cordoned.__dict__, "unschedulable": True})
    busy = node("c-busy", "h100-80gb", [{"7g.80gb": 1}], [{"7g.80gb": 1}], labels=PRODUCT)
    index = h100_nodes(tainted, cordoned, busy)
    d = decide_on(pod([c("m", "7Gi")]), index)
    assert (d.capacity, d.node) == ("none", "")  # the free 1g.10gb instances are on nodes it cannot use
    tolerating = pod([c("m", "7Gi")], tolerations=[{"key": "gpu", "operator": "Exists"}])
    assert (decide_on(tolerating, index).capacity, decide_on(tolerating, index).node) == ("free", "a-tainted")
    alone = h100_nodes(tainted, cordoned)
    refused = decide_on(pod([c("m", "7Gi")]), alone)
    assert refused.action == "reject"
    assert "0/2 GPU nodes fit" in refused.reason
    assert "1 node is cordoned" in refused.reason
    assert "untolerated taint gpu=x:NoSchedule" in refused.reason


# -- the exact geometry ---------------------------------------------------------------------------------------


def test_plannable_means_a_valid_layout_not_a_slice_count() -> None:
    """2×4g.40gb fills the H100's 8 memory slices, but only one 4g.40gb fits on a GPU (geometry.is_valid)."""
    assert not geometry(H100).is_valid({"4g.40gb": 2})
    assert gpus_needed(H100, (("4g.40gb", 2),)) == 2
    assert gpus_needed(H100, (("3g.40gb", 2),)) == 1
    assert gpus_needed(H100, (("1g.10gb", 3), ("3g.40gb", 1), ("7g.80gb", 1))) == 2
    one, two = NodeOffer("one", idle=1, idle_mig=1), NodeOffer("two", idle=2, idle_mig=2)
    assert node_capacity(H100, one, {"4g.40gb": 2}) == "none"
    assert node_capacity(H100, two, {"4g.40gb": 2}) == "plannable"
    assert node_capacity(H100, one, {"3g.40gb": 2}) == "plannable"
    # 40400Mi: more than 3g.40gb (40320 MiB), so two such containers need two 4g.40gb on two idle GPUs
    p = pod([c("a", "40400Mi"), c("b", "40400Mi")])
    d = decide_on(p, h100_nodes(node("n", "h100-80gb", [{}], labels=PRODUCT)))
    assert (d.instances, d.capacity) == ((("4g.40gb", 2),), "none")
    d2 = decide_on(p, h100_nodes(node("n", "h100-80gb", [{}, {}], labels=PRODUCT)))
    assert d2.capacity == "plannable"


# -- the cost: per GPU class ----------------------------------------------------------------------------------


def test_nodes_in_one_capacity_state_are_one_class_and_pods_of_one_kind_one_decision(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = [node(f"n{i:03}", "h100-80gb", [{"1g.10gb": 7}] * 2, labels=PRODUCT) for i in range(50)]
    nodes += [node(f"m{i:03}", "h100-80gb", [{}] * 2, labels=PRODUCT) for i in range(50)]
    index = h100_nodes(*nodes)
    assert len(index.classes[0]) == 2
    calls = Counter[str]()
    real = NodeIndex.misfits

    def counting(self: NodeIndex, p: Any) -> Any:
        calls[p.key] += 1
        return real(self, p)

    monkeypatch.setattr(NodeIndex, "misfits", counting)
    capacity = Counter[tuple[object, ...]]()
    real_capacity = offers_module.node_capacity

    def counting_capacity(*a: Any) -> Any:
        capacity[a[1].name] += 1
        return real_capacity(*a)

    monkeypatch.setattr(offers_module, "node_capacity", counting_capacity)
    for i in range(200):
        p = pod([c("m", "7Gi" if i % 2 else "30Gi")])
        p["metadata"]["name"] = f"p{i}"
        d = decide_on(p, index)
        assert (d.capacity, d.node) == ("free" if i % 2 else "plannable", "n000" if i % 2 else "m000")
    assert sum(calls.values()) == 1  # one placement signature, one model: its nodes filtered once
    assert sum(capacity.values()) <= 4  # two pod kinds × two GPU classes


def test_containers_read_once_decide_as_the_pod_read_anew() -> None:
    """The adapter's `vram_containers` (None for a pod naming no VRAM) is what `decide` reads of the pod."""
    n1 = node("n1", "h100-80gb", [{"1g.10gb": 7}], labels=PRODUCT)
    index = h100_nodes(n1)
    pods = [
        pod([c("m", "7Gi")]),
        pod([c("m", None)]),
        pod([c("m", "5Gi"), c("n", "30Gi")], [c("i", "70Gi")]),
        pod([c("m", "7Gi")], [c("s", "4Gi", restartPolicy="Always")]),
        pod([{"name": "m", "resources": {"limits": {"migctl.io/vram": "7Gi", "nvidia.com/gpu": 1}}}]),
    ]
    rules = VramRules()
    for p in pods:
        containers = vram_containers(p, rules.resource)
        assert (containers is None) == (decide_on(p, index).reason == f"no {rules.resource} request")
        if containers is not None:
            assert decide(*seen(p), containers, placement_from_object(p), index) == decide_on(p, h100_nodes(n1))


@pytest.mark.parametrize("other", [True, 7.0, "7"])
def test_pods_of_equal_but_differently_typed_requests_are_not_one_kind(other: Any) -> None:
    """`7 == 7.0 == True` in Python: the kind's key holds the types, so each pod is decided as itself."""
    n1 = node("n1", "h100-80gb", [{"1g.10gb": 7}], labels=PRODUCT)
    index = h100_nodes(n1)
    first = pod([{"name": "m", "resources": {"limits": {"migctl.io/vram": 1 if other is True else 7}}}])
    second = pod([{"name": "m", "resources": {"limits": {"migctl.io/vram": other}}}])
    decide_on(first, index)
    assert decide_on(second, index) == decide_on(second, h100_nodes(n1))


def test_a_models_serving_is_shared_by_placements_and_never_by_models() -> None:
    """What a model serves a request with is remembered per model, for every placement that reaches it."""
    a100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}
    index = OfferIndex(
        offers_from_snapshot(
            Snapshot(
                (
                    node("h", "h100-80gb", [{"1g.10gb": 7}], labels={**PRODUCT, "pool": "h"}),
                    node("a", "a100-40gb", [{"1g.5gb": 7}], labels={**a100, "pool": "a"}),
                ),
                (),
            )
        )
    )
    on_h, on_a = pod([c("m", "4Gi")], nodeSelector={"pool": "h"}), pod([c("m", "4Gi")], nodeSelector={"pool": "a"})
    assert (decide_on(on_h, index).model, decide_on(on_a, index).model) == ("h100-80gb", "a100-40gb")
    assert [ch.profile for ch in decide_on(on_a, index).choices] == ["1g.5gb"]
    assert [ch.profile for ch in decide_on(on_h, index).choices] == ["1g.10gb"]


def test_the_planner_reads_a_vram_pod_as_its_instances() -> None:
    """Before: one instance of the effective sum (two 5Gi app containers = one 10Gi instance, which no container
    could use alone)."""
    s = PlannerSettings()
    assert pod_from_object(pod([c("a", "5Gi"), c("b", "5Gi")]), s).gpu == (GpuDemand("vram", 2, vram_mib=5120),)
    assert pod_from_object(pod([c("a", "5Gi")], [c("i", "70Gi")]), s).gpu == (GpuDemand("vram", 1, vram_mib=71680),)
    sidecar = c("s", "4Gi", restartPolicy="Always")
    assert pod_from_object(pod([c("a", "5Gi")], [sidecar]), s).gpu == (
        GpuDemand("vram", 1, vram_mib=4096),
        GpuDemand("vram", 1, vram_mib=5120),
    )
