"""Re-advertising MIG devices by restarting NVIDIA's kubelet plugin, as migctl's static-MIG actuator must (the
plugin does not rescan NVML), and what the pool generation does meanwhile.

Real: kube-apiserver, kube-scheduler, kube-controller-manager's resourceclaim controller, kwok. SIMULATED at its
API objects: the plugin and the DaemonSet controller that recreates its pod (fake_dra_driver.py), whose slice
writes follow the real slice controller's rules; the hardware is the `layouts` list the test changes. These tests
pin the fake's behaviour to the rules docs/testing.md states, so the lead's end-to-end tests rest on them.
"""

from __future__ import annotations

import pytest

from migctl.core.hardware.geometry import Placement

from .dra_harness import NO_DEVICES, DraCluster, request
from .fake_dra_driver import DAEMONSET, PLUGIN_LABELS, PLUGIN_NAMESPACE, raw
from .waiting import wait_for

pytestmark = pytest.mark.cluster


def _plugin_pods(cluster: DraCluster, node: str) -> list[str]:
    selector = ",".join(f"{k}={v}" for k, v in PLUGIN_LABELS.items())
    pods = raw(
        cluster.core.list_namespaced_pod,
        PLUGIN_NAMESPACE,
        label_selector=selector,
        field_selector=f"spec.nodeName={node}",
    )["items"]
    return [p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")]


def test_a_pending_claim_is_served_once_the_plugin_pod_is_deleted_after_a_reshape(dra_cluster: DraCluster) -> None:
    """Static MIG: a 3g.40gb claim is Unschedulable on a GPU with 7x 1g.10gb. The hardware is reshaped (the
    test's stand-in for the in-place agent) but nothing changes until the plugin pod is deleted; then the pod is
    recreated (Running, the chart's labels, owned by the DaemonSet), the one slice is updated IN PLACE (same
    name and uid) with generation still 1, and the scheduler allocates the new device."""
    layout = [Placement("1g.10gb", i, 1) for i in range(7)]
    plugin = dra_cluster.dra_node("reshape", "h100-80gb", 1, mode="static", layouts=[layout])
    node = plugin.node
    (old_pod,) = wait_for("the plugin pod", lambda: _plugin_pods(dra_cluster, node))
    assert (
        raw(dra_cluster.core.read_namespaced_pod, old_pod, PLUGIN_NAMESPACE)["metadata"]["ownerReferences"][0]["name"]
        == DAEMONSET
    )
    (before,) = plugin.publisher.current()

    dra_cluster.claim_pod("big", dra_cluster.template("big", request("3g.40gb")))
    assert NO_DEVICES in dra_cluster.wait_unschedulable("big")
    layout[:] = [Placement("3g.40gb", 0, 4), Placement("1g.10gb", 4, 1)]  # reshaped; the plugin does not know
    assert plugin.publisher.current()[0]["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]

    plugin.restart()
    plugin.wait_started(2)
    (after,) = plugin.publisher.current()
    assert (after["metadata"]["name"], after["metadata"]["uid"]) == (
        before["metadata"]["name"],
        before["metadata"]["uid"],
    )
    assert after["spec"]["pool"]["generation"] == before["spec"]["pool"]["generation"] == 1
    assert sorted(d["name"] for d in after["spec"]["devices"]) == ["gpu-0-mig-1g10gb-19-4", "gpu-0-mig-3g40gb-9-0"]
    assert dra_cluster.wait_placed("big").devices == (f"{node}/gpu-0-mig-3g40gb-9-0",)
    (new_pod,) = wait_for("a new plugin pod", lambda: [p for p in _plugin_pods(dra_cluster, node) if p != old_pod])
    assert wait_for(
        "new plugin pod Running",
        lambda: dra_cluster.core.read_namespaced_pod(new_pod, PLUGIN_NAMESPACE).status.phase == "Running",
    )


def test_a_plugin_down_longer_than_the_kubelet_wipe_delay_blanks_the_node_and_restarts_the_generation(
    dra_cluster: DraCluster,
) -> None:
    """With the plugin down past the kubelet's wiping delay (shortened here from 30 s), the node's slices are
    deleted, so the node offers nothing for a while; the new plugin creates a new slice (new name) and the pool
    generation starts again at 1."""
    layout = [Placement("1g.10gb", 0, 1)]
    plugin = dra_cluster.dra_node(
        "wiped", "h100-80gb", 1, mode="static", layouts=[layout], startup_s=1.5, wipe_after_s=0.3
    )
    (before,) = plugin.publisher.current()
    plugin.restart()
    wait_for("the kubelet to wipe the node's slices", lambda: not plugin.publisher.current(), timeout=10)
    plugin.wait_started(2)
    (after,) = plugin.publisher.current()
    assert plugin.wipes == 1
    assert after["metadata"]["name"] != before["metadata"]["name"]
    assert after["spec"]["pool"]["generation"] == 1


def test_a_dynamic_pool_republishes_nothing_unless_the_gpus_changed(dra_cluster: DraCluster) -> None:
    """DynamicMIG (a counter slice and one slice per GPU): a restart with the same GPUs writes nothing and keeps
    the generation; a change in more than one slice (MIG mode turned on: the whole-GPU devices go) bumps it."""
    plugin = dra_cluster.dra_node("dynrestart", "a100-40gb", 2, mode="dynamic")
    publisher = plugin.publisher
    assert publisher is not None
    names = [s["metadata"]["name"] for s in publisher.current()]
    assert [n.split("-", 1)[0] for n in names] == ["00000", "00001", "00002"]
    writes = publisher.writes
    plugin.restart()
    plugin.wait_started(2)
    assert publisher.writes == writes and publisher.generation() == 1
    plugin.mig_mode_on = True
    plugin.restart()
    plugin.wait_started(3)
    assert publisher.generation() == 2
    assert [s["metadata"]["name"] for s in publisher.current()] == names
    assert not any(d["name"] in ("gpu-0", "gpu-1") for s in publisher.current() for d in s["spec"].get("devices") or [])
