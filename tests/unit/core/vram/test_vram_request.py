"""The VRAM-request decision (`migctl.core.vram.decide`): which profile, which model, affinity, rejections."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from migctl.adapters.pod_rewrite import apply
from migctl.adapters.pods import placement_from_object
from migctl.adapters.requests import vram_asks
from migctl.adapters.views import pod_view
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Gpu, Node, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.decide import CHOICE_ANNOTATION, VramDecision, VramRules, decide
from migctl.core.vram.offers import PRODUCT_LABEL, ModelOffer, NodeOffer, offers_from_snapshot

CATALOG = load_catalog()
H100 = CATALOG.model("h100-80gb")
A100_40 = CATALOG.model("a100-40gb")
A30 = CATALOG.model("a30-24gb")


def seen(p: dict[str, Any]) -> tuple[Mapping[str, str], str]:
    """What the webhook's decision reads of the Pod object, as the adapter reads it (`adapters.views.pod_view`)."""
    v = pod_view(p)
    return v.annotations, v.scheduler_name


def decide_(
    p: dict[str, Any],
    offers: list[ModelOffer],
    rules: VramRules | None = None,
    ns: dict[str, str] | None = None,
) -> VramDecision:
    """The decision with the pod's placement as the adapter reads it (as the webhook and `migctl plan` do)."""
    resource = (rules or VramRules()).resource
    return decide(*seen(p), vram_asks(p, resource), placement_from_object(p), offers, rules, ns)


def offer(model_id: str, *nodes: NodeOffer, product: str | None = None) -> ModelOffer:
    m = CATALOG.model(model_id)
    return ModelOffer(m, (product or m.gfd_products[0],), tuple(nodes) or (NodeOffer(f"{model_id}-n"),))


def pod(*containers: dict[str, Any], init: tuple[dict[str, Any], ...] = (), **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": list(containers), **({"initContainers": list(init)} if init else {}), **spec},
    }


def c(name: str = "main", vram: str | None = "7Gi", where: str = "limits", **res: str) -> dict[str, Any]:
    r: dict[str, Any] = dict(res)
    if vram is not None:
        r["migctl.io/vram"] = vram
    return {"name": name, "image": "x", "resources": {where: r}}


# -- leave alone ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "ns_labels", "why"),
    [
        (pod(c(vram=None, cpu="1")), None, "no migctl.io/vram request"),
        (pod(c(**{"nvidia.com/mig-1g.10gb": "1"})), None, "already names a GPU resource (nvidia.com/mig-1g.10gb)"),
        (pod(c(), init=(c("i", vram=None, **{"nvidia.com/gpu": "1"}),)), None, "already names a GPU resource"),
        (pod(c(), schedulerName="migctl"), None, "schedulerName: migctl"),
        (pod(c()), {"migctl.io/webhook": "disabled"}, "the namespace is labelled migctl.io/webhook=disabled"),
        (pod(c(vram="0")), None, "no migctl.io/vram request"),
    ],
)
def test_left_alone(the_pod: dict[str, Any], ns_labels: dict[str, str] | None, why: str) -> None:
    d = decide_(the_pod, [offer("h100-80gb")], VramRules(), ns_labels)
    assert d.action == "leave"
    assert why in d.reason


def test_pod_annotation_opts_out() -> None:
    p = pod(c())
    p["metadata"]["annotations"] = {"migctl.io/webhook": "disabled"}
    assert decide_(p, [offer("h100-80gb")]).action == "leave"


def test_no_mig_gpus_known_leaves_the_pod_alone() -> None:
    d = decide_(pod(c()), [])
    assert (d.action, d.reason) == ("leave", "no MIG-capable GPU node is known in the cluster")


# -- choosing -------------------------------------------------------------------------------------------------


def test_7gi_on_h100_is_1g_10gb_with_affinity_and_annotations() -> None:
    p = pod(c())
    d = decide_(p, [offer("h100-80gb", NodeOffer("n1", free={"1g.10gb": 2}))])
    assert d.action == "rewrite"
    assert [(x.profile, x.resource, x.instance_mib, x.request_mib) for x in d.choices] == [
        ("1g.10gb", "nvidia.com/mig-1g.10gb", 9984, 7168)
    ]
    assert (d.capacity, d.node, d.model) == ("free", "n1", "h100-80gb")
    assert set(d.products) == set(H100.gfd_products)
    out = apply(p, d)
    assert out["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    assert out["metadata"]["annotations"]["migctl.io/vram"] == "7Gi"
    record = json.loads(out["metadata"]["annotations"][CHOICE_ANNOTATION])
    assert record["containers"] == [
        {"name": "main", "init": False, "request": "7Gi", "resource": "nvidia.com/mig-1g.10gb"}
    ]
    assert out["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": list(d.products)}]}
        ]
    }
    assert p["spec"]["containers"][0]["resources"] == {"limits": {"migctl.io/vram": "7Gi"}}  # input untouched


