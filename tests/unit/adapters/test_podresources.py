"""The PodResources client against a real gRPC server on a unix socket (tests/unit/fake_podresources.py): the
kubelet itself cannot run here, so only the kubelet is simulated, at its real interface (the v1 wire format)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from migctl.adapters.podresources import Holder, PodResourcesClient, PodResourcesError
from tests.unit.fake_podresources import serve_kubelet

MIG = "nvidia.com/mig-1g.5gb"


def test_list_maps_each_device_to_its_pod(tmp_path: Path) -> None:
    with serve_kubelet(tmp_path) as (kubelet, socket):
        kubelet.give("team-a", "train-0", MIG, "MIG-aaaa")
        kubelet.give("team-b", "infer-1", "nvidia.com/mig-3g.20gb", "MIG-bbbb::2", container="side")
        holders = PodResourcesClient(socket, timeout_s=5).holders()
    assert holders == {
        "MIG-aaaa": Holder("team-a", "train-0", "main", MIG),
        "MIG-bbbb": Holder("team-b", "infer-1", "side", "nvidia.com/mig-3g.20gb"),  # `::2` replica suffix dropped
    }


def test_allocatable_lists_healthy_devices_per_resource(tmp_path: Path) -> None:
    with serve_kubelet(tmp_path) as (kubelet, socket):
        kubelet.allocatable = {MIG: ["MIG-aaaa", "MIG-cccc"]}
        assert PodResourcesClient(socket, timeout_s=5).allocatable() == {MIG: frozenset({"MIG-aaaa", "MIG-cccc"})}


def test_a_missing_socket_fails_closed(tmp_path: Path) -> None:
    with pytest.raises(PodResourcesError, match="does not exist"):
        PodResourcesClient(tmp_path / "absent.sock", timeout_s=1).holders()


def test_a_refused_call_fails_closed_with_the_kubelets_code(tmp_path: Path) -> None:
    with serve_kubelet(tmp_path) as (kubelet, socket):
        kubelet.fail = grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(PodResourcesError, match="RESOURCE_EXHAUSTED: rejected by rate limit"):
            PodResourcesClient(socket, timeout_s=5).holders()


def test_a_dead_socket_fails_closed(tmp_path: Path) -> None:
    """The socket file is left behind by a stopped kubelet: the call fails (UNAVAILABLE), it does not hang."""
    with serve_kubelet(tmp_path) as (_, socket):
        pass
    socket.touch()
    with pytest.raises(PodResourcesError, match="UNAVAILABLE"):
        PodResourcesClient(socket, timeout_s=2).holders()
