"""The kubelet's PodResources API (gRPC v1 over a unix socket): which pod holds which device.

The kubelet is the authority on what it has handed to a pod: a MIG device allocated to a pod whose process has not
started yet shows no NVML process, yet it is taken. `List` gives every device of every pod the kubelet tracks;
`GetAllocatableResources` the healthy devices it can hand out. Every failure (no socket, a timeout, the kubelet's
rate limit, an older kubelet without the API) raises `PodResourcesError`: callers fail closed and change nothing.

The generated modules (`api_pb2.py`, `api_pb2_grpc.py`) come from `api.proto` here through
`hack/gen-podresources.sh`; pyproject.toml pins protobuf and grpcio at or above the versions that generated them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from migctl.adapters.podresources import api_pb2, api_pb2_grpc
from migctl.errors import MigctlError

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
MAX_MESSAGE = 16 * 2**20  # a node with many pods; the kubelet's answer is small, but never cut one short


class PodResourcesError(MigctlError):
    """The kubelet could not be asked: nothing may be assumed free."""


@dataclass(frozen=True, slots=True)
class Holder:
    """A container the kubelet allocated a device to."""

    namespace: str
    pod: str
    container: str
    resource: str

    def __str__(self) -> str:
        return f"pod {self.namespace}/{self.pod} (container {self.container}, {self.resource})"


def device_key(device_id: str) -> str:
    """The device itself: a replicated (time-sliced) device is reported as `<uuid>::<n>` (device plugin)."""
    return device_id.split("::", 1)[0]


class PodResourcesClient:
    """One short-lived channel per call, so a kubelet restart (a new socket) needs no reconnect logic."""

    def __init__(self, socket: str | Path = DEFAULT_SOCKET, timeout_s: float = 10.0) -> None:
        self.socket = str(socket)
        self.timeout_s = timeout_s

    def _call(self, method: str, request: Any) -> Any:
        if not Path(self.socket).exists():
            raise PodResourcesError(
                f"the kubelet's PodResources socket {self.socket} does not exist (is the kubelet's pod-resources "
                "directory mounted into the agent?)"
            )
        options = [("grpc.max_receive_message_length", MAX_MESSAGE)]
        try:
            with grpc.insecure_channel(f"unix://{self.socket}", options=options) as channel:
                stub = api_pb2_grpc.PodResourcesListerStub(channel)
                return getattr(stub, method)(request, timeout=self.timeout_s)
        except grpc.RpcError as e:
            code = e.code() if isinstance(e, grpc.Call) else None
            detail = e.details() if isinstance(e, grpc.Call) else str(e)
            name = code.name if code is not None else "error"
            raise PodResourcesError(f"PodResources {method} on {self.socket} failed: {name}: {detail}") from e

    def holders(self) -> dict[str, Holder]:
        """Device id (a MIG UUID for MIG devices) -> the container it is allocated to, per `List`."""
        response = self._call("List", api_pb2.ListPodResourcesRequest())
        out: dict[str, Holder] = {}
        for pod in response.pod_resources:
            for container in pod.containers:
                for devices in container.devices:
                    for device_id in devices.device_ids:
                        holder = Holder(pod.namespace, pod.name, container.name, devices.resource_name)
                        out.setdefault(device_key(device_id), holder)
        return out

    def allocatable(self) -> dict[str, frozenset[str]]:
        """Resource name -> the healthy device ids the kubelet can hand out (empty while a plugin restarts)."""
        response = self._call("GetAllocatableResources", api_pb2.AllocatableResourcesRequest())
        out: dict[str, set[str]] = {}
        for devices in response.devices:
            out.setdefault(devices.resource_name, set()).update(device_key(d) for d in devices.device_ids)
        return {name: frozenset(ids) for name, ids in out.items()}