def test_exact_fit_and_one_mib_over() -> None:
    exact = decide_(pod(c(vram="9984Mi")), [offer("h100-80gb")])
    over = decide_(pod(c(vram="9985Mi")), [offer("h100-80gb")])
    assert exact.choices[0].profile == "1g.10gb"
    assert exact.choices[0].waste_mib == 0
    assert over.choices[0].profile == "1g.20gb"  # 1g.20gb and 2g.20gb have the same memory: fewer slices wins


def test_decimal_quantities_round_up_to_mib() -> None:
    d = decide_(pod(c(vram="8G")), [offer("h100-80gb")])  # 8e9 bytes = 7629.39 MiB
    assert d.choices[0].request_mib == 7630


def test_least_waste_model_wins_when_both_have_capacity() -> None:
    # 5Gi: A30 1g.6gb (5952) wastes 832 MiB, H100 1g.10gb (9984) wastes 4864 MiB.
    d = decide_(
        pod(c(vram="5Gi")),
        [offer("h100-80gb", NodeOffer("h", idle=1, idle_mig=1)), offer("a30-24gb", NodeOffer("a", idle=1, idle_mig=1))],
    )
    assert (d.model, d.choices[0].profile, d.capacity) == ("a30-24gb", "1g.6gb", "plannable")
    assert "least waste among 2 GPU models" in d.reason
    assert d.alternatives and d.alternatives[0].startswith("h100-80gb 1g.10gb")
    # the affinity names only products whose model has 1g.6gb
    assert set(d.products) == set(A30.gfd_products)


def test_capacity_beats_waste() -> None:
    """A model with a free instance (or an idle GPU) is preferred to a less wasteful model with no capacity."""
    busy_a30 = NodeOffer("a", idle=0)
    d = decide_(
        pod(c(vram="5Gi")), [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 1})), offer("a30-24gb", busy_a30)]
    )
    assert (d.model, d.capacity) == ("h100-80gb", "free")
    assert "a free instance exists on node h" in d.reason


def test_free_now_breaks_a_waste_tie_after_plannable() -> None:
    # Same model twice (two live-memory variants): same waste, one has a free instance now.
    d = decide_(
        pod(c()),
        [
            offer("h100-80gb", NodeOffer("later", idle=1, idle_mig=1)),
            offer("h100-80gb", NodeOffer("now", free={"1g.10gb": 1})),
        ],
    )
    assert (d.capacity, d.node) == ("free", "now")


def test_no_capacity_anywhere_still_rewrites_and_says_so() -> None:
    d = decide_(pod(c()), [offer("h100-80gb", NodeOffer("h"))])
    assert (d.action, d.capacity) == ("rewrite", "none")
    assert "no capacity yet" in d.reason


def test_frozen_or_excluded_nodes_are_not_reshapable() -> None:
    lab = {PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}

    def n(name: str, cfg: GpuConfig, used: dict[str, int] | None, **kw: Any) -> Node:
        return Node(name, labels={**lab, **kw.pop("labels", {})}, model=H100, gpus=(Gpu(0, cfg, used, False),), **kw)

    full = GpuConfig.mig({"7g.80gb": 1})
    nodes = (
        n("ok", full, {}, mig_free={"7g.80gb": 1}),
        n("frozen", full, {}, frozen_reason="x"),
        n("excl", GpuConfig.mig({}), {}, labels={"migctl.io/exclude": "true"}),
        n("busy", full, {"7g.80gb": 1}),
        n("unknown", full, None),
        n("off", GpuConfig.disabled(), None, whole_free=1),
    )
    (o,) = offers_from_snapshot(Snapshot(nodes, ()))
    by = {n.name: n for n in o.nodes}
    assert (by["ok"].idle, by["ok"].idle_mig, by["ok"].free) == (1, 1, {"7g.80gb": 1})
    assert by["frozen"].idle == by["excl"].idle == by["busy"].idle == by["unknown"].idle == 0
    assert (by["off"].idle, by["off"].idle_mig, by["off"].idle_whole, by["off"].whole_free) == (1, 0, 1, 1)
    (o2,) = offers_from_snapshot(Snapshot(nodes, ()), PlannerSettings(allow_mig_mode_change=True))
    assert {n.name: n for n in o2.nodes}["off"].idle_mig == 1
    assert o.products == ("NVIDIA-H100-80GB-HBM3",)


