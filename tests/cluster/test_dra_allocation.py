"""The real kube-scheduler allocates DRA claims from NVIDIA-shaped ResourceSlices on kwok nodes (Kubernetes 1.37).

Real: kube-apiserver, kube-scheduler (its DynamicResources plugin and structured allocator), the resourceclaim
controller of kube-controller-manager (ResourceClaimTemplate -> one claim per pod, deleted with the pod) and kwok
(pods Running). SIMULATED at its API objects: NVIDIA's kubelet plugin (tests/cluster/fake_dra_driver.py), which
publishes the slices `tests/nvidia_slices.py` builds; no kubelet prepares the devices.
"""

from __future__ import annotations

import pytest

from migctl.core.hardware.geometry import Placement
from tests.nvidia_slices import DRIVER

from .dra_harness import NO_DEVICES, DraCluster, request
from .fake_dra_driver import raw
from .waiting import wait_for

pytestmark = pytest.mark.cluster


def _device(cluster: DraCluster, node: str, name: str) -> dict[str, object]:
    """A device as the node's published slices hold it."""
    for s in cluster.plugins[node].publisher.current():
        for d in s["spec"].get("devices") or []:
            if d["name"] == name:
                return dict(d)
    raise AssertionError(f"{node} publishes no device {name}")


def _slices_used(device: dict[str, object]) -> set[str]:
    """The `memory-slice-<i>` counters a DynamicMIG device consumes."""
    uses = device.get("consumesCounters") or []
    return {c for u in uses for c in u["counters"] if c.startswith("memory-slice-")}


def test_static_mig_claims_from_templates_land_on_the_devices_that_exist(dra_cluster: DraCluster) -> None:
    """Static MIG: three templates, three pods; kcm makes each pod's claim (owned by the pod), the scheduler
    allocates the one MIG device of the asked profile, kwok runs the pod. A fourth claim for a profile whose only
    device is taken stays Unschedulable until the pod holding it is deleted (kcm deletes its claim)."""
    layout = [Placement("3g.40gb", 0, 4), Placement("2g.20gb", 4, 2), Placement("1g.10gb", 6, 1)]
    plugin = dra_cluster.dra_node("static", "h100-80gb", 1, mode="static", layouts=[layout])
    node = plugin.node
    want = {"3g.40gb": "gpu-0-mig-3g40gb-9-0", "2g.20gb": "gpu-0-mig-2g20gb-14-4", "1g.10gb": "gpu-0-mig-1g10gb-19-6"}
    for i, profile in enumerate(want):
        dra_cluster.claim_pod(f"p{i}", dra_cluster.template(f"t{i}", request(profile)))
    for i, (profile, device) in enumerate(want.items()):
        placed = dra_cluster.wait_placed(f"p{i}")
        assert placed.node == node
        assert placed.devices == (f"{node}/{device}",)
        claim = dra_cluster.claim(placed.claim)
        owner = claim["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("Pod", f"p{i}")
        assert claim["status"]["allocation"]["devices"]["results"][0]["driver"] == DRIVER
        assert _device(dra_cluster, node, device)["attributes"]["profile"] == {"string": profile}  # type: ignore[index]

    dra_cluster.claim_pod("late", dra_cluster.template("late", request("1g.10gb")))
    assert NO_DEVICES in dra_cluster.wait_unschedulable("late")
    first_claim = dra_cluster.placed("p2").claim
    dra_cluster.core.delete_namespaced_pod("p2", dra_cluster.namespace, grace_period_seconds=0)

    def claim_gone() -> bool:
        names = [
            c["metadata"]["name"]
            for c in raw(dra_cluster.resource.list_namespaced_resource_claim, dra_cluster.namespace)["items"]
        ]
        return first_claim not in names

    wait_for("kcm to delete the deleted pod's claim", claim_gone)
    assert dra_cluster.wait_placed("late").devices == (f"{node}/gpu-0-mig-1g10gb-19-6",)


def test_dynamic_mig_claims_draw_counters_until_the_gpu_is_full(dra_cluster: DraCluster) -> None:
    """DynamicMIG: each allocated (profile, placement) device draws its memory slices from the GPU's counter set,
    so allocations never overlap, and a claim that would need a drawn slice is refused by the allocator."""
    plugin = dra_cluster.dra_node("dyn", "h100-80gb", 1, mode="dynamic")
    placed = dra_cluster.place_in_order(["4g.40gb", "3g.40gb", "1g.10gb"])
    assert placed[0] is not None and placed[1] is not None
    assert placed[2] is None, "a 1g.10gb found room although 4g + 3g hold all eight memory slices"
    used = [_slices_used(_device(dra_cluster, plugin.node, p.devices[0].split("/", 1)[1])) for p in placed if p]
    assert [len(u) for u in used] == [4, 4]
    assert not used[0] & used[1], f"allocations overlap: {used}"


def test_a_two_device_claim_with_match_attribute_stays_on_one_gpu(dra_cluster: DraCluster) -> None:
    """`constraints: matchAttribute gpu.nvidia.com/parentUUID` (NVIDIA's mig.md) keeps both devices of one claim
    on one GPU. GPU 0 is left one 1g.5gb placement (4g.20gb and 2g.10gb hold slices 0-5), so a plain first fit
    would split the pair across GPUs; the allocator backtracks onto GPU 1 instead."""
    plugin = dra_cluster.dra_node("pair", "a100-40gb", 2, mode="dynamic")
    fillers = dra_cluster.place_in_order(["4g.20gb", "2g.10gb"], prefix="fill")
    assert all(f is not None and f.devices[0].split("/")[1].startswith("gpu-0-") for f in fillers), fillers
    constraint = {"matchAttribute": f"{DRIVER}/parentUUID", "requests": ["gpu"]}
    dra_cluster.claim_pod("pair", dra_cluster.template("pair", request("1g.5gb", count=2), constraints=[constraint]))
    placed = dra_cluster.wait_placed("pair")
    devices = [_device(dra_cluster, plugin.node, d.split("/", 1)[1]) for d in placed.devices]
    parents = {str(d["attributes"]["parentUUID"]["string"]) for d in devices}  # type: ignore[index]
    assert len(devices) == 2 and len(parents) == 1, placed
