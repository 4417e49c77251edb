"""The MIG profile catalog files: versioned YAML (one per GPU model) validated into `gpu_model` objects.

Files live in `profiles/` (shipped inside the wheel as `migctl/profiles`). An operator can add models or
replace shipped ones from their own directories: a file whose model `id` matches a shipped one replaces it
whole. pydantic checks each field; `check_model` checks how the fields fit together, naming the field path.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from migctl.core.hardware.gpu_model import Card, Catalog, Confidence, GpuModel, Profile, product_key
from migctl.core.hardware.naming import gfd_product, memory_gb, profile_name
from migctl.core.text.documents import YAML_LOADER
from migctl.errors import InputError, Problem, from_validation_error


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


PciId = Annotated[str, StringConstraints(pattern=r"^0x[0-9A-F]{8}$")]
ModelId = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9-]*[a-z0-9]$")]
BaseProfileName = Annotated[str, StringConstraints(pattern=r"^\d+g\.\d+gb$")]
Suffix = Annotated[str, StringConstraints(pattern=r"^(\+me|\+me\.all|\+gfx|-me)$")]


class VariantSpec(_Strict):
    """A media-extension variant of a profile: same slices and placements, other engines and limits."""

    suffix: Suffix
    profile_id: int | None = None
    nvml_profile_index: int | None = None
    max_instances: int = Field(ge=1)
    min_driver: str | None = None
    confidence: Confidence
    notes: list[str] = []


class ProfileSpec(_Strict):
    """One GPU-instance profile as written in a catalog file."""

    name: BaseProfileName
    profile_id: int | None = None
    nvml_profile_index: int | None = None
    compute_slices: int = Field(ge=1)
    memory_slices: int = Field(ge=1, description="placement size, in the model's placement units")
    memory_mib: int = Field(gt=0)
    memory_confidence: Confidence
    memory_mib_alternates: list[int] = []
    max_instances: int = Field(ge=1)
    placements: list[tuple[int, int]] = Field(min_length=1)
    placements_confidence: Confidence
    confidence: Confidence = Field(description="of the name, ids and max count")
    sms: int | None = None
    min_driver: str | None = None
    variants: list[VariantSpec] = []
    notes: list[str] = []


class ModelSpec(_Strict):
    """One GPU model as written in a catalog file."""

    id: ModelId
    display_name: str
    nvml_names: list[str] = []
    gfd_products: list[str] = []
    pci_device_ids: list[PciId] = []
    pci_ids_by_product: dict[str, list[PciId]] = Field(
        default_factory=dict, description="NVML name -> the PCI ids of that product, where the pairing is known"
    )
    memory_mib: int = Field(gt=0)
    memory_confidence: Confidence
    memory_mib_alternates: list[int] = []
    compute_slices: int = Field(ge=1)
    placement_units: int = Field(ge=1)
    max_instances: int = Field(ge=1)
    profiles: list[ProfileSpec] = Field(min_length=1)
    sources: list[str] = Field(min_length=1)
    notes: list[str] = []


class ModelFile(_Strict):
    version: Literal["v1"]
    kind: Literal["GpuModel"]
    model: ModelSpec


class CardSpec(_Strict):
    """A GPU without MIG, for the VRAM-unit fallback."""

    nvml_names: list[str] = Field(min_length=1)
    memory_mib: int = Field(gt=0)
    memory_confidence: Confidence
    memory_mib_alternates: list[int] = []
    sources: list[str] = Field(min_length=1)
    notes: list[str] = []


class CardsFile(_Strict):
    version: Literal["v1"]
    kind: Literal["NonMigCards"]
    cards: list[CardSpec]


# ---------------------------------------------------------------------------------------------------------
# Cross-field checks: pydantic checks each field; these check how the fields fit together.


def _max_disjoint(placements: Sequence[tuple[int, int]]) -> int:
    """Most pairwise-disjoint placements (interval scheduling by earliest end)."""
    count, end = 0, -1
    for start, size in sorted(placements, key=lambda p: (p[0] + p[1], p[0])):
        if start >= end:
            count, end = count + 1, start + size
    return count


def check_model(spec: ModelSpec) -> list[Problem]:
    """Problems with how a model's fields fit together (each names its field path)."""
    problems: list[Problem] = []
    names: set[str] = set()
    full = 0
    for i, p in enumerate(spec.profiles):
        at = f"model.profiles[{i}]"
        g = int(p.name.split("g.")[0])
        if g != p.compute_slices:
            problems.append(Problem(f"{at}.compute_slices", f"expected {g} to match the name {p.name!r}"))
        if p.compute_slices > spec.compute_slices:
            problems.append(
                Problem(f"{at}.compute_slices", f"{p.compute_slices} exceeds the model's {spec.compute_slices}")
            )
        if p.memory_mib > spec.memory_mib:
            problems.append(Problem(f"{at}.memory_mib", f"{p.memory_mib} exceeds the model's {spec.memory_mib}"))
        if p.max_instances > spec.max_instances:
            problems.append(
                Problem(f"{at}.max_instances", f"{p.max_instances} exceeds the model's {spec.max_instances}")
            )
        seen: set[tuple[int, int]] = set()
        placements_ok = True
        for j, (start, size) in enumerate(p.placements):
            where = f"{at}.placements[{j}]"
            bad_before = len(problems)
            if size != p.memory_slices:
                problems.append(Problem(where, f"size {size} must equal memory_slices {p.memory_slices}"))
            if start < 0 or start + size > spec.placement_units:
                problems.append(
                    Problem(where, f"[{start}, {start + size}) lies outside 0..{spec.placement_units} placement units")
                )
            if (start, size) in seen:
                problems.append(Problem(where, f"duplicate placement [{start}, {size}]"))
            for s2, z2 in seen:
                if (s2, z2) != (start, size) and start < s2 + z2 and s2 < start + size:
                    problems.append(
                        Problem(
                            where, f"[{start}, {size}] overlaps [{s2}, {z2}]; a profile's placements are disjoint slots"
                        )
                    )
            seen.add((start, size))
            placements_ok = placements_ok and len(problems) == bad_before
        if placements_ok:
            fits = _max_disjoint(p.placements)
            if p.max_instances > fits:
                problems.append(
                    Problem(
                        f"{at}.max_instances", f"{p.max_instances} instances cannot fit: the placements allow {fits}"
                    )
                )
        if p.memory_slices == spec.placement_units:
            full += 1
        for k, v in enumerate(p.variants):
            vname = p.name + v.suffix
            if v.max_instances > p.max_instances:
                problems.append(
                    Problem(
                        f"{at}.variants[{k}].max_instances",
                        f"{v.max_instances} exceeds the base profile's {p.max_instances}",
                    )
                )
            if vname in names:
                problems.append(Problem(f"{at}.variants[{k}].suffix", f"profile {vname!r} is defined twice"))
            names.add(vname)
        if p.name in names:
            problems.append(Problem(f"{at}.name", f"profile {p.name!r} is defined twice"))
        names.add(p.name)
    for product, ids in spec.pci_ids_by_product.items():
        if product not in spec.nvml_names:
            problems.append(Problem(f"model.pci_ids_by_product.{product}", "expected one of the model's nvml_names"))
        for k, pci in enumerate(ids):
            if pci not in spec.pci_device_ids:
                problems.append(
                    Problem(f"model.pci_ids_by_product.{product}[{k}]", f"{pci} is not in the model's pci_device_ids")
                )
    if full != 1:
        problems.append(
            Problem(
                "model.profiles",
                f"expected exactly one profile spanning all {spec.placement_units} placement units, found {full}",
            )
        )
    return problems


