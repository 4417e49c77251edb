"""mig-parted configuration files: render per-GPU layouts, and read what the GPU Operator ships as mig-parted does.

Format (NVIDIA/mig-parted api/spec/v1): `version: v1` and `mig-configs`, a map from a config name to a list of
entries. Each entry selects GPUs by `devices` (`all` or indices) and an optional `device-filter` (PCI ids such
as `0x233010DE`), and sets `mig-enabled` and `mig-devices` (profile -> count). mig-parted applies every matching
entry in order, so for one GPU the last matching entry wins; GPUs matched by no entry are left untouched
(`migparted/apply.py` reads a config that way).

Reading follows mig-parted's Go decoder (YAML turned into JSON, then `encoding/json`): `mig-enabled` must be a
bool, counts and device indices integers (`2.0` passes, as it does there; `'2'` does not), `devices` `all` or a
list, names in mig-parted's grammar for the configured release (`migparted_rules`). Where mig-parted rejects the
whole file, migctl drops only the config at fault and says which (`MigPartedConfig.skipped`): one unreadable
config costs only the nodes labelled with it, and is never copied into a file mig-manager reads.
"""

from __future__ import annotations

import json
import marshal
from collections.abc import Mapping
from functools import cached_property, lru_cache
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from migctl.core.model.gpu_config import GpuConfig, NodeConfig, grouped
from migctl.core.text.documents import YAML_LOADER as _LOADER
from migctl.core.text.documents import json_deeper_than
from migctl.core.text.migparted_rules import NEWEST, DeviceId, Version, filters_match, name_problem, parse_pci_id
from migctl.errors import InputError, Problem, from_validation_error


def _go_int(v: Any) -> Any:
    """encoding/json into an int: JSON null leaves 0; a YAML float with no fraction arrives as an integer."""
    if v is None:
        return 0
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def _go_ints(v: Any) -> Any:
    return [_go_int(x) for x in v] if isinstance(v, list) else v


def _go_counts(v: Any) -> Any:
    return {(k if isinstance(k, str) else _yaml_key(k)): _go_int(c) for k, c in v.items()} if isinstance(v, dict) else v


def _go_filter(v: Any) -> Any:
    """A null filter is no filter (Go reads it as "", which matches all); a null list element is "" (matches
    nothing)."""
    return ["" if x is None else x for x in v] if isinstance(v, list) else v


def _go_bool(v: Any) -> Any:
    return False if v is None else v


Int64 = Annotated[int, Field(ge=-(2**63), lt=2**63)]


class ConfigEntry(BaseModel):
    """One entry of a named mig-parted config (field names as mig-parted spells them, types as strict)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, strict=True)

    device_filter: Annotated[str | list[str] | None, BeforeValidator(_go_filter)] = Field(
        default=None, alias="device-filter"
    )
    devices: Annotated[Literal["all"] | list[Int64], BeforeValidator(_go_ints)]
    mig_enabled: Annotated[bool, BeforeValidator(_go_bool)] = Field(alias="mig-enabled")
    mig_devices: Annotated[dict[str, Annotated[int, Field(ge=0, lt=2**63)]] | None, BeforeValidator(_go_counts)] = (
        Field(default=None, alias="mig-devices")
    )

    @field_validator("mig_devices")
    @classmethod
    def _profile_keys(cls, v: dict[str, int] | None, info: ValidationInfo) -> dict[str, int] | None:
        version: Version = (info.context or {}).get("version", NEWEST)
        for key in v or {}:
            problem = name_problem(key, version)
            if problem:
                raise ValueError(problem)
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
        """The filter strings as mig-parted holds them: `()` when absent or "" (both match every GPU)."""
        return self._filters

    @cached_property
    def _filters(self) -> tuple[str, ...]:  # cached (the model is frozen): resolving asks it per GPU
        f = self.device_filter
        if f is None or f == "":
            return ()
        return (f,) if isinstance(f, str) else tuple(f)

    @cached_property
    def config(self) -> GpuConfig:
        """What this entry gives a GPU it applies to (cached: a thousand nodes share a few hundred entries)."""
        return GpuConfig.mig(self.mig_devices or {}) if self.mig_enabled else GpuConfig.disabled()

    def matches(self, index: int, device: DeviceId | str | None, version: Version = NEWEST) -> bool | None:
        """Whether this entry applies to GPU `index` with PCI id `device`; None when that cannot be told
        (a filter and no id, or a subsystem-qualified filter and no subsystem id)."""
        if self.devices != "all" and index not in self.devices:
            return False
        filters = self._filters
        if not filters:
            return True
        if device is None:
            return None
        return filters_match(filters, parse_pci_id(device) if isinstance(device, str) else device, version)


class MigPartedConfig(BaseModel):
    """A whole mig-parted config file; `skipped` names each config dropped on reading, and why."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    version: Literal["v1"]
    mig_configs: dict[str, Annotated[list[ConfigEntry], Field(min_length=1)]] = Field(alias="mig-configs")
    skipped: tuple[str, ...] = ()

    def to_yaml(self) -> str:
        return dump_yaml(self)

    def profile_names(self) -> set[str]:
        return {k for entries in self.mig_configs.values() for e in entries for k in (e.mig_devices or {})}


