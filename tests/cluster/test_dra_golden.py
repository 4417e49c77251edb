"""GOLDEN: the real kube-scheduler's DRA allocator picks exactly the devices migctl's first-fit predictor says, on
DynamicMIG nodes of several GPUs, with and without migctl's fences; and fences let a 4g/7g burst fit that plain
first fit leaves Pending.

Real: kube-apiserver, kube-scheduler 1.37 (the allocator whose choice is predicted), kube-controller-manager's
resourceclaim controller, kwok. SIMULATED at its API objects: NVIDIA's kubelet plugin (fake_dra_driver.py), whose
DynamicMIG slices are NVIDIA's shape (tests/nvidia_slices.py). migctl reads the pool, the classes and the claim
templates back from the API server with its own adapters (migctl.adapters.dra), predicts with
`migctl.core.dra.firstfit.predict`, plans fences with `migctl.core.dra.fences.plan_fences`, and each claim is
then scheduled one pod at a time, in queue order, as the predictor assumes.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from migctl.core.dra.fences import Reservation, plan_fences
from migctl.core.dra.firstfit import Choice, Prediction, predict

from .dra_harness import DraCluster, Json, Placed, request

pytestmark = pytest.mark.cluster

MEMORY_FLOOR = "device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('15Gi'))"


def _predicted(prediction: Prediction) -> list[tuple[str, ...] | None]:
    return [o.names if isinstance(o, Choice) else None for o in prediction.outcomes]


def _actual(node: str, placed: Sequence[Placed | None]) -> list[tuple[str, ...] | None]:
    prefix = f"{node}/"
    return [tuple(d.removeprefix(prefix) for d in p.devices) if p else None for p in placed]


def _golden(cluster: DraCluster, model_id: str, gpus: int, requests: Sequence[Json]) -> list[tuple[str, ...] | None]:
    """Predict, then schedule; assert they agree device by device; return the outcome."""
    node = cluster.dra_node("golden", model_id, gpus, mode="dynamic").node
    names = cluster.templates(requests)
    prediction = predict([cluster.pool(node)], cluster.template_specs(names), cluster.classes())
    assert not any(getattr(o, "unpredictable", False) for o in prediction.outcomes), prediction
    actual = _actual(node, cluster.place_templates(names))
    assert actual == _predicted(prediction)
    return actual


A100_BURST = [
    request("1g.5gb"),
    request("2g.10gb"),
    request(None),  # any MIG device: names sort "1g10gb" before "1g5gb", so the first free 1g.10gb
    request("3g.20gb"),
    request("1g.5gb"),
    request("4g.20gb"),
    request(None, device_class="gpu.nvidia.com"),  # a whole GPU: refused, every GPU has a partition by now
    request("7g.40gb"),
    request("1g.10gb"),
    request("1g.5gb"),
    request("2g.10gb"),
    request("3g.20gb"),
    request("7g.40gb"),
]

H100_BURST = [
    request("1g.10gb"),
    request(None, cel=[MEMORY_FLOOR]),  # at least 15 GiB: the first such name, a 1g.20gb
    request("3g.40gb"),
    request("2g.20gb"),
    request("1g.10gb"),
    request("4g.40gb"),  # refused: slice 0 is drawn on both GPUs
    request("1g.20gb"),
    request("7g.80gb"),
    request("1g.10gb"),
    request("1g.10gb"),
]


def test_golden_a100_40gb_dynamic_burst_on_three_gpus(dra_cluster: DraCluster) -> None:
    """13 claims on 3x A100-40GB: every device the scheduler allocates is the predicted one, and every claim it
    refuses (whole GPU, 7g, a late 3g) is predicted refused."""
    outcome = _golden(dra_cluster, "a100-40gb", 3, A100_BURST)
    assert outcome.count(None) >= 2 and len(list(filter(None, outcome))) >= 8, outcome  # both kinds are checked


def test_golden_h100_80gb_dynamic_burst_on_two_gpus(dra_cluster: DraCluster) -> None:
    """10 claims (profiles, a memory floor) on 2x H100-80GB: the allocator's picks equal the prediction."""
    outcome = _golden(dra_cluster, "h100-80gb", 2, H100_BURST)
    assert outcome.count(None) >= 2 and len(list(filter(None, outcome))) >= 6, outcome  # both kinds are checked


@pytest.mark.parametrize(
    ("model_id", "burst", "reservations"),
    [
        pytest.param(
            "h100-80gb",
            ["1g.10gb", "4g.40gb", "7g.80gb"],
            [Reservation(0, "4g.40gb", 0, 4), Reservation(1, "7g.80gb", 0, 8)],
            id="h100-7g",
        ),
        pytest.param(
            "a100-40gb",
            ["3g.20gb", "4g.20gb", "3g.20gb", "4g.20gb"],
            [Reservation(0, "4g.20gb", 0, 4), Reservation(1, "4g.20gb", 0, 4)],
            id="a100-4g",
        ),
    ],
)
def test_fences_place_the_burst_first_fit_leaves_pending(
    dra_cluster: DraCluster, model_id: str, burst: list[str], reservations: list[Reservation]
) -> None:
    """Two identical nodes of 2 GPUs. Unfenced, first fit strands the big profile (a small claim takes a slice
    the big one needs): the scheduler leaves the last claim Pending, as predicted. On the other node migctl's
    fences for the plan's reservations are written as DeviceTaintRules; the scheduler then places the whole
    burst, device for device as `plan_fences` predicted with them in place."""
    plain_node = dra_cluster.dra_node("plain", model_id, 2, mode="dynamic").node
    node = dra_cluster.dra_node("fenced", model_id, 2, mode="dynamic").node
    names = dra_cluster.templates([request(p) for p in burst])
    specs, classes = dra_cluster.template_specs(names), dra_cluster.classes()

    plain = predict([dra_cluster.pool(plain_node)], specs, classes)
    assert _predicted(plain)[-1] is None and all(_predicted(plain)[:-1]), _predicted(plain)
    assert _actual(plain_node, dra_cluster.place_templates(names, plain_node)) == _predicted(plain)

    plan = plan_fences(dra_cluster.pool(node), specs, classes, reservations)
    assert plan.add and not plan.capped and not plan.bad, plan
    for i, device in enumerate(plan.add):
        dra_cluster.fence(f"{dra_cluster.namespace}-fence-{i}", node, device, settle=i == len(plan.add) - 1)
    actual = _actual(node, dra_cluster.place_templates(names, node))
    assert actual == _predicted(plan.prediction)
    assert all(actual), actual