def naming_warnings(model: GpuModel) -> list[str]:
    """Profiles whose name differs from what go-nvlib's formula gives for the catalog memory."""
    out = []
    for p in model.profiles:
        expected = profile_name(p.compute_slices, p.memory_mib, model.memory_mib, p.attributes)
        if expected != p.name:
            out.append(
                f"{model.id}: profile {p.name} has {p.memory_mib} MiB of {model.memory_mib}; "
                f"the naming formula gives {expected} (GB part {memory_gb(p.memory_mib, model.memory_mib)})"
            )
    return out


def _build_model(spec: ModelSpec, source: str) -> GpuModel:
    profiles: list[Profile] = []
    variants: list[Profile] = []
    for p in spec.profiles:
        placements = tuple(sorted((int(s), int(z)) for s, z in p.placements))
        base = Profile(
            name=p.name,
            base=p.name,
            attributes="",
            compute_slices=p.compute_slices,
            memory_slices=p.memory_slices,
            memory_mib=p.memory_mib,
            max_instances=p.max_instances,
            placements=placements,
            profile_id=p.profile_id,
            memory_confidence=p.memory_confidence,
            placements_confidence=p.placements_confidence,
            confidence=p.confidence,
        )
        profiles.append(base)
        for v in p.variants:
            variants.append(
                replace(
                    base,
                    name=p.name + v.suffix,
                    attributes=v.suffix,
                    max_instances=v.max_instances,
                    profile_id=v.profile_id,
                    confidence=v.confidence,
                )
            )
    by_product = {product_key(n): tuple(ids) for n, ids in spec.pci_ids_by_product.items()}
    gfd = tuple(dict.fromkeys([*(gfd_product(n) for n in spec.nvml_names), *spec.gfd_products]))
    return GpuModel(
        id=spec.id,
        display_name=spec.display_name,
        nvml_names=tuple(spec.nvml_names),
        gfd_products=gfd,
        pci_device_ids=tuple(spec.pci_device_ids),
        memory_mib=spec.memory_mib,
        memory_confidence=spec.memory_confidence,
        compute_slices=spec.compute_slices,
        placement_units=spec.placement_units,
        max_instances=spec.max_instances,
        profiles=tuple(profiles + variants),
        source_file=source,
        pci_by_product=by_product,
    )


