"""The live controller's in-place guard rails and burst rule, the same as the simulator models (`migctl-inplace`):
an in-place node meets `in_place_cooldown_s` / `in_place_min_dwell_s`, not the stock path's minutes, and a burst
still arriving keeps its wasteful pods out of the plan (`core/forecast/estimate.burst_hold`, the loop's clock).

The cluster is `tests/unit/fake_cluster.py` (no API server): the reconcile reads the objects as from the cache."""

from __future__ import annotations

from datetime import UTC, datetime

from migctl.config import ControllerSettings
from migctl.reconcile.decide import frozen_nodes
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.guards import NodeRecord, holds
from migctl.reconcile.paths import in_place_rails, stock_rails
from migctl.reconcile.reasons import Code
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, IN_PLACE, LAST_ATTEMPT, LAST_CHANGE
from tests.unit.controller.test_reconcile import IDLE, controller
from tests.unit.fake_cluster import FakeClock, FakeCluster
from tests.unit.kube_builders import gpu_node, mig_parted, pod

S = ControllerSettings(cooldown_s=300, min_dwell_s=900, in_place_cooldown_s=10, in_place_min_dwell_s=60)
NOW = 10_000.0


def test_an_in_place_node_is_held_by_the_in_place_dwell_and_cooldown_not_the_stock_ones() -> None:
    records = [
        NodeRecord("ip-dwell", last_attempt=NOW - 40, last_change=NOW - 30),  # within 60 s
        NodeRecord("ip-cool", last_attempt=NOW - 5),  # within 10 s
        NodeRecord("ip-free", last_attempt=NOW - 100, last_change=NOW - 100),  # stock rails would hold it
        NodeRecord("stock", last_attempt=NOW - 100, last_change=NOW - 100),
    ]
    rails = {"stock": stock_rails(S)}
    out = holds(records, NOW, lambda n: rails.get(n) or in_place_rails(S))
    assert {n: r.code for n, r in out.items()} == {"ip-dwell": Code.DWELL, "ip-cool": Code.COOLDOWN,
                                                   "stock": Code.COOLDOWN}  # fmt: skip
    assert "in_place_min_dwell_s 60" in out["ip-dwell"].text  # the message names the setting that holds it
    assert "in_place_cooldown_s 10" in out["ip-cool"].text and "(cooldown_s 300" in out["stock"].text


def test_frozen_nodes_applies_the_in_place_rails_by_each_nodes_path() -> None:
    stamps = {LAST_ATTEMPT: str(NOW - 100), LAST_CHANGE: str(NOW - 100)}
    in_place = NodeFacts("ip", {ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"}, stamps)
    stock = NodeFacts("st", {}, stamps)
    refused, frozen = frozen_nodes([in_place, stock], NOW, S, in_flight=())
    assert refused == {} and set(frozen) == {"st"}
    _, frozen = frozen_nodes([in_place, stock], NOW + 1000, S, in_flight=())
    assert frozen == {}


def _created(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _burst(start: float) -> FakeCluster:
    """A burst of ten 22 GiB pods 2 s apart on an A100-40GB (each would leave 44% of a 7g.40gb unused: held) and
    three 18 GiB pods (a 3g.20gb, 10% unused: served as they come)."""
    pods = [pod(f"big{i}", {"migctl.io/vram": "22Gi"}) for i in range(10)]
    pods += [pod(f"small{i}", {"migctl.io/vram": "18Gi"}) for i in range(3)]
    for i, p in enumerate(pods):
        p["metadata"]["creationTimestamp"] = _created(start + 2 * i)
    return FakeCluster([gpu_node("n1", layouts=IDLE), mig_parted(IDLE), *pods])


def test_a_burst_still_arriving_keeps_its_wasteful_pods_out_of_the_live_controllers_plan() -> None:
    start = 1_800_000_000.0
    clock = FakeClock(start=start + 2 * 12 + 5)  # 5 s after the last pod: still arriving
    c = controller(_burst(start), clock, dry_run=True)
    c.reconcile()
    assert c.last_plan is not None
    planned = {a.pod for a in c.last_plan.assignments} | {u.pod for u in c.last_plan.unplaced}
    assert planned and not any(p.startswith("ns/big") for p in planned)
    assert any(p.startswith("ns/small") for p in planned)

    clock.advance(60)  # quiet for 30 s: it has landed, the plan sees it whole
    c.reconcile()
    assert c.last_plan is not None
    planned = {a.pod for a in c.last_plan.assignments} | {u.pod for u in c.last_plan.unplaced}
    assert any(p.startswith("ns/big") for p in planned)


def _decisions(labels: dict[str, str]) -> list[tuple[str, bool, Code]]:
    """The decisions of the first reconcile (dry run) for one pending 3g.20gb pod on an idle node: the stock
    batching window is 10 s stable, the in-place one 0."""
    cluster = FakeCluster([gpu_node("n1", layouts=IDLE, labels=labels), mig_parted(IDLE),
                           pod("want", {"nvidia.com/mig-3g.20gb": 1})])  # fmt: skip
    c = controller(cluster, FakeClock(), dry_run=True, batch_stable_s=10, batch_max_s=60,
                   in_place_batch_stable_s=0, in_place_batch_max_s=0)  # fmt: skip
    c.reconcile()
    return c.last_decisions


def test_an_in_place_nodes_change_meets_the_in_place_batching_window_not_the_stock_one() -> None:
    assert _decisions({}) == []  # the stock path waits for its 10 s window
    assert [(n, start) for n, start, _ in _decisions({ACTUATION: IN_PLACE, DEPLOY_MIG_MANAGER: "false"})] == [
        ("n1", True)
    ]
