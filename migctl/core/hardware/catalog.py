"""The MIG profile catalog: one import for its run-time models (`gpu_model`) and its files (`catalog_files`)."""

from __future__ import annotations

from migctl.core.hardware.catalog_files import (
    CardSpec,
    ModelFile,
    ModelSpec,
    ProfileSpec,
    VariantSpec,
    check_model,
    default_profiles_dir,
    load_catalog,
    load_file,
    naming_warnings,
)
from migctl.core.hardware.gpu_model import Card, Catalog, Confidence, GpuModel, Profile, round_gib

__all__ = [
    "Card",
    "CardSpec",
    "Catalog",
    "Confidence",
    "GpuModel",
    "ModelFile",
    "ModelSpec",
    "Profile",
    "ProfileSpec",
    "VariantSpec",
    "check_model",
    "default_profiles_dir",
    "load_catalog",
    "load_file",
    "naming_warnings",
    "round_gib",
]
