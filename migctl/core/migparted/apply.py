"""Applying a mig-parted config to a node's GPUs, as mig-parted does: what each GPU gets from a named config.

mig-parted applies every entry of the named config that matches a GPU, in order, so the last matching entry
wins; an entry matches by `devices` (`all` or indices) and by its `device-filter` (PCI ids, read by the release's
rules in `migparted_rules`). A GPU no entry touches keeps what it has, and one whose match depends on a PCI id
migctl does not know is left unknown: in both cases the reader does not learn the GPU's layout from the config.
"""

from __future__ import annotations

from collections.abc import Sequence

from migctl.core.migparted.config import ConfigEntry, MigPartedConfig
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.text.migparted_rules import NEWEST, DeviceId, Version
from migctl.errors import InputError

GpuIds = Sequence[DeviceId | str | None]


def resolve(
    config: MigPartedConfig,
    name: str,
    gpus: Sequence[tuple[int, DeviceId | str | None]],
    source: str = "mig-parted config",
    version: Version = NEWEST,
) -> dict[int, GpuConfig]:
    """Per-GPU configs that the named config gives the listed `(index, pci_id)` GPUs.

    GPUs no entry touches are omitted, and so are GPUs for which an entry's match cannot be told (a filter and
    an unknown id): in both cases the caller does not know the GPU's layout from this config."""
    return resolve_candidates(config, name, [(i, [pci]) for i, pci in gpus], source, version)


def resolve_candidates(
    config: MigPartedConfig,
    name: str,
    gpus: Sequence[tuple[int, GpuIds]],
    source: str = "mig-parted config",
    version: Version = NEWEST,
) -> dict[int, GpuConfig]:
    """As `resolve`, for GPUs whose own PCI id is one of several candidates: a GPU gets a config only when every
    candidate id gives it the same one (so the answer does not depend on which id the GPU really has)."""
    entries = config.mig_configs.get(name)
    if entries is None:
        skipped = next(
            (s for s in config.skipped if s.startswith(f"mig-configs.{name}:") or s.startswith(f"mig-configs.{name}[")),
            None,
        )
        if skipped:
            raise InputError(source, skipped.replace("; config skipped", "; the config is unreadable"))
        known = ", ".join(sorted(config.mig_configs)) or "none"
        raise InputError(source, f"mig-configs.{name}: no such config (known: {known})")
    if not any(e.filters() for e in entries):  # the id decides nothing: each entry given to its devices, in order
        given: dict[int, GpuConfig] = {}
        wanted = [index for index, _ in gpus]
        asked = set(wanted)
        for e in entries:
            for index in wanted if e.devices == "all" else [i for i in e.devices if i in asked]:
                given[index] = e.config  # the last matching entry wins
        return {index: given[index] for index in wanted if index in given}
    out: dict[int, GpuConfig] = {}
    for index, candidates in gpus:
        results = {_apply(entries, index, pci, version) for pci in candidates or [None]}
        if len(results) == 1:
            (result,) = results
            if isinstance(result, GpuConfig):
                out[index] = result
    return out


def _apply(
    entries: Sequence[ConfigEntry], index: int, pci: DeviceId | str | None, version: Version
) -> GpuConfig | str | None:
    """What the entries give one GPU: a config, None (untouched) or "unknown"."""
    got: GpuConfig | None = None
    for entry in entries:
        hit = entry.matches(index, pci, version)
        if hit is None:
            return "unknown"
        if hit:
            got = entry.config
    return got
