"""mig-parted configuration files: render per-GPU layouts, and parse what the GPU Operator ships.

Format (NVIDIA/mig-parted api/spec/v1): `version: v1` and `mig-configs`, a map from a config name to a list of
entries. Each entry selects GPUs by `devices` (`all` or indices) and an optional `device-filter` (PCI ids such
as `0x233010DE`), and sets `mig-enabled` and `mig-devices` (profile -> count). mig-parted applies every matching
entry in order, so for one GPU the last matching entry wins; GPUs matched by no entry are left untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from migctl.core.geometry import CanonicalLayout, canonical, describe
from migctl.core.naming import parse_profile_name
from migctl.errors import InputError, from_validation_error

# libyaml when present: snapshots and mig-parted configs with hundreds of entries parse ~10x faster.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

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


class ConfigEntry(BaseModel):
    """One entry of a named mig-parted config (field names as mig-parted spells them)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    device_filter: str | list[str] | None = Field(default=None, alias="device-filter")
    devices: Literal["all"] | list[Annotated[int, Field(ge=0)]]
    mig_enabled: bool = Field(alias="mig-enabled")
    mig_devices: dict[str, Annotated[int, Field(ge=0)]] | None = Field(default=None, alias="mig-devices")

    @field_validator("mig_devices")
    @classmethod
    def _profile_keys(cls, v: dict[str, int] | None) -> dict[str, int] | None:
        for key in v or {}:
            parse_profile_name(key)  # ValueError names the key and the expected form
        if v and all(c == 0 for c in v.values()):
            raise ValueError("all counts for all MIG profiles are 0")
        return v

    @model_validator(mode="after")
    def _enabled_rules(self) -> ConfigEntry:
        if not self.mig_enabled and self.mig_devices:
            raise ValueError("mig-devices must be empty or absent when mig-enabled is false")
        if self.mig_enabled and self.mig_devices is None:
            raise ValueError("mig-devices is required when mig-enabled is true (it may be {})")
        return self

    def filters(self) -> tuple[str, ...]:
        f = self.device_filter
        if f is None:
            return ()
        return tuple(x.upper().replace("0X", "0x") for x in ([f] if isinstance(f, str) else f))

    def matches(self, index: int, pci_id: str | None) -> bool:
        if self.devices != "all" and index not in self.devices:
            return False
        filters = self.filters()
        if not filters:
            return True
        if pci_id is None:
            return False
        wanted = pci_id.upper().replace("0X", "0x")
        return any(f.split(":")[0] == wanted for f in filters)


class MigPartedConfig(BaseModel):
    """A whole mig-parted config file."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    version: Literal["v1"]
    mig_configs: dict[str, Annotated[list[ConfigEntry], Field(min_length=1)]] = Field(alias="mig-configs")

    def to_yaml(self) -> str:
        return dump_yaml(self)


def parse(text: str, source: str) -> MigPartedConfig:
    """Parse a mig-parted config; errors name the source, the config name and the field.

    Results are cached by text: the controller reads the same ConfigMap every cycle, and a config with a
    thousand named layouts takes most of a second to load (PyYAML builds its Python objects one by one). The
    model is frozen and nothing mutates its dicts, so sharing it is safe; errors are not cached."""
    return _parse(text, source)


def forget_parsed() -> None:
    """Drop the cached parses (a benchmark times a cold read)."""
    _parse.cache_clear()


@lru_cache(maxsize=8)
def _parse(text: str, source: str) -> MigPartedConfig:
    try:
        data = yaml.load(text, Loader=_LOADER)
    except yaml.YAMLError as e:
        raise InputError(source, f"broken YAML: {e}; expected a mig-parted config (version: v1)") from e
    if not isinstance(data, dict):
        raise InputError(source, "expected a mapping with `version: v1` and `mig-configs`")
    try:
        return MigPartedConfig.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(source, e) from e


def resolve(
    config: MigPartedConfig, name: str, gpus: Sequence[tuple[int, str | None]], source: str = "mig-parted config"
) -> dict[int, GpuConfig]:
    """Per-GPU configs that the named config gives the listed `(index, pci_id)` GPUs (untouched GPUs omitted)."""
    entries = config.mig_configs.get(name)
    if entries is None:
        known = ", ".join(sorted(config.mig_configs)) or "none"
        raise InputError(source, f"mig-configs.{name}: no such config (known: {known})")
    out: dict[int, GpuConfig] = {}
    for index, pci in gpus:
        for entry in entries:
            if entry.matches(index, pci):
                if entry.mig_enabled:
                    out[index] = GpuConfig.mig(entry.mig_devices or {})
                else:
                    out[index] = GpuConfig.disabled()
    return out


def _grouped(node: NodeConfig) -> list[tuple[list[int], GpuConfig]]:
    groups: dict[GpuConfig, list[int]] = {}
    for index in sorted(node):
        groups.setdefault(node[index], []).append(index)
    return sorted(((idx, cfg) for cfg, idx in groups.items()), key=lambda g: g[0][0])


def config_name(node: NodeConfig) -> str:
    """Deterministic name for a per-GPU layout: the same layout always gives the same name (a label value)."""
    canon = [[idx, cfg.mig_enabled, [list(x) for x in cfg.layout]] for idx, cfg in _grouped(node)]
    digest = hashlib.sha256(json.dumps(canon, separators=(",", ":")).encode()).hexdigest()[:12]
    return CONFIG_PREFIX + digest


def entries_for(node: NodeConfig, device_filter: str | None = None) -> list[ConfigEntry]:
    """mig-parted entries for one node, identical GPUs grouped (`devices: [0, 1]`)."""
    out = []
    for indices, cfg in _grouped(node):
        out.append(
            ConfigEntry(
                device_filter=device_filter,
                devices=indices,
                mig_enabled=cfg.mig_enabled,
                mig_devices=dict(cfg.layout) if cfg.mig_enabled else None,
            )
        )
    return out


def render(configs: Mapping[str, NodeConfig], base: MigPartedConfig | None = None) -> MigPartedConfig:
    """A config file holding `base`'s configs plus one named config per node layout."""
    merged: dict[str, list[ConfigEntry]] = dict(base.mig_configs) if base else {}
    for name, node in sorted(configs.items()):
        merged[name] = entries_for(node)
    return MigPartedConfig(version="v1", mig_configs=dict(sorted(merged.items())))


def dump_yaml(config: MigPartedConfig) -> str:
    """YAML the way mig-parted examples write it (stable key order, no nulls)."""
    data: dict[str, Any] = {"version": config.version, "mig-configs": {}}
    for name, entries in config.mig_configs.items():
        data["mig-configs"][name] = [e.model_dump(by_alias=True, exclude_none=True) for e in entries]
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