def _read_yaml(path: Path) -> object:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(str(path), f"cannot read the file: {e.strerror}") from e
    try:
        return yaml.load(text, Loader=YAML_LOADER)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
        problem = getattr(e, "problem", None) or str(e)
        raise InputError(str(path), f"broken YAML at {where}: {problem}; expected a valid YAML document") from e


def load_file(path: Path) -> GpuModel | list[Card]:
    """Load and fully check one catalog file."""
    data = _read_yaml(path)
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a mapping with `version: v1` and `kind: GpuModel` or `NonMigCards`")
    kind = data.get("kind")
    try:
        if kind == "NonMigCards":
            cards = CardsFile.model_validate(data)
            return [Card(tuple(c.nvml_names), c.memory_mib, c.memory_confidence) for c in cards.cards]
        spec = ModelFile.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(str(path), e) from e
    problems = check_model(spec.model)
    if problems:
        raise InputError(str(path), problems)
    return _build_model(spec.model, str(path))


def default_profiles_dir() -> Path:
    """The shipped catalog: inside the installed wheel, or `profiles/` at the top of a source checkout."""
    here = Path(__file__).resolve().parents[2]
    for candidate in (here / "profiles", here.parent / "profiles"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError("the shipped profile catalog was not found next to the migctl package")


def load_catalog(extra_dirs: Iterable[Path] = (), include_default: bool = True) -> Catalog:
    """Load the shipped catalog, then each extra directory in order; later model ids replace earlier ones."""
    dirs = ([default_profiles_dir()] if include_default else []) + [Path(d) for d in extra_dirs]
    models: dict[str, GpuModel] = {}
    cards: list[Card] = []
    for d in dirs:
        if not d.is_dir():
            raise InputError(str(d), "expected a directory of catalog YAML files")
        for path in sorted([*d.glob("*.yaml"), *d.glob("*.yml")]):
            loaded = load_file(path)
            if isinstance(loaded, GpuModel):
                models[loaded.id] = loaded
            else:
                cards = [*loaded, *cards]  # later directories take precedence when matching
    _check_unique_products(models.values())
    warnings = [w for m in models.values() for w in naming_warnings(m)]
    return Catalog(tuple(sorted(models.values(), key=lambda m: m.id)), tuple(cards), tuple(warnings))


def _check_unique_products(models: Iterable[GpuModel]) -> None:
    """A product name identifies one model, or several that differ in total memory (`Catalog.match_product`)."""
    owner: dict[tuple[str, int], str] = {}
    for m in models:
        for n in (*m.nvml_names, *m.gfd_products):
            key = (product_key(n), m.memory_mib)
            if key in owner and owner[key] != m.id:
                raise InputError(
                    m.source_file,
                    f"model.nvml_names: product {n!r} is already claimed by model {owner[key]!r} with the same "
                    f"memory_mib {m.memory_mib}; expected each product name to identify one model (or models that "
                    "differ in total memory)",
                )
            owner[key] = m.id
