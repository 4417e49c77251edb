"""go-nvlib's naming formula must reproduce every name in the catalog and the observed pairs in mig-data.md."""

from __future__ import annotations

import pytest

from migctl.core.hardware.catalog import Catalog
from migctl.core.hardware.naming import (
    gfd_product,
    memory_gb,
    parse_profile_name,
    profile_from_resource,
    profile_name,
    resource_name,
)


def test_formula_reproduces_every_catalog_name(catalog: Catalog) -> None:
    checked = 0
    for model in catalog.models:
        for p in model.profiles:
            assert profile_name(p.compute_slices, p.memory_mib, model.memory_mib, p.attributes) == p.name, (
                model.id,
                p.name,
            )
            checked += 1
    assert checked >= 60


@pytest.mark.parametrize(
    ("profile_mib", "total_mib", "expected_gb"),
    [
        # observed (memory, total) pairs, ../shared/reference/mig-data.md 1.0.4
        (16384, 143771, 18),
        (33024, 143771, 35),
        (71168, 143771, 71),
        (143104, 143771, 141),
        (22528, 183359, 23),
        (20992, 183359, 23),
        (45312, 183359, 45),
        (11008, 95830, 12),
        (47488, 95830, 47),
        (5952, 24576, 6),
        (11968, 24576, 12),
        (24192, 97887, 24),
        (80896, 81920, 80),  # the driver calls it 7g.79gb; the device plugin registers 7g.80gb
        (22144, 95830, 24),  # 23.5 rounds half away from zero
    ],
)
def test_formula_matches_observed_pairs(profile_mib: int, total_mib: int, expected_gb: int) -> None:
    assert memory_gb(profile_mib, total_mib) == expected_gb


def test_memory_alternates_keep_the_name(catalog: Catalog) -> None:
    """Driver-dependent memory values must not change the resource name (B200 1g at 22.00 or 20.50 GiB)."""
    b200 = catalog.model("b200-180gb")
    assert profile_name(1, 22528, b200.memory_mib) == profile_name(1, 20992, b200.memory_mib) == "1g.23gb"


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("1g.10gb", "nvidia.com/mig-1g.10gb"),
        ("1g.10gb+me", "nvidia.com/mig-1g.10gb.me"),
        ("2g.48gb+me.all", "nvidia.com/mig-2g.48gb.me.all"),
        ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
    ],
)
def test_resource_names_round_trip(profile: str, resource: str) -> None:
    assert resource_name(profile) == resource
    assert profile_from_resource(resource) == profile


def test_non_mig_resources_are_not_profiles() -> None:
    assert profile_from_resource("nvidia.com/gpu") is None
    assert profile_from_resource("nvidia.com/mig-foo") is None


def test_parse_profile_name_forms() -> None:
    assert parse_profile_name("1c.3g.40gb").ci_slices == 1
    assert parse_profile_name("1g.10gb+me").attributes == "+me"
    with pytest.raises(ValueError, match="not a MIG profile name"):
        parse_profile_name("3g40gb")


def test_gfd_product_label_form() -> None:
    assert gfd_product("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gfd_product("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
