"""`hack/nvml-catalog-check.py`'s comparison, fed what a real H200 reported (driver 580.159.04, 2026-11-30)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

from migctl.core.hardware.catalog import Catalog
from tests.unit.fake_nvml import H200_DRIVER_580_PROFILES

SCRIPT = Path(__file__).resolve().parents[4] / "hack" / "nvml-catalog-check.py"
# Placements per profile id as NVML's possible-placements query returned them on that H200.
H200_PLACEMENTS = {
    19: [[i, 1] for i in range(7)],
    20: [[i, 1] for i in range(7)],
    15: [[0, 2], [2, 2], [4, 2], [6, 2]],
    14: [[0, 2], [2, 2], [4, 2]],
    9: [[0, 4], [4, 4]],
    5: [[0, 4]],
    0: [[0, 8]],
}
H200_MAX = {19: 7, 20: 1, 15: 4, 14: 3, 9: 2, 5: 1, 0: 1}
H200_NAMES = {19: "1g.18gb", 20: "1g.18gb+me", 15: "1g.35gb", 14: "2g.35gb", 9: "3g.71gb", 5: "4g.71gb", 0: "7g.141gb"}


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvml_catalog_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _live() -> dict[int, dict[str, Any]]:
    return {
        index: {
            "name": f"MIG {H200_NAMES[pid]}",
            "profile_id": pid,
            "slices": slices,
            "memory_mib": mib,
            "max_instances": H200_MAX[pid],
            "placements": H200_PLACEMENTS[pid],
        }
        for index, (pid, slices, mib) in H200_DRIVER_580_PROFILES.items()
    }


def test_the_real_h200_differs_from_the_catalog_only_in_driver_dependent_memory(catalog: Catalog) -> None:
    problems = _script()._compare(catalog.model("h200-141gb"), 143771, _live())
    assert sorted(problems) == sorted(
        [
            "profile id 15 (MIG 1g.35gb) memory_mib: NVML 33280, catalog 33024",
            "profile id 14 (MIG 2g.35gb) memory_mib: NVML 33280, catalog 33024",
            "profile id 9 (MIG 3g.71gb) memory_mib: NVML 71424, catalog 71168",
            "profile id 5 (MIG 4g.71gb) memory_mib: NVML 71424, catalog 71168",
            "profile id 0 (MIG 7g.141gb) memory_mib: NVML 143360, catalog 143104",
        ]
    )


def test_a_placement_or_count_the_catalog_gets_wrong_is_reported(catalog: Catalog) -> None:
    live = _live()
    live[2]["placements"] = [[0, 4]]  # 3g.71gb: as if only one placement existed
    live[0]["max_instances"] = 8
    problems = _script()._compare(catalog.model("h200-141gb"), 143000, live)
    assert "profile id 9 (MIG 3g.71gb) placements: NVML [[0, 4]], catalog [[0, 4], [4, 4]]" in problems
    assert "profile id 19 (MIG 1g.18gb) max_instances: NVML 8, catalog 7" in problems
    assert "total memory: NVML 143000 MiB, catalog h200-141gb 143771 MiB" in problems
