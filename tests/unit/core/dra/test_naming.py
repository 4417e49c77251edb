"""NVIDIA's device names both ways, on the catalog's profiles (cmd/gpu-kubelet-plugin/mig.go)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from migctl.core.dra import naming
from migctl.core.hardware.gpu_model import Catalog


@pytest.mark.parametrize(
    ("profile", "token"),
    [
        ("1g.10gb", "1g10gb"),
        ("7g.80gb", "7g80gb"),
        ("1g.10gb+me", "1g10gb-me"),
        ("1g.24gb-me", "1g24gb-me"),
        ("1g.24gb+me.all", "1g24gb-meall"),
        ("2g.48gb+gfx", "2g48gb-gfx"),
    ],
)
def test_token_is_nvidia_rendering(profile: str, token: str) -> None:
    assert naming.profile_token(profile) == token


def test_names_and_counters() -> None:
    assert naming.gpu_device_name(3) == "gpu-3"
    assert naming.mig_device_name(0, "1g.10gb", 19, 0) == "gpu-0-mig-1g10gb-19-0"
    assert naming.counter_set_name(2) == "gpu-2-counter-set"
    assert naming.memory_slice_counter(7) == "memory-slice-7"
    assert naming.memory_slice_capacity(4) == "memorySlice4"
    assert [
        naming.counter_name(c) for c in ("copyEngines", "jpegEngines", "ofaEngines", "memory", "multiprocessors")
    ] == [
        "copy-engines",
        "jpeg-engines",
        "ofa-engines",
        "memory",
        "multiprocessors",
    ]
    assert naming.parse_counter_set_name("gpu-12-counter-set") == 12
    assert naming.parse_counter_set_name("gpu-x-counter-set") is None
    assert naming.memory_slice_index("memory-slice-5") == 5
    assert naming.memory_slice_index("memorySlice6") == 6
    assert naming.memory_slice_index("memory") is None


def test_parse_forms() -> None:
    assert naming.parse_device_name("gpu-7") == naming.ParsedName("gpu", 7)
    assert naming.parse_device_name("gpu-vfio-1") == naming.ParsedName("vfio", 1)
    cur = naming.parse_device_name("gpu-10-mig-1g10gb-me-20-6")
    assert (cur.kind, cur.minor, cur.token, cur.profile_id, cur.start, cur.legacy) == (
        "mig",
        10,
        "1g10gb-me",
        20,
        6,
        False,
    )
    old = naming.parse_device_name("gpu-1-mig-19-4-1")  # demo/specs/extended-resources/mig-1g-12gb.yaml
    assert (old.minor, old.token, old.profile_id, old.start, old.size, old.legacy) == (1, "", 19, 4, 1, True)


@pytest.mark.parametrize("bad", ["gpu", "gpu-", "gpu-x", "GPU-0", "gpu-0-mig-1G10GB-19-0", "gpu-0-mig--19-0", "mig-0"])
def test_parse_rejects(bad: str) -> None:
    with pytest.raises(ValueError, match="device name"):
        naming.parse_device_name(bad)


def test_plus_and_minus_me_share_a_token_and_differ_by_id(catalog: Catalog) -> None:
    rtx = catalog.model("rtx-pro-6000-blackwell-96gb")
    plus, minus = rtx.profile("1g.24gb+me"), rtx.profile("1g.24gb-me")
    assert naming.profile_token(plus.name) == naming.profile_token(minus.name)
    assert naming.profile_for(rtx, "1g24gb-me", plus.profile_id) == plus
    assert naming.profile_for(rtx, "1g24gb-me", minus.profile_id) == minus
    assert naming.profile_for(rtx, "1g24gb-me", 999) is None  # an id the catalog does not know: no guess


def test_legacy_names_map_by_id(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    assert naming.profile_by_id(h100, 19) == h100.profile("1g.10gb")
    assert naming.profile_by_id(h100, 0) == h100.full_profile
    assert naming.profile_by_id(h100, 12345) is None


@given(data=st.data(), minor=st.integers(0, 63))
def test_every_catalog_profile_round_trips(catalog: Catalog, data: st.DataObject, minor: int) -> None:
    model = data.draw(st.sampled_from(catalog.models))
    named = [p for p in model.profiles if p.profile_id is not None]
    profile = data.draw(st.sampled_from(named))
    start, _size = data.draw(st.sampled_from(profile.placements))
    assert profile.profile_id is not None
    name = naming.mig_device_name(minor, profile.name, profile.profile_id, start)
    parsed = naming.parse_device_name(name)
    assert (parsed.kind, parsed.minor, parsed.start, parsed.profile_id) == ("mig", minor, start, profile.profile_id)
    assert naming.profile_for(model, parsed.token, parsed.profile_id) == profile
    legacy = naming.parse_device_name(
        naming.legacy_mig_device_name(minor, profile.profile_id, start, profile.memory_slices)
    )
    assert legacy.legacy and naming.profile_by_id(model, profile.profile_id) == profile
