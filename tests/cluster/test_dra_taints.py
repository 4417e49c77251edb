"""`DeviceTaintRule` (resource.k8s.io/v1, GA in 1.37) fences steer the real allocator, device by device.

Real: kube-apiserver, kube-scheduler, kube-controller-manager (resourceclaim and device-taint-eviction
controllers), kwok. SIMULATED at its API objects: NVIDIA's kubelet plugin (fake_dra_driver.py, its slices).
"""

from __future__ import annotations

import pytest

from migctl.core.hardware.geometry import Placement

from .dra_harness import NO_DEVICES, DraCluster, request

pytestmark = pytest.mark.cluster

KEY = "migctl.io/placement"
TOLERATE = {"key": KEY, "operator": "Exists", "effect": "NoSchedule"}


def test_a_no_schedule_fence_moves_the_pick_and_a_toleration_bypasses_it(dra_cluster: DraCluster) -> None:
    """Static MIG, two 1g.10gb devices: first fit would take `...-19-0`. Fenced (driver + pool + device), the
    scheduler takes `...-19-1` instead, refuses a second plain claim although the fenced device is free, and
    gives it to a claim that tolerates the fence's key. A fence on the same device name in another pool changes
    nothing here (the selector's pool counts)."""
    layout = [Placement("1g.10gb", 0, 1), Placement("1g.10gb", 1, 1)]
    node = dra_cluster.dra_node("fenced", "h100-80gb", 1, mode="static", layouts=[layout]).node
    dra_cluster.fence(f"{dra_cluster.namespace}-other", f"{node}-elsewhere", "gpu-0-mig-1g10gb-19-1", key=KEY)
    dra_cluster.fence(f"{dra_cluster.namespace}-fence", node, "gpu-0-mig-1g10gb-19-0", key=KEY)

    dra_cluster.claim_pod("plain", dra_cluster.template("plain", request("1g.10gb")))
    assert dra_cluster.wait_placed("plain").devices == (f"{node}/gpu-0-mig-1g10gb-19-1",)
    dra_cluster.claim_pod("refused", dra_cluster.template("refused", request("1g.10gb")))
    assert NO_DEVICES in dra_cluster.wait_unschedulable("refused")
    tolerant = dra_cluster.template("tolerant", request("1g.10gb", tolerations=[TOLERATE]))
    dra_cluster.claim_pod("tolerant", tolerant)
    assert dra_cluster.wait_placed("tolerant").devices == (f"{node}/gpu-0-mig-1g10gb-19-0",)


def test_fences_on_dynamic_placements_keep_a_region_free(dra_cluster: DraCluster) -> None:
    """DynamicMIG: fencing the 1g.10gb placements 0-3 of GPU 0 makes first fit put a 1g.10gb at placement 4,
    which leaves the 4g.40gb placement (slices 0-3) free for the next claim."""
    node = dra_cluster.dra_node("dynfence", "h100-80gb", 1, mode="dynamic").node
    for start in range(4):
        dra_cluster.fence(f"{dra_cluster.namespace}-f{start}", node, f"gpu-0-mig-1g10gb-19-{start}", key=KEY)
    placed = dra_cluster.place_in_order(["1g.10gb", "4g.40gb"])
    assert [p.devices if p else None for p in placed] == [
        (f"{node}/gpu-0-mig-1g10gb-19-4",),
        (f"{node}/gpu-0-mig-4g40gb-5-0",),
    ]
