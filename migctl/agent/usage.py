"""Per-instance usage from the authority: the kubelet's allocations added to NVML's processes.

A MIG device the kubelet has handed to a pod whose process has not started yet shows no NVML process, yet it is
taken. On in-place nodes the agent marks such instances busy in the inventory it publishes, and when the kubelet
cannot be read, every instance NVML does not already call busy is published as unknown (None): the planner then
treats the node's usage as unknown rather than free.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from migctl.adapters.podresources import Holder, PodResourcesError
from migctl.agent.runner import Reader
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice

log = logging.getLogger(__name__)


class Kubelet(Protocol):
    def holders(self) -> Mapping[str, Holder]: ...


class KubeletAwareReader:
    def __init__(self, reader: Reader, kubelet: Kubelet) -> None:
        self.reader, self.kubelet = reader, kubelet

    def read(self) -> Inventory:
        inventory = self.reader.read()
        try:
            holders: Mapping[str, Holder] | None = self.kubelet.holders()
        except PodResourcesError as e:
            log.warning("instance usage unknown: %s", e)
            holders = None
        return inventory.model_copy(update={"gpus": tuple(_mark(g, holders) for g in inventory.gpus)})


def _mark(gpu: GpuInfo, holders: Mapping[str, Holder] | None) -> GpuInfo:
    if not gpu.instances:
        return gpu
    devices = tuple(_device(d, gpu.uuid, holders) for d in gpu.instances)
    states = [d.busy for d in devices]
    busy = True if any(states) else (None if None in states else False)
    return gpu.model_copy(update={"instances": devices, "busy": busy})


def _device(d: MigDevice, gpu_uuid: str, holders: Mapping[str, Holder] | None) -> MigDevice:
    if d.busy:
        return d
    if holders is None:
        return d.model_copy(update={"busy": None})
    if d.uuid in holders or f"MIG-{gpu_uuid}/{d.gi}" in {k.rsplit("/", 1)[0] for k in holders}:
        return d.model_copy(update={"busy": True})
    return d