def parse(text: str, source: str, version: Version = NEWEST) -> MigPartedConfig:
    """Parse a mig-parted config as mig-parted `version` reads it; errors name the source, config and field.

    A problem with the file as a whole (YAML, `version`, the shape of `mig-configs`) is an InputError; a problem
    inside one named config drops that config only, listed in `skipped`.

    Results are cached by text: the controller reads the same ConfigMap every cycle, and a config with a
    thousand named layouts takes most of a second to load (PyYAML builds its Python objects one by one). The
    model is frozen and nothing mutates its dicts, so sharing it is safe; errors are not cached."""
    return _parse(text, source, version)


def forget_parsed() -> None:
    """Drop the cached parses (a benchmark times a cold read)."""
    _parse.cache_clear()


def _yaml_key(key: object) -> str:
    """sigs.k8s.io/yaml turns non-string map keys into strings (`true`, `1`)."""
    if isinstance(key, bool):
        return "true" if key else "false"
    return str(key)


# The JSON reader's limits (YAML's are libyaml's own; a ConfigMap holds at most 1 MiB): a file larger than this or
# nested deeper is refused before any of it is validated. A mig-parted config nests 5 levels deep.
MAX_JSON_CHARS = 64 << 20
MAX_JSON_DEPTH = 32


def _load(text: str, source: str) -> tuple[Any, bool]:
    """The document of a config file: JSON when the text is JSON (what migctl writes: JSON is YAML, and C's
    JSON parser reads a thousand configs about 100x faster than PyYAML), YAML otherwise; and whether it was JSON."""
    if text.lstrip().startswith("{"):
        if len(text) > MAX_JSON_CHARS:
            raise InputError(source, f"{len(text)} characters; at most {MAX_JSON_CHARS} are read")
        try:
            data = json.loads(text)
        except RecursionError as e:
            raise InputError(source, f"nested deeper than {MAX_JSON_DEPTH} levels") from e
        except ValueError:
            pass  # YAML flow style (`{version: v1, ...}`) is not JSON: the YAML reader decides
        else:
            if json_deeper_than(text, MAX_JSON_DEPTH):
                raise InputError(source, f"nested deeper than {MAX_JSON_DEPTH} levels")
            return data, True
    try:
        return yaml.load(text, Loader=_LOADER), False
    except yaml.YAMLError as e:
        raise InputError(source, f"broken YAML: {e}; expected a mig-parted config (version: v1)") from e


