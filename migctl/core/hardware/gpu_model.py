"""The MIG profile catalog at run time: GPU models, their profiles, and matching a node to its model.

Plain frozen dataclasses, cheap to hash and compare in the planner's inner loops. They are built from the
versioned YAML files in `profiles/` by `migctl.core.hardware.catalog_files`; every value carries a confidence
(confirmed, observed, inferred, unconfirmed) so an inferred number is never presented as fact, and live values
(GFD labels, NVML) override catalog memory at run time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property, lru_cache

from migctl.core.hardware.naming import gfd_product, parse_profile_name, resource_name
from migctl.core.text.migparted_rules import Version, name_problem


class Confidence(StrEnum):
    """How a value is known (definitions in docs/profiles.md)."""

    CONFIRMED = "confirmed"  # NVIDIA document or code, or NVIDIA-repo issue with real output
    OBSERVED = "observed"  # real-hardware output from a third party
    INFERRED = "inferred"  # derived from confirmed rules; not seen on hardware
    UNCONFIRMED = "unconfirmed"  # a placeholder; measure before relying on it
    LIVE = "live"  # read from this cluster (GFD label or NVML) at run time


@dataclass(frozen=True, slots=True)
class Profile:
    """A GPU-instance profile of one model, ready for geometry and planning."""

    name: str
    base: str  # the name without media attributes
    attributes: str  # "", "+me", "+me.all", "+gfx", "-me"
    compute_slices: int
    memory_slices: int
    memory_mib: int
    max_instances: int
    placements: tuple[tuple[int, int], ...]
    profile_id: int | None
    memory_confidence: Confidence
    placements_confidence: Confidence
    confidence: Confidence

    @property
    def resource(self) -> str:
        return resource_name(self.name)


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model: its geometry and its profiles (base profiles first, then variants)."""

    id: str
    display_name: str
    nvml_names: tuple[str, ...]
    gfd_products: tuple[str, ...]
    pci_device_ids: tuple[str, ...]
    memory_mib: int
    memory_confidence: Confidence
    compute_slices: int
    placement_units: int
    max_instances: int
    profiles: tuple[Profile, ...]
    source_file: str = ""
    aliases: Mapping[str, str] = field(default_factory=dict)  # live name -> catalog name
    pci_by_product: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # product key -> its PCI ids

    def pci_ids_for(self, product: str) -> tuple[str, ...]:
        """The PCI ids a GPU sold under `product` can have: its own when the catalog knows the pairing, else
        every id of the model (a reader must then accept only answers that hold for all of them)."""
        return self.pci_by_product.get(product_key(product), self.pci_device_ids) if product else self.pci_device_ids

    def readable_by(self, version: Version) -> GpuModel:
        """This model less the profiles mig-parted `version` cannot name (`+me.all`, `-me` before v0.12.3):
        a layout holding one would fail the reconfiguration of every node reading the config file."""
        kept = tuple(p for p in self.profiles if name_problem(p.name, version) is None)
        return self if len(kept) == len(self.profiles) else replace(self, profiles=kept)

    def profile(self, name: str) -> Profile:
        for p in self.profiles:
            if p.name == name:
                return p
        raise KeyError(f"GPU model {self.id} has no MIG profile {name!r}")

    def has_profile(self, name: str) -> bool:
        return any(p.name == name for p in self.profiles)

    @property
    def full_profile(self) -> Profile:
        """The plain profile that spans every placement unit (7g on A100/H100, 4g on A30)."""
        for p in self.profiles:
            if not p.attributes and p.memory_slices == self.placement_units:
                return p
        raise LookupError(f"GPU model {self.id} has no full-GPU profile")

    @property
    def base_profiles(self) -> tuple[Profile, ...]:
        return tuple(p for p in self.profiles if not p.attributes)

    def with_live_memory(self, memory_mib: Mapping[str, int], total_mib: int | None = None) -> GpuModel:
        """Return a copy whose profile memory comes from the cluster (GFD `mig-<p>.memory` labels or NVML).

        Names move with drivers (A100-80GB `3g.39gb` vs `3g.40gb`): a live name the catalog lacks is matched to
        the catalog profile with the same compute slices and attributes and the closest memory, and that
        profile is renamed to the live name, so resource names follow what the device plugin advertises.
        """
        profiles = list(self.profiles)
        aliases = dict(self.aliases)
        for live_name, mib in sorted(memory_mib.items()):
            try:
                parsed = parse_profile_name(live_name)
            except ValueError:
                continue
            idx = next((i for i, p in enumerate(profiles) if p.name == live_name), None)
            if idx is None:
                candidates = [
                    i
                    for i, p in enumerate(profiles)
                    if p.compute_slices == parsed.compute_slices
                    and p.attributes == parsed.attributes
                    and p.name not in memory_mib
                ]
                if not candidates:
                    continue
                idx = min(candidates, key=lambda i: (abs(profiles[i].memory_mib - mib), profiles[i].name))
                aliases[live_name] = profiles[idx].name
            old = profiles[idx]
            profiles[idx] = replace(
                old,
                name=live_name,
                base=str(replace(parsed, attributes="")),
                memory_mib=mib,
                memory_confidence=Confidence.LIVE,
            )
        return replace(
            self,
            profiles=tuple(profiles),
            aliases=aliases,
            memory_mib=total_mib if total_mib else self.memory_mib,
            memory_confidence=Confidence.LIVE if total_mib else self.memory_confidence,
        )


