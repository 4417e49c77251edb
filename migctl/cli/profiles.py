"""`migctl profiles ...`: inspect and validate the MIG profile catalog."""

from __future__ import annotations

from pathlib import Path

import click

from migctl.cli.output import OUTPUT_OPTION, Group, emit_json, fail, table
from migctl.core.hardware.catalog import Catalog, GpuModel, default_profiles_dir, load_catalog
from migctl.core.hardware.geometry import describe, geometry
from migctl.core.hardware.naming import resource_name

PROFILES_DIR_OPTION = click.option(
    "--profiles-dir",
    "profiles_dirs",
    multiple=True,
    type=click.Path(path_type=Path),
    envvar="MIGCTL_PROFILES_DIR",
    help="Extra catalog directory (repeatable); its models add to or replace the shipped ones.",
)


def _catalog(dirs: tuple[Path, ...]) -> Catalog:
    return load_catalog(dirs)


def _model(catalog: Catalog, model_id: str) -> GpuModel:
    try:
        return catalog.model(model_id)
    except KeyError as e:
        fail(str(e.args[0]))


@click.group(cls=Group)
def profiles() -> None:
    """Inspect and validate the MIG profile catalog."""


@profiles.command("list")
@PROFILES_DIR_OPTION
@OUTPUT_OPTION
def list_models(profiles_dirs: tuple[Path, ...], output: str) -> None:
    """List the GPU models in the catalog."""
    cat = _catalog(profiles_dirs)
    if output == "json":
        emit_json(
            [
                {
                    "id": m.id,
                    "display_name": m.display_name,
                    "memory_mib": m.memory_mib,
                    "memory_confidence": m.memory_confidence.value,
                    "profiles": [p.name for p in m.profiles],
                    "source": m.source_file,
                }
                for m in cat.models
            ]
        )
        return
    rows = [
        (
            m.id,
            m.memory_mib,
            m.memory_confidence.value,
            len(m.base_profiles),
            len(m.profiles) - len(m.base_profiles),
            m.display_name,
        )
        for m in cat.models
    ]
    click.echo(table(["MODEL", "MEMORY_MIB", "CONFIDENCE", "PROFILES", "VARIANTS", "NAME"], rows))
    click.echo(f"\n{len(cat.cards)} non-MIG cards known for the VRAM fallback.")


@profiles.command("show")
@click.argument("model_id")
@PROFILES_DIR_OPTION
@OUTPUT_OPTION
def show(model_id: str, profiles_dirs: tuple[Path, ...], output: str) -> None:
    """Show one model's profiles, placements and how each value is known."""
    m = _model(_catalog(profiles_dirs), model_id)
    data = [
        {
            "name": p.name,
            "resource": resource_name(p.name),
            "profile_id": p.profile_id,
            "compute_slices": p.compute_slices,
            "memory_slices": p.memory_slices,
            "memory_mib": p.memory_mib,
            "memory_confidence": p.memory_confidence.value,
            "max_instances": p.max_instances,
            "placements": [list(x) for x in p.placements],
            "placements_confidence": p.placements_confidence.value,
            "confidence": p.confidence.value,
        }
        for p in m.profiles
    ]
    if output == "json":
        emit_json(
            {
                "id": m.id,
                "display_name": m.display_name,
                "memory_mib": m.memory_mib,
                "placement_units": m.placement_units,
                "compute_slices": m.compute_slices,
                "nvml_names": list(m.nvml_names),
                "gfd_products": list(m.gfd_products),
                "pci_device_ids": list(m.pci_device_ids),
                "profiles": data,
            }
        )
        return
    click.echo(
        f"{m.display_name} ({m.id}): {m.memory_mib} MiB [{m.memory_confidence.value}], "
        f"{m.compute_slices} compute slices, {m.placement_units} placement units"
    )
    click.echo(f"products: {', '.join(m.gfd_products) or '-'}   pci: {', '.join(m.pci_device_ids) or '-'}\n")
    rows = [
        (
            p.name,
            resource_name(p.name),
            p.profile_id if p.profile_id is not None else "?",
            p.compute_slices,
            p.memory_slices,
            f"{p.memory_mib} [{p.memory_confidence.value}]",
            p.max_instances,
            " ".join(f"{s}:{z}" for s, z in p.placements) + f" [{p.placements_confidence.value}]",
        )
        for p in m.profiles
    ]
    click.echo(table(["PROFILE", "RESOURCE", "ID", "G", "SLOTS", "MIB", "MAX", "PLACEMENTS start:size"], rows))


@profiles.command("layouts")
@click.argument("model_id")
@click.option("--no-variants", is_flag=True, help="Only plain profiles (no +me/+gfx/-me variants).")
@PROFILES_DIR_OPTION
@OUTPUT_OPTION
def layouts(model_id: str, no_variants: bool, profiles_dirs: tuple[Path, ...], output: str) -> None:
    """Every valid layout of one GPU model, with the memory each leaves unusable."""
    m = _model(_catalog(profiles_dirs), model_id)
    geo = geometry(m)
    chosen = geo.base_layouts if no_variants else geo.layouts
    ordered = sorted(chosen, key=lambda lay: (geo.unusable_mib(lay), lay))
    items = [
        {
            "profiles": dict(lay),
            "instance_mib": geo.instance_mib(lay),
            "unusable_mib": geo.unusable_mib(lay),
            "placements": [{"profile": p.profile, "start": p.start, "size": p.size} for p in geo.place(lay)],
        }
        for lay in ordered
    ]
    if output == "json":
        emit_json({"model": m.id, "full_gpu_mib": m.full_profile.memory_mib, "count": len(items), "layouts": items})
        return
    rows = [
        (
            describe(lay),
            geo.instance_mib(lay),
            geo.unusable_mib(lay),
            " ".join(f"{p.profile}@{p.start}" for p in geo.place(lay)),
        )
        for lay in ordered
    ]
    click.echo(table(["LAYOUT", "INSTANCE_MIB", "UNUSABLE_MIB", "PLACEMENTS"], rows))
    click.echo(f"\n{len(items)} valid layouts on {m.id} (full GPU instance {m.full_profile.memory_mib} MiB).")


@profiles.command("validate")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
def validate(directory: Path | None) -> None:
    """Check a catalog directory (default: the shipped one): schema, placements, counts, names."""
    target = directory or default_profiles_dir()
    cat = load_catalog([target], include_default=False)
    for m in cat.models:
        geometry(m).layouts  # noqa: B018 - enumerating proves every profile can be placed
    for w in cat.warnings:
        click.echo(f"warning: {w}", err=True)
    n_profiles = sum(len(m.profiles) for m in cat.models)
    click.echo(f"{target}: {len(cat.models)} GPU models, {n_profiles} profiles, {len(cat.cards)} non-MIG cards: valid")