@lru_cache(maxsize=8)
def _parse(text: str, source: str, version: Version) -> MigPartedConfig:
    data, from_json = _load(text, source)
    if not isinstance(data, dict):
        raise InputError(source, "expected a mapping with `version: v1` and `mig-configs`")
    if "version" not in data:
        raise InputError(source, [Problem("version", "required field is missing (expected v1)")])
    if data["version"] != "v1":
        raise InputError(source, [Problem("version", f"unknown version {data['version']!r}; expected 'v1'")])
    unexpected = [str(k) for k in data if k not in ("version", "mig-configs")]
    if unexpected:
        raise InputError(
            source, [Problem(k, "unexpected field (expected only version and mig-configs)") for k in unexpected]
        )
    raw = data.get("mig-configs")
    if "mig-configs" in data and not isinstance(raw, dict):
        raise InputError(source, [Problem("mig-configs", "expected a map from config name to a list of entries")])
    if "mig-configs" in data and not raw:
        raise InputError(source, [Problem("mig-configs", "at least one config is required")])
    configs: dict[str, list[ConfigEntry]] = {}
    skipped: list[str] = []
    seen: dict[bytes, ConfigEntry] | None = {} if from_json else None
    for key, entries in (raw or {}).items():
        name = _yaml_key(key)
        where = f"mig-configs.{name}"
        if not isinstance(entries, list) or not entries:
            skipped.append(f"{where}: expected a non-empty list of entries; config skipped")
            continue
        read, problems = [], []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict):
                problems.append(f"{where}[{i}]: expected a map of fields, got {type(entry).__name__}")
                continue
            try:
                read.append(_entry(entry, version, seen))
            except ValidationError as e:
                problems.extend(str(p) for p in from_validation_error(source, e, prefix=f"{where}[{i}]").problems)
        if problems:
            skipped.append("; ".join(problems) + "; config skipped")
        else:
            configs[name] = read
    return MigPartedConfig(version="v1", mig_configs=configs, skipped=tuple(skipped))


def _entry(entry: dict[str, Any], version: Version, seen: dict[bytes, ConfigEntry] | None) -> ConfigEntry:
    """One entry validated; with `seen` (a JSON text, whose keys are all strings) entries spelled alike are
    validated once: a thousand node configs repeat a few hundred distinct entries, and the model is frozen.
    Spelled alike: the same `marshal` encoding, which writes what a JSON parser makes (str, int, float, bool,
    None, lists, dicts in order) with each value's type and reads it back exactly, so it differs wherever the
    values or their types do (`1`, `1.0` and `true` are three spellings); and C writes it faster than `repr`."""
    if seen is None:
        return ConfigEntry.model_validate(entry, context={"version": version})
    key = marshal.dumps(entry)
    if key not in seen:
        seen[key] = ConfigEntry.model_validate(entry, context={"version": version})
    return seen[key]


def without_unreadable(config: MigPartedConfig, version: Version) -> MigPartedConfig:
    """`config` less every config holding a name mig-parted `version` cannot read (listed in `skipped`)."""
    bad: dict[str, str] = {}
    for name, entries in config.mig_configs.items():
        for e in entries:
            for key in e.mig_devices or {}:
                problem = name_problem(key, version)
                if problem and name not in bad:
                    bad[name] = f"mig-configs.{name}: {problem}; config skipped"
    if not bad:
        return config
    kept = {n: e for n, e in config.mig_configs.items() if n not in bad}
    return MigPartedConfig(version="v1", mig_configs=kept, skipped=(*config.skipped, *bad.values()))


def entries_for(node: NodeConfig, device_filter: str | None = None) -> list[ConfigEntry]:
    """mig-parted entries for one node, identical GPUs grouped (`devices: [0, 1]`)."""
    out = []
    for indices, cfg in grouped(node):
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
    """The config as JSON, which is also YAML (mig-parted reads it as it reads YAML): stable key order, no nulls,
    one named config per line. JSON because migctl reads its own file back every cycle and C's JSON parser reads
    it about 100x faster than a YAML parser (`_load`)."""
    lines = [f'{{"version": {json.dumps(config.version)}, "mig-configs": {{']
    items = list(config.mig_configs.items())
    for i, (name, entries) in enumerate(items):
        body = json.dumps([e.model_dump(by_alias=True, exclude_none=True) for e in entries])
        lines.append(f"  {json.dumps(name)}: {body}{',' if i + 1 < len(items) else ''}")
    lines.append("}}")
    return "\n".join(lines) + "\n"
