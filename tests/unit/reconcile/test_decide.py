"""The pure decisions (reconcile/decide.py, reconcile/paths.py): which path each node takes, where the in-place path
is refused, and which planned changes start, with a concurrency limit per path. No cluster, no clock: plain records
in. Behaviour is read from reason codes; the text is checked only where it tells an operator what to set."""

from __future__ import annotations

import pytest

from migctl.config import Config, ControllerSettings
from migctl.config.selector import LabelSelector
from migctl.core.model.cluster import Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Eviction, GpuPlan, NodePlan, Plan, Summary
from migctl.reconcile.decide import Hold, Start, decide, refusals
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.paths import IN_PLACE_PATH, STOCK, in_place_refusal, path_of
from migctl.reconcile.reasons import Code
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, IN_PLACE, MIG_CONFIG

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
                  evictions_last_hour=0, paused=False, protected_pods=())  # fmt: skip


def test_each_path_has_its_own_concurrency_limit() -> None:
    facts = [NodeFacts("s1", {}, {}), NodeFacts("s2", {}, {}), *(NodeFacts(f"i{k}", OPTED_IN, {}) for k in range(3))]
    p = plan(*(node_plan(f.name) for f in facts))
    out = run(p, facts, settings(max_concurrent_nodes=1, in_place_max_concurrent_nodes=2))
    started = {a.node: a.path for a in out if isinstance(a, Start)}
    assert started == {"s1": STOCK, "i0": IN_PLACE_PATH, "i1": IN_PLACE_PATH}
    held = {a.node: a.reason for a in out if isinstance(a, Hold)}
    assert set(held) == {"s2", "i2"} and {r.code for r in held.values()} == {Code.CONCURRENCY}
    assert held["s2"].text.startswith("max_concurrent_nodes 1")  # each names its own setting
    assert held["i2"].text.startswith("in_place_max_concurrent_nodes 2")
    busy = run(p, facts, settings(max_concurrent_nodes=1, in_place_max_concurrent_nodes=2), in_flight=("i1", "i0"))
    assert not any(isinstance(a, Start) and a.path is IN_PLACE_PATH for a in busy)  # i0 and i1 already in flight
    assert sum(isinstance(a, Start) for a in busy) == 1  # the stock path's slot is its own


def test_the_in_place_path_never_changes_mig_mode_and_never_evicts() -> None:
    facts = [NodeFacts("i1", OPTED_IN, {}), NodeFacts("i2", OPTED_IN, {})]
    p = plan(node_plan("i1", GpuConfig.disabled(), GpuConfig.mig({"7g.40gb": 1})), node_plan("i2"),
             evictions=(Eviction("ns/low", "i2", 0, "ns/high"),))  # fmt: skip
    out = {a.node: a for a in run(p, facts, settings())}
    assert isinstance(out["i1"], Hold) and out["i1"].reason.code is Code.PATH_CANNOT
    assert isinstance(out["i2"], Hold) and out["i2"].reason.code is Code.PATH_CANNOT
    assert "MIG mode" in out["i1"].reason.text and "evict" in out["i2"].reason.text


def test_a_started_target_carries_the_plan_and_the_previous_config() -> None:
    facts = [NodeFacts("i1", {**OPTED_IN, MIG_CONFIG: "old"}, {})]
    (a,) = decide(plan(node_plan("i1")), "p9", Snapshot((), ()), {"i1": facts[0]}, settings(), 42.0, in_flight=(),
                  evictions_last_hour=0, paused=False, protected_pods=())  # fmt: skip
    assert isinstance(a, Start) and a.target.plan_id == "p9" and a.target.started == 42.0
    assert a.target.previous_config == "old" and dict(a.target.gpus[0].layout) == {"3g.20gb": 2}


def test_paths_by_label_or_selector() -> None:
    none, pool = LabelSelector.parse(""), LabelSelector.parse("pool=fast")
    assert path_of({ACTUATION: IN_PLACE}, none) is IN_PLACE_PATH
    assert path_of({ACTUATION: "mig-manager"}, none) is STOCK
    assert path_of({"pool": "fast"}, none) is STOCK  # the empty selector selects nothing
    assert path_of({"pool": "fast"}, pool) is IN_PLACE_PATH


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
    assert (why is not None and why.code is Code.REFUSED and expected in why.text) if expected else why is None


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
