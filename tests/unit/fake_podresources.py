"""A real gRPC server implementing the kubelet's PodResources v1 service on a unix socket, standing in for the
kubelet (which cannot run here). It speaks the published wire format through the same generated modules the
agent uses; tests set what `List` and `GetAllocatableResources` answer, or make a call fail with a gRPC code."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import grpc

from migctl.adapters.podresources import api_pb2, api_pb2_grpc

# (namespace, pod, container) -> resource -> device ids
Allocations = Mapping[tuple[str, str, str], Mapping[str, list[str]]]


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    def __init__(self) -> None:
        self.allocations: dict[tuple[str, str, str], dict[str, list[str]]] = {}
        self.allocatable: dict[str, list[str]] = {}
        self.fail: grpc.StatusCode | None = None
        self.calls: list[str] = []

    def give(self, namespace: str, pod: str, resource: str, *device_ids: str, container: str = "main") -> None:
        self.allocations.setdefault((namespace, pod, container), {}).setdefault(resource, []).extend(device_ids)

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802 - the gRPC method name
        self.calls.append("List")
        if self.fail is not None:
            context.abort(self.fail, "rejected by rate limit")
        pods: dict[tuple[str, str], Any] = {}
        for (ns, name, container), resources in self.allocations.items():
            pod = pods.setdefault((ns, name), api_pb2.PodResources(name=name, namespace=ns))
            devices = [api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in resources.items()]
            pod.containers.append(api_pb2.ContainerResources(name=container, devices=devices))
        return api_pb2.ListPodResourcesResponse(pod_resources=list(pods.values()))

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:  # noqa: N802
        self.calls.append("GetAllocatableResources")
        if self.fail is not None:
            context.abort(self.fail, "rejected by rate limit")
        devices = [api_pb2.ContainerDevices(resource_name=r, device_ids=ids) for r, ids in self.allocatable.items()]
        return api_pb2.AllocatableResourcesResponse(devices=devices)


@contextmanager
def serve_kubelet(directory: Path) -> Iterator[tuple[FakeKubelet, Path]]:
    """Serve a FakeKubelet on `directory`/kubelet.sock until the block ends."""
    socket = directory / "kubelet.sock"
    kubelet = FakeKubelet()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)  # type: ignore[no-untyped-call]
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield kubelet, socket
    finally:
        server.stop(grace=None)
