"""The catalog loads, checks itself, and rejects broken copies with the file, the field path and the expectation."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from migctl.core.hardware.catalog import Catalog, Confidence, default_profiles_dir, load_catalog, load_file
from migctl.errors import InputError

REQUIRED = {
    "a30-24gb", "a100-40gb", "a100-80gb", "h100-80gb", "h100-nvl-94gb", "h200-141gb",
    "gh200-144gb", "b200-180gb", "gb200-186gb", "rtx-pro-6000-blackwell-96gb",
    "b300-269gb", "gb300-278gb", "h100-96gb", "blackwell-189gb",
}  # fmt: skip


def test_covers_the_required_models(catalog: Catalog) -> None:
    assert {m.id for m in catalog.models} >= REQUIRED
    assert catalog.match_product("NVIDIA H100 PCIe") is catalog.model("h100-80gb")  # SXM and PCIe, one model


def test_every_model_states_confidence_and_sources(catalog: Catalog) -> None:
    for m in catalog.models:
        assert m.memory_confidence in set(Confidence) - {Confidence.LIVE}
        for p in m.profiles:
            assert p.memory_confidence is not Confidence.LIVE


def test_inferred_values_are_never_marked_confirmed() -> None:
    """B200 3g/4g/7g memory was never observed: the file must say inferred."""
    raw = yaml.safe_load((default_profiles_dir() / "b200-180gb.yaml").read_text())
    by_name = {p["name"]: p for p in raw["model"]["profiles"]}
    for name in ("3g.90gb", "4g.90gb", "7g.180gb"):
        assert by_name[name]["memory_confidence"] == "inferred"


def test_match_by_gfd_label_and_nvml_name(catalog: Catalog) -> None:
    assert catalog.match_product("NVIDIA-A100-SXM4-40GB") is catalog.model("a100-40gb")
    assert catalog.match_product("NVIDIA A100-SXM4-40GB") is catalog.model("a100-40gb")
    assert catalog.match_product("NVIDIA-H100-80GB-HBM3-MIG-1g.10gb") is catalog.model("h100-80gb")
    assert catalog.match_product("Tesla T4") is None
    card = catalog.match_card("Tesla-T4")
    assert card is not None
    assert card.memory_mib == 15360
    assert catalog.match_pci("0x233010de") is catalog.model("h100-80gb")


def test_live_memory_overrides_catalog(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    live = h100.with_live_memory({"3g.40gb": 40448})
    assert live.profile("3g.40gb").memory_mib == 40448
    assert live.profile("3g.40gb").memory_confidence is Confidence.LIVE
    assert h100.profile("3g.40gb").memory_mib == 40320  # the catalog itself is untouched


def test_live_name_renames_the_matching_profile(catalog: Catalog) -> None:
    """Drivers 535/545 call A100-80GB 3g '3g.39gb': the device plugin then advertises that name."""
    a100 = catalog.model("a100-80gb")
    live = a100.with_live_memory({"3g.39gb": 40192})
    assert live.has_profile("3g.39gb")
    assert not live.has_profile("3g.40gb")
    assert live.aliases["3g.39gb"] == "3g.40gb"
    assert live.profile("3g.39gb").placements == a100.profile("3g.40gb").placements


@pytest.fixture
def broken(tmp_path: Path) -> Path:
    """A private copy of the shipped catalog to break."""
    target = tmp_path / "profiles"
    shutil.copytree(default_profiles_dir(), target)
    return target


def _edit(path: Path, change: object) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)  # type: ignore[operator]
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _error(directory: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_catalog([directory], include_default=False)
    return info.value


def test_broken_yaml_names_file_and_line(broken: Path) -> None:
    f = broken / "h100-80gb.yaml"
    f.write_text(f.read_text().replace("compute_slices: 7\n", "compute_slices: [7\n", 1))
    err = _error(broken)
    assert "h100-80gb.yaml" in str(err)
    assert "line" in str(err)


def test_unknown_field_is_rejected_with_its_path(broken: Path) -> None:
    f = broken / "a30-24gb.yaml"
    _edit(f, lambda d: d["model"]["profiles"][1].update(memory_gib=11.7))
    err = _error(broken)
    assert "a30-24gb.yaml" in str(err)
    assert "model.profiles[1].memory_gib: unknown field" in str(err)


def test_wrong_version_is_rejected(broken: Path) -> None:
    f = broken / "a30-24gb.yaml"
    _edit(f, lambda d: d.update(version="v2"))
    assert "version" in str(_error(broken))


def test_overlapping_placements_are_rejected(broken: Path) -> None:
    f = broken / "a100-40gb.yaml"
    _edit(f, lambda d: d["model"]["profiles"][3]["placements"].append([2, 4]))  # 3g.20gb: [0,4],[4,4] + [2,4]
    err = _error(broken)
    assert "model.profiles[3].placements[2]" in str(err)
    assert "overlaps" in str(err)


def test_impossible_placement_is_rejected(broken: Path) -> None:
    f = broken / "a100-40gb.yaml"
    _edit(f, lambda d: d["model"]["profiles"][0]["placements"].__setitem__(6, [8, 1]))
    err = _error(broken)
    assert "model.profiles[0].placements[6]" in str(err)
    assert "outside 0..8" in str(err)


def test_count_above_what_placements_allow(broken: Path) -> None:
    f = broken / "h200-141gb.yaml"
    _edit(f, lambda d: d["model"]["profiles"][3].update(max_instances=3))  # 3g: two slots only
    err = _error(broken)
    assert "model.profiles[3].max_instances" in str(err)
    assert "the placements allow 2" in str(err)


def test_size_must_match_memory_slices(broken: Path) -> None:
    f = broken / "h200-141gb.yaml"
    _edit(f, lambda d: d["model"]["profiles"][2].update(memory_slices=3))
    assert "must equal memory_slices 3" in str(_error(broken))


def test_duplicate_product_across_models(broken: Path) -> None:
    f = broken / "h200-141gb.yaml"

    def claim(d: dict[str, Any]) -> None:
        d["model"]["nvml_names"].append("NVIDIA H100 NVL")
        d["model"]["memory_mib"] = 95830  # the same total as h100-nvl-94gb: nothing tells the two apart
        for p in d["model"]["profiles"]:
            p["memory_mib"] = min(p["memory_mib"], 95830)

    _edit(f, claim)
    assert "already claimed" in str(_error(broken))


def test_shared_product_is_told_apart_by_total_memory(catalog: Catalog) -> None:
    """Two GB200 boards share the NVML name: the node's total memory picks the model, else the better known."""
    assert catalog.match_product("NVIDIA-GB200", 189471) is catalog.model("gb200-186gb")
    assert catalog.match_product("NVIDIA-GB200", 193000) is catalog.model("blackwell-189gb")
    assert catalog.match_product("NVIDIA-GB200") is catalog.model("gb200-186gb")  # observed beats inferred


