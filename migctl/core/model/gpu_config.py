"""What one GPU, and one node, should look like, and the deterministic name of a node's layout.

The records the plan and the cluster snapshot hold. They live below mig-parted's file format (`migparted/config`
renders them into a file), so the model does not import the format that is written from it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass

from migctl.core.hardware.geometry import CanonicalLayout, canonical, describe

CONFIG_PREFIX = "migctl-"


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """What one GPU should look like: MIG off (whole GPU), or MIG on with a layout."""

    mig_enabled: bool
    layout: CanonicalLayout = ()

    @staticmethod
    def disabled() -> GpuConfig:
        return GpuConfig(False, ())

    @staticmethod
    def mig(layout: Mapping[str, int] | CanonicalLayout) -> GpuConfig:
        return GpuConfig(True, canonical(layout))

    def __str__(self) -> str:
        return describe(self.layout) if self.mig_enabled else "MIG disabled"


NodeConfig = Mapping[int, GpuConfig]


def grouped(node: NodeConfig) -> list[tuple[list[int], GpuConfig]]:
    """The GPU indices that share each config, by first index: one mig-parted entry per group, one name."""
    groups: dict[GpuConfig, list[int]] = {}
    for index in sorted(node):
        groups.setdefault(node[index], []).append(index)
    return sorted(((idx, cfg) for cfg, idx in groups.items()), key=lambda g: g[0][0])


def config_name(node: NodeConfig) -> str:
    """Deterministic name for a per-GPU layout: the same layout always gives the same name (a label value)."""
    canon = [[idx, cfg.mig_enabled, [list(x) for x in cfg.layout]] for idx, cfg in grouped(node)]
    digest = hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()[:12]
    return CONFIG_PREFIX + digest