def test_live_memory_variants_are_separate_offers() -> None:
    live = H100.with_live_memory({"1g.10gb": 9856})
    nodes = (
        Node("a", labels={PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}, model=H100),
        Node("b", labels={PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3"}, model=live),
    )
    offers = offers_from_snapshot(Snapshot(nodes, ()))
    assert len(offers) == 2
    # 9.7 GiB fits the catalog's 1g.10gb (9984) but not the live 9856 one: that variant offers 1g.20gb
    d = decide_(pod(c(vram="9900Mi")), offers)
    assert d.choices[0].profile == "1g.10gb"
    assert d.node == "a" or d.capacity == "none"


def test_the_pods_own_node_selector_limits_the_models() -> None:
    h = offer("h100-80gb", NodeOffer("h", labels={"pool": "h100"}, free={"1g.10gb": 1}))
    a = offer("a30-24gb", NodeOffer("a", labels={"pool": "a30"}, free={"2g.12gb": 1}))
    d = decide_(pod(c(), nodeSelector={"pool": "a30"}), [h, a])
    assert (d.model, d.choices[0].profile) == ("a30-24gb", "2g.12gb")
    terms = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}]}}}  # fmt: skip
    d2 = decide_(pod(c(), affinity=terms), [h, a])
    assert d2.model == "h100-80gb"
    d3 = decide_(pod(c(), nodeSelector={"pool": "none"}), [h, a])
    assert d3.action == "reject"
    assert d3.reason.startswith("no MIG-capable GPU node can ever run the pod (0/2 GPU nodes fit (2 nodeSelector")


def test_affinity_is_anded_into_every_existing_term() -> None:
    terms = [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {"matchExpressions": []}}],
        },
        "podAntiAffinity": {"x": 1},
    }
    zone_node = NodeOffer("n1", labels={"zone": "a"})
    p = pod(c(), affinity=affinity)
    d = decide_(p, [offer("h100-80gb", zone_node)])
    out = apply(p, d)["spec"]["affinity"]
    got = out["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    expr = {"key": PRODUCT_LABEL, "operator": "In", "values": list(d.products)}
    assert got == [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}, expr]},
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}], "matchExpressions": [expr]},
    ]
    assert out["podAntiAffinity"] == {"x": 1}
    assert (
        out["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        == affinity["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    )


# -- several containers, init containers ----------------------------------------------------------------------


def test_each_container_gets_its_own_instance_on_one_model() -> None:
    p = pod(c("a", "7Gi"), c("b", "15Gi"), c("sidecar", vram=None, cpu="1"))
    d = decide_(p, [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 1, "1g.20gb": 1}))])
    assert [(x.name, x.profile) for x in d.choices] == [("a", "1g.10gb"), ("b", "1g.20gb")]
    assert d.capacity == "free"
    out = apply(p, d)
    res = [x["resources"] for x in out["spec"]["containers"]]
    assert res == [
        {"limits": {"nvidia.com/mig-1g.10gb": "1"}},
        {"limits": {"nvidia.com/mig-1g.20gb": "1"}},
        {"limits": {"cpu": "1"}},
    ]
    assert out["metadata"]["annotations"]["migctl.io/vram"] == "15Gi"  # the largest: the planner reads one value


def test_two_containers_need_two_free_instances() -> None:
    p = pod(c("a"), c("b"))
    d = decide_(p, [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 1}))])
    assert d.capacity == "none"
    d2 = decide_(p, [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 2}))])
    assert d2.capacity == "free"


def test_init_container_instance_is_reused_by_kubernetes_rule() -> None:
    """An init container and an app container of the same profile need one instance (max, not sum)."""
    p = pod(c("app"), init=(c("warmup"),))
    d = decide_(p, [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 1}))])
    assert [(x.name, x.init, x.profile) for x in d.choices] == [("app", False, "1g.10gb"), ("warmup", True, "1g.10gb")]
    assert d.capacity == "free"
    out = apply(p, d)
    assert out["spec"]["initContainers"][0]["resources"] == {"limits": {"nvidia.com/mig-1g.10gb": "1"}}
    sidecar = dict(c("sc"), restartPolicy="Always")
    d2 = decide_(pod(c("app"), init=(sidecar,)), [offer("h100-80gb", NodeOffer("h", free={"1g.10gb": 1}))])
    assert d2.capacity == "none"  # a sidecar runs alongside: two instances