def test_pci_pairing_must_name_the_models_own_product_and_ids(broken: Path) -> None:
    f = broken / "h200-141gb.yaml"
    _edit(f, lambda d: d["model"]["pci_ids_by_product"].update({"NVIDIA H200 NVL": ["0x233010DE"]}))
    assert "model.pci_ids_by_product.NVIDIA H200 NVL[0]: 0x233010DE is not in the model's pci_device_ids" in str(
        _error(broken)
    )


def test_operator_directory_adds_and_replaces_models(tmp_path: Path) -> None:
    extra = tmp_path / "mine"
    extra.mkdir()
    src = yaml.safe_load((default_profiles_dir() / "h100-80gb.yaml").read_text())
    src["model"]["profiles"][3]["memory_mib"] = 40448  # this fleet's driver
    (extra / "h100.yaml").write_text(yaml.safe_dump(src))
    clone = yaml.safe_load((default_profiles_dir() / "h200-141gb.yaml").read_text())
    clone["model"]["id"] = "h200-custom"
    clone["model"]["nvml_names"] = ["NVIDIA H200 Custom"]
    clone["model"].pop("pci_ids_by_product")  # it names the products replaced above
    (extra / "custom.yaml").write_text(yaml.safe_dump(clone))
    cat = load_catalog([extra])
    assert cat.model("h100-80gb").profile("3g.40gb").memory_mib == 40448
    assert cat.model("h200-custom").display_name
    assert cat.model("a30-24gb")  # shipped models are still there


def test_load_file_reads_cards() -> None:
    cards = load_file(default_profiles_dir() / "non-mig-cards.yaml")
    assert isinstance(cards, list)
    assert any("NVIDIA L4" in c.nvml_names for c in cards)
