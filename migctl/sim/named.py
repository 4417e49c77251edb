"""The static layouts of the simulator, from NVIDIA's own named mig-parted configs.

`static-all-1g` is `all-1g.<the model's smallest 1g profile>` and `static-balanced` is `all-balanced`, each as the
GPU Operator's default config (`data/gpu-operator-a22dbf6-default-mig-parted-config.yaml`, vendored verbatim)
gives it to a GPU of the model: the first entry whose device filter matches one of the model's PCI ids, else an
entry without a filter, whose profiles all exist on the model. A model that config does not cover (no PCI id, or
no entry) falls back to the layout the name describes, derived from the catalog (`shapes.all_1g`,
`shapes.balanced`), and `static_layout` says so.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, canonical, geometry
from migctl.core.migparted.config import MigPartedConfig, parse
from migctl.sim.shapes import Shapes, all_1g, balanced

CONFIG = Path(__file__).parent / "data" / "gpu-operator-a22dbf6-default-mig-parted-config.yaml"


@cache
def _config() -> MigPartedConfig:
    return parse(CONFIG.read_text(encoding="utf-8"), str(CONFIG))


def config_name(model: GpuModel, static: str) -> str:
    """The named config a static policy stands for on `model` (`static-all-1g` or `static-balanced`)."""
    if static == "static-all-1g":
        ones = [p for p in model.base_profiles if p.compute_slices == 1]
        smallest = min(ones or model.base_profiles, key=lambda p: (p.memory_mib, p.compute_slices, p.name))
        return f"all-{smallest.name}"
    if static == "static-balanced":
        return "all-balanced"
    raise ValueError(f"{static!r} has no named config; expected static-all-1g or static-balanced")


def named_layout(model: GpuModel, name: str) -> CanonicalLayout | None:
    """What the named config `name` gives one GPU of `model`, or None when it has no entry for the model."""
    entries = _config().mig_configs.get(name, [])
    geo = geometry(model)
    for filtered in (True, False):
        for entry in entries:
            if not entry.mig_enabled or bool(entry.filters()) != filtered:
                continue
            if filtered and not any(entry.matches(0, pci) for pci in model.pci_device_ids):
                continue
            layout = canonical(entry.mig_devices or {})
            if layout and geo.is_valid(layout):
                return layout
    return None


def static_layout(model: GpuModel, static: str) -> tuple[CanonicalLayout, str]:
    """(the layout of `static` on every GPU of `model`, where it comes from)."""
    name = config_name(model, static)
    found = named_layout(model, name)
    if found is not None:
        return found, f"NVIDIA's {name} (GPU Operator default-mig-parted-config @ a22dbf6)"
    shapes = Shapes(model)
    derived = all_1g(shapes) if static == "static-all-1g" else balanced(shapes)
    return derived, f"{name} as the catalog gives it (NVIDIA's config has no entry for {model.id})"
