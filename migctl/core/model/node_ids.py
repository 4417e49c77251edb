"""A node's own GPU PCI ids, which decide what a mig-parted config does to it (device filters).

mig-parted matches each GPU by the id it reads from that GPU's PCI config space. migctl learns it from the node
agent (NVML's PCI info, per GPU, subsystem included) or, without the agent, from the product name GFD labels
the node with, when the catalog knows which id that product has (H200 `0x2335` vs H200 NVL `0x233B`). Where
neither says, every id of the model stays a candidate, and a config is believed only where all candidates
give the same answer (`migparted/apply.resolve_candidates`): migctl never picks an id for a GPU.
"""

from __future__ import annotations

from migctl.core.hardware.gpu_model import Catalog, GpuModel
from migctl.core.model.inventory import Inventory
from migctl.core.text.migparted_rules import DeviceId, parse_pci_id


def gpu_ids(
    model: GpuModel, product: str, inventory: Inventory | None, count: int
) -> list[tuple[int, list[DeviceId | str | None]]]:
    """For GPUs 0..count-1: the PCI ids each may have (one where known; `[None]` where nothing is known)."""
    fallback: list[DeviceId | str | None] = [*model.pci_ids_for(product)] or [None]
    out: list[tuple[int, list[DeviceId | str | None]]] = []
    for i in range(count):
        gpu = inventory.gpu(i) if inventory is not None else None
        if gpu is not None and gpu.pci_device_id:
            sub = parse_pci_id(gpu.pci_subsystem_id).primary if gpu.pci_subsystem_id else None
            out.append((i, [DeviceId(parse_pci_id(gpu.pci_device_id).primary, sub)]))
        else:
            out.append((i, list(fallback)))
    return out


def model_by_pci(catalog: Catalog, inventory: Inventory | None) -> GpuModel | None:
    """The model of a node whose product name the catalog lacks, by the PCI id the agent read (B300, GB300:
    NVIDIA's configs give their ids, no source gives their NVML names)."""
    if inventory is None:
        return None
    ids = {g.pci_device_id for g in inventory.gpus if g.mig_capable and g.pci_device_id}
    models = {m.id: m for pci in ids if (m := catalog.match_pci(pci)) is not None}
    return next(iter(models.values())) if len(models) == 1 else None