def test_requests_and_limits_both_rewritten() -> None:
    cont = {
        "name": "m",
        "resources": {"requests": {"migctl.io/vram": "7Gi", "cpu": "1"}, "limits": {"migctl.io/vram": "7Gi"}},
    }
    p = pod(cont)
    out = apply(p, decide_(p, [offer("h100-80gb")]))
    assert out["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "1", "nvidia.com/mig-1g.10gb": "1"},
        "limits": {"nvidia.com/mig-1g.10gb": "1"},
    }
    only_requests = pod(c(where="requests"))
    out2 = apply(only_requests, decide_(only_requests, [offer("h100-80gb")]))
    assert out2["spec"]["containers"][0]["resources"] == {
        "limits": {"nvidia.com/mig-1g.10gb": "1"},
        "requests": {"nvidia.com/mig-1g.10gb": "1"},
    }


def test_custom_resource_name_from_planner_settings() -> None:
    rules = VramRules.from_planner(
        PlannerSettings(vram_resource="example.com/vram", vram_annotation="example.com/need")
    )
    cont = {"name": "m", "resources": {"limits": {"example.com/vram": "7Gi"}}}
    p = pod(cont)
    d = decide_(p, [offer("h100-80gb")], rules)
    out = apply(p, d, rules)
    assert out["metadata"]["annotations"]["example.com/need"] == "7Gi"
    assert decide_(pod(c()), [offer("h100-80gb")], rules).action == "leave"  # migctl.io/vram is not the resource


# -- too large ------------------------------------------------------------------------------------------------


def test_too_large_is_rejected_with_a_clear_message() -> None:
    d = decide_(pod(c("big", "100Gi")), [offer("h100-80gb"), offer("a100-40gb")])
    assert d.action == "reject"
    assert d.message == (
        "containers[0] 'big' asks for 100Gi (102400 MiB, 100.00 GiB) of GPU memory (migctl.io/vram); the largest "
        "MIG instance on the GPUs in this cluster is 7g.80gb with 81152 MiB (79.25 GiB, h100-80gb); no single GPU "
        "here has that much memory (largest: 81559 MiB, h100-80gb). Ask for less, or split the work across app "
        "containers (each gets its own instance)."
    )


def test_between_the_full_profile_and_the_whole_gpu() -> None:
    """81300 MiB: more than 7g.80gb (81152) but less than the whole H100 (81559)."""
    p = pod(c(vram="81300Mi"))
    d = decide_(p, [offer("h100-80gb")])
    assert d.action == "reject"
    assert "a whole h100-80gb GPU (81559 MiB) would hold it" in d.message
    assert "webhook.whole_gpu: true" in d.message
    d2 = decide_(p, [offer("h100-80gb", NodeOffer("h", whole_free=1))], VramRules(whole_gpu=True))
    assert d2.action == "rewrite"
    assert [(x.profile, x.resource, x.instance_mib) for x in d2.choices] == [("gpu", "nvidia.com/gpu", 81559)]
    assert d2.capacity == "free"
    out = apply(p, d2)
    assert out["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_whole_gpu_only_when_no_mig_profile_fits() -> None:
    d = decide_(pod(c()), [offer("h100-80gb", NodeOffer("h", whole_free=1))], VramRules(whole_gpu=True))
    assert d.choices[0].profile == "1g.10gb"


def test_the_largest_container_decides_which_models_qualify() -> None:
    p = pod(c("a", "30Gi"), c("b", "5Gi"))
    d = decide_(p, [offer("a30-24gb"), offer("a100-40gb")])  # the A30's largest instance has 24064 MiB
    assert d.action == "rewrite"
    assert d.model == "a100-40gb"
    assert [x.profile for x in d.choices] == ["7g.40gb", "1g.10gb"]  # 5Gi = 5120 MiB > 1g.5gb's 4864


def test_invalid_quantity_is_rejected() -> None:
    d = decide_(pod(c(vram="7 gigs")), [offer("h100-80gb")])
    assert d.action == "reject"
    assert "containers[0] 'main': migctl.io/vram" in d.reason


def test_apply_refuses_non_rewrite() -> None:
    with pytest.raises(ValueError, match="only a rewrite"):
        apply(pod(c()), decide_(pod(c(vram=None)), [offer("h100-80gb")]))


def test_message_names_choice_and_reason() -> None:
    d = decide_(pod(c()), [offer("h100-80gb", NodeOffer("n1", free={"1g.10gb": 1}))])
    assert d.message.startswith(
        "main: 7Gi (7168 MiB) -> nvidia.com/mig-1g.10gb (9984 MiB, 2816 MiB spare) on h100-80gb"
    )
    assert d.to_dict()["containers"][0]["resource"] == "nvidia.com/mig-1g.10gb"
