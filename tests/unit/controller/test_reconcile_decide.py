"""The pure reconcile step (controller/reconcile.py): which path each node takes, where the in-place path is refused,
and which planned changes start, with a concurrency limit per path. No cluster, no clock: plain records in."""

from __future__ import annotations

import pytest

from migctl.config import Config, ControllerSettings
from migctl.config.selector import LabelSelector
from migctl.controller.reconcile import (
    MIG_MANAGER,
    Hold,
    NodeFacts,
    Start,
    actuation_path,
    decide,
    in_place_refusal,
    refusals,
)
from migctl.core.model.cluster import Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Eviction, GpuPlan, NodePlan, Plan, Summary
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, IN_PLACE

OPTED_IN = {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"}


def settings(**kw: object) -> ControllerSettings:
    return Config.model_validate({"controller": kw}).controller


def node_plan(name: str, before: GpuConfig | None = None, after: GpuConfig | None = None) -> NodePlan:
    before = before or GpuConfig.mig({"1g.5gb": 7})
    after = after or GpuConfig.mig({"3g.20gb": 2})
    return NodePlan(name, (GpuPlan(0, "a100-40gb", before, after, 0, 0),))


def plan(*nodes: NodePlan, evictions: tuple[Eviction, ...] = ()) -> Plan:
    return Plan(Summary(0, 0, 0, 0, 0, 0, 0, 0, 0), nodes, (), (), evictions)


def run(p: Plan, facts: list[NodeFacts], s: ControllerSettings, in_flight: tuple[str, ...] = ()) -> list[Start | Hold]:
    return decide(p, "p1", Snapshot((), ()), {f.name: f for f in facts}, s, 100.0, in_flight=in_flight,
                  evictions_last_hour=0, paused=False, protected_pods=(), previous_configs={})  # fmt: skip


def test_each_path_has_its_own_concurrency_limit() -> None:
    facts = [NodeFacts("s1", {}, {}), NodeFacts("s2", {}, {}), *(NodeFacts(f"i{k}", OPTED_IN, {}) for k in range(3))]
    p = plan(*(node_plan(f.name) for f in facts))
    out = run(p, facts, settings(max_concurrent_nodes=1, in_place_max_concurrent_nodes=2))
    started = {a.node: a.path for a in out if isinstance(a, Start)}
    assert started == {"s1": MIG_MANAGER, "i0": IN_PLACE, "i1": IN_PLACE}
    held = {a.node: a.reason for a in out if isinstance(a, Hold)}
    assert held["s2"].startswith("max_concurrent_nodes 1")
    assert set(held) == {"s2", "i2"} and held["i2"].startswith("in_place_max_concurrent_nodes 2")
    busy = run(p, facts, settings(max_concurrent_nodes=1, in_place_max_concurrent_nodes=2), in_flight=("i1", "i0"))
    assert not any(isinstance(a, Start) and a.path == IN_PLACE for a in busy)  # i0 and i1 already in flight
    assert sum(isinstance(a, Start) for a in busy) == 1  # the stock path's slot is its own


def test_the_in_place_path_never_changes_mig_mode_and_never_evicts() -> None:
    facts = [NodeFacts("i1", OPTED_IN, {}), NodeFacts("i2", OPTED_IN, {})]
    p = plan(node_plan("i1", GpuConfig.disabled(), GpuConfig.mig({"7g.40gb": 1})), node_plan("i2"),
             evictions=(Eviction("ns/low", "i2", 0, "ns/high"),))  # fmt: skip
    out = {a.node: a for a in run(p, facts, settings())}
    assert isinstance(out["i1"], Hold) and "never changes MIG mode" in out["i1"].reason
    assert isinstance(out["i2"], Hold) and "does not evict" in out["i2"].reason


def test_a_started_target_carries_the_plan_and_the_previous_config() -> None:
    facts = [NodeFacts("i1", OPTED_IN, {})]
    (a,) = decide(plan(node_plan("i1")), "p9", Snapshot((), ()), {"i1": facts[0]}, settings(), 42.0, in_flight=(),
                  evictions_last_hour=0, paused=False, protected_pods=(), previous_configs={"i1": "old"})  # fmt: skip
    assert isinstance(a, Start) and a.target.plan_id == "p9" and a.target.started == 42.0
    assert a.target.previous_config == "old" and dict(a.target.gpus[0].layout) == {"3g.20gb": 2}


def test_paths_by_label_or_selector() -> None:
    none, pool = LabelSelector.parse(""), LabelSelector.parse("pool=fast")
    assert actuation_path({ACTUATION: IN_PLACE}, none) == IN_PLACE
    assert actuation_path({ACTUATION: "mig-manager"}, none) == MIG_MANAGER
    assert actuation_path({"pool": "fast"}, none) == MIG_MANAGER  # the empty selector selects nothing
    assert actuation_path({"pool": "fast"}, pool) == IN_PLACE


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        ({ACTUATION: IN_PLACE}, {}, f"{DEPLOY_MIG_MANAGER}=false"),
        ({ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "true"}, {}, f"{DEPLOY_MIG_MANAGER}=true"),
        ({**OPTED_IN, "gpu": "on"}, {}, "node label gpu=on"),
        (OPTED_IN, {"hami.io/node-nvidia-register": "GPU-1,..."}, "annotation hami.io/node-nvidia-register"),
        (OPTED_IN, {}, ""),
        ({**OPTED_IN, "gpu": "off"}, {}, ""),
    ],
)
def test_in_place_refusal(labels: dict[str, str], annotations: dict[str, str], expected: str) -> None:
    why = in_place_refusal(labels, annotations, settings())
    assert (expected in why) if expected else why == ""


def test_only_in_place_nodes_are_refused() -> None:
    facts = [NodeFacts("stock", {}, {}), NodeFacts("bad", {ACTUATION: IN_PLACE}, {}), NodeFacts("ok", OPTED_IN, {})]
    assert set(refusals(facts, settings())) == {"bad"}


@pytest.mark.parametrize("text", ["po ol=a", "a=b c", "=x", "a=" + "v" * 64])
def test_a_bad_selector_fails_the_config_naming_the_term(text: str) -> None:
    with pytest.raises(ValueError, match="selector"):
        settings(in_place_node_selector=text)


def test_selector_terms() -> None:
    s = LabelSelector.parse("a=1, b!=2, c, !d")
    assert s.matches({"a": "1", "c": ""}) and not s.matches({"a": "1", "c": "", "d": "x"})
    assert not s.matches({"a": "1", "b": "2", "c": ""}) and not s.matches({"a": "1"})


def test_the_layout_recorded_after_a_change_that_did_not_apply() -> None:
    """The previous record, with each GPU the agent reported replaced by what it holds now; nothing to record when
    neither exists (the adapter then reads the agent's inventory)."""
    from migctl.controller.inplace import layout_after
    from migctl.wire import inplace as wire
    from migctl.wire import layout as codec

    before = codec.encode({0: codec.GpuLayout(True, {"1g.5gb": 7}), 1: codec.GpuLayout(True, {"7g.40gb": 1})}, "x")
    held = wire.Status("p1", "failed", "", {1: (wire.Held("3g.20gb", 0, 4, False), wire.Held("3g.20gb", 4, 4, True))})
    after = layout_after(before, held)
    assert after is not None and dict(after[0].layout) == {"1g.5gb": 7} and dict(after[1].layout) == {"3g.20gb": 2}
    assert layout_after(before, None) == {0: GpuConfig.mig({"1g.5gb": 7}), 1: GpuConfig.mig({"7g.40gb": 1})}
    assert layout_after(None, None) is None and layout_after("not json", None) is None