@dataclass(frozen=True)
class Card:
    """A non-MIG GPU with its memory (a prior; live values win)."""

    nvml_names: tuple[str, ...]
    memory_mib: int
    memory_confidence: Confidence


@dataclass(frozen=True)
class Catalog:
    """Every known GPU model, matched by product name or PCI id."""

    models: tuple[GpuModel, ...]
    cards: tuple[Card, ...] = ()
    warnings: tuple[str, ...] = ()

    def model(self, model_id: str) -> GpuModel:
        for m in self.models:
            if m.id == model_id:
                return m
        known = ", ".join(m.id for m in self.models)
        raise KeyError(f"unknown GPU model {model_id!r} (known: {known})")

    def match_product(self, product: str, total_mib: int | None = None) -> GpuModel | None:
        """Find the model for an NVML name or a GFD `nvidia.com/gpu.product` value.

        Two models may share a product name when their total memory tells them apart (GB200 boards of 186 and
        189 GB): the live total picks the closest; without one, the model whose total is best known wins."""
        found = self._by_product.get(product_key(product), [])
        if len(found) <= 1:
            return found[0] if found else None
        if total_mib:
            return min(found, key=lambda m: (abs(m.memory_mib - total_mib), m.id))
        return min(found, key=lambda m: (_RANK.index(m.memory_confidence), m.id))

    def match_pci(self, pci_id: str) -> GpuModel | None:
        """The model with this PCI id (`0x233010DE`; a `:0xSSSSVVVV` subsystem part is ignored)."""
        wanted = pci_id.split(":", maxsplit=1)[0].upper().replace("0X", "0x")
        return next((m for m in self.models if wanted in m.pci_device_ids), None)

    def readable_by(self, version: Version) -> Catalog:
        """The catalog as a mig-manager of `version` can configure it (`GpuModel.readable_by`)."""
        models = tuple(m.readable_by(version) for m in self.models)
        if all(a is b for a, b in zip(models, self.models, strict=True)):
            return self
        return replace(self, models=models)

    def match_card(self, product: str) -> Card | None:
        return self._card_by_product.get(product_key(product))

    @cached_property
    def _by_product(self) -> dict[str, list[GpuModel]]:
        """Product key -> the models with that name, in catalog order (built once: every node asks)."""
        out: dict[str, list[GpuModel]] = {}
        for m in self.models:
            for key in dict.fromkeys(product_key(n) for n in (*m.nvml_names, *m.gfd_products)):
                out.setdefault(key, []).append(m)
        return out

    @cached_property
    def _card_by_product(self) -> dict[str, Card]:
        """Product key -> the first card with that name."""
        out: dict[str, Card] = {}
        for c in self.cards:
            for n in c.nvml_names:
                out.setdefault(product_key(n), c)
        return out


_RANK = (Confidence.LIVE, Confidence.CONFIRMED, Confidence.OBSERVED, Confidence.INFERRED, Confidence.UNCONFIRMED)


@lru_cache(maxsize=1024)
def product_key(name: str) -> str:
    """GFD label form, case-folded, with GFD's `-MIG-...` suffix removed (single strategy); cached, since every
    node's label is matched against every name of the catalog."""
    key = gfd_product(name).casefold()
    return key.split("-mig-")[0]


def round_gib(mib: int) -> str:
    """Human-friendly GiB with two decimals, as nvidia-smi prints it."""
    return f"{math.floor(mib / 1024 * 100) / 100:.2f}"
