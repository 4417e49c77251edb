"""Legacy `nvidia.com/mig-<profile>: 1` pod specs on DRA nodes, through a DeviceClass `extendedResourceName`
(KEP-5004, GA in 1.37), alone and in a cluster that mixes device-plugin and DRA nodes.

Real: kube-apiserver, kube-scheduler (it makes the pod's `<pod>-extended-resources-*` claim and allocates it;
NodeResourcesFit counts the resource on device-plugin nodes), kube-controller-manager's resourceclaim
controller, kwok. SIMULATED at their API objects: NVIDIA's DRA kubelet plugin (fake_dra_driver.py, its slices) and,
on the device-plugin node, NVIDIA's device plugin (gpunodes.py: the node's capacity/allocatable).
"""

from __future__ import annotations

from collections import Counter

import pytest

from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.naming import resource_name
from migctl.core.model.gpu_config import GpuConfig

from .dra_harness import NO_DEVICES, DraCluster, Placed
from .waiting import wait_for

pytestmark = pytest.mark.cluster

MIG_1G = resource_name("1g.10gb")  # nvidia.com/mig-1g.10gb


def test_a_legacy_mig_request_is_served_from_slices_through_the_profile_class(dra_cluster: DraCluster) -> None:
    """Two `nvidia.com/mig-1g.10gb: 1` pods on a static DRA node with two 1g.10gb devices: the scheduler maps the
    resource to `mig-1g-10gb.gpu.nvidia.com`, makes one claim per pod and allocates a 1g.10gb device to each; the
    pod status names the claim and the container. A third pod stays Pending. Without the class (the mutation:
    install only the chart's classes) the first pod would stay Pending too."""
    dra_cluster.install_classes("h100-80gb")
    layout = [Placement("1g.10gb", 0, 1), Placement("1g.10gb", 1, 1), Placement("3g.40gb", 4, 4)]
    node = dra_cluster.dra_node("legacy", "h100-80gb", 1, mode="static", layouts=[layout]).node
    for name in ("a", "b", "c"):
        dra_cluster.resource_pod(name, {MIG_1G: 1})
    got = {dra_cluster.wait_placed(n).devices for n in ("a", "b")}
    assert got == {(f"{node}/gpu-0-mig-1g10gb-19-0",), (f"{node}/gpu-0-mig-1g10gb-19-1",)}
    status = dra_cluster.pod("a")["status"]["extendedResourceClaimStatus"]
    assert status["requestMappings"] == [
        {"containerName": "main", "requestName": "container-0-request-0", "resourceName": MIG_1G}
    ]
    claim = dra_cluster.claim(status["resourceClaimName"])
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == "mig-1g-10gb.gpu.nvidia.com"
    assert NO_DEVICES in dra_cluster.wait_unschedulable("c")


def test_a_mixed_cluster_serves_one_resource_name_from_device_plugin_and_dra_nodes(dra_cluster: DraCluster) -> None:
    """One device-plugin node advertising `nvidia.com/mig-1g.10gb: 3` in allocatable and one DRA node with two
    1g.10gb devices: five legacy pods all run, three on the device-plugin node with no claim (node accounting)
    and two on the DRA node, each with an allocated claim; a sixth stays Pending."""
    dra_cluster.install_classes("h100-80gb")
    dp = dra_cluster.device_plugin_node("dp", "h100-80gb", [GpuConfig.mig({"1g.10gb": 3, "4g.40gb": 1})])
    layout = [Placement("1g.10gb", 0, 1), Placement("1g.10gb", 1, 1)]
    dra = dra_cluster.dra_node("dra", "h100-80gb", 1, mode="static", layouts=[layout]).node
    names = [f"p{i}" for i in range(6)]
    for name in names:
        dra_cluster.resource_pod(name, {MIG_1G: 1})

    def settled() -> dict[str, object] | None:  # five placed, one refused; which five is the scheduler's choice
        states = {n: dra_cluster.placed(n) or dra_cluster.unschedulable(n) for n in names}
        return states if all(states.values()) and sum(isinstance(v, str) for v in states.values()) == 1 else None

    states = wait_for("five pods Running and one Unschedulable", settled)
    placed = {n: v for n, v in states.items() if isinstance(v, Placed)}
    assert Counter(p.node for p in placed.values()) == {dp: 3, dra: 2}, placed
    assert all(p.claim == "" for p in placed.values() if p.node == dp)
    dra_devices = sorted(d for p in placed.values() if p.node == dra for d in p.devices)
    assert dra_devices == [f"{dra}/gpu-0-mig-1g10gb-19-0", f"{dra}/gpu-0-mig-1g10gb-19-1"]
    (pending,) = set(names) - set(placed)
    refusal = str(states[pending])  # one verdict per node: device plugin's and DRA's
    assert f"Insufficient {MIG_1G}" in refusal and NO_DEVICES in refusal, refusal
