"""NVML discovery against the fake pynvml: A100 with MIG, H100 with MIG off, T4, and NVML failures."""

from __future__ import annotations

import ast
from pathlib import Path

import pynvml
import pytest

import migctl.adapters.nvml as nvml_module
from migctl.adapters.nvml import NvmlError, NvmlReader
from migctl.core.hardware.catalog import Catalog
from tests.unit.fake_nvml import FakeNvml, a100_mig, h100_no_mig, h200_no_mig, t4


def test_a100_with_mig_reports_instances_placements_and_busy_devices(catalog: Catalog) -> None:
    inv = NvmlReader(FakeNvml([a100_mig()])).read()
    (gpu,) = inv.gpus
    assert (gpu.name, gpu.uuid, gpu.memory_mib) == ("NVIDIA A100-SXM4-40GB", "GPU-a100-0000", 40536)
    assert gpu.mig_capable and gpu.mig_enabled and gpu.mig_pending
    rows = [(d.profile, d.profile_id, d.start, d.size, d.memory_mib, d.uuid, d.busy) for d in gpu.instances]
    assert rows == [
        ("3g.20gb", 9, 0, 4, 20096, "MIG-a100-3g", True),
        ("2g.10gb", 14, 4, 2, 9984, "MIG-a100-2g", False),
        ("1g.5gb", 19, 6, 1, 4864, "MIG-a100-1g", True),
    ]
    assert gpu.busy is True
    assert inv.driver == "550.54.15"
    # Names come from NVML numbers through go-nvlib's formula, and land on the catalog's names.
    model = catalog.model("a100-40gb")
    assert set(inv.profiles) <= {p.name for p in model.profiles}
    assert inv.profiles["1g.5gb+me"] == 4864 and inv.profiles["7g.40gb"] == 40320


def test_h100_with_mig_disabled_and_t4_without_mig() -> None:
    inv = NvmlReader(FakeNvml([h100_no_mig(), t4()])).read()
    h100, tesla = inv.gpus
    assert (h100.mig_capable, h100.mig_enabled, h100.mig_pending, h100.instances, h100.busy) == (
        True, False, False, (), False,
    )  # fmt: skip
    assert (tesla.mig_capable, tesla.mig_enabled, tesla.busy, tesla.memory_mib) == (False, False, True, 15360)
    # MIG off still publishes the driver's profile memory (the T4 adds none): the first layout is sized by it.
    assert inv.profiles == {
        "1g.10gb": 9984, "1g.10gb+me": 9984, "1g.20gb": 20096, "2g.20gb": 20096,
        "3g.40gb": 40320, "4g.40gb": 40448, "7g.80gb": 81152,
    }  # fmt: skip


def test_h200_driver_580_profile_memory_reaches_the_planners_model(catalog: Catalog) -> None:
    """Numbers a real H200 gave with MIG off: 256 MiB more than the catalog's prior on four profiles."""
    inv = NvmlReader(FakeNvml([h200_no_mig()])).read()
    model = catalog.model("h200-141gb")
    live = model.with_live_memory(inv.profiles, inv.total_mib)
    assert {p.name for p in live.profiles} == {p.name for p in model.profiles}  # same names: nothing renamed
    assert (live.profile("1g.35gb").memory_mib, model.profile("1g.35gb").memory_mib) == (33280, 33024)
    assert (live.profile("7g.141gb").memory_mib, live.profile("1g.18gb").memory_mib) == (143360, 16384)


def test_pending_mig_mode_is_reported() -> None:
    gpu = h100_no_mig()
    gpu.mig = (0, 1)  # enabled, waiting for a GPU reset
    (h100,) = NvmlReader(FakeNvml([gpu])).read().gpus
    assert not h100.mig_enabled and h100.mig_pending


def test_process_queries_unsupported_means_busy_unknown() -> None:
    inv = NvmlReader(FakeNvml([a100_mig(), t4()], process_queries=False)).read()
    assert inv.gpus[0].busy is None and all(d.busy is None for d in inv.gpus[0].instances)
    assert inv.gpus[1].busy is None


def test_missing_library_is_a_clear_error() -> None:
    fake = FakeNvml([t4()], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlError) as err:
        NvmlReader(fake).read()
    assert "nvmlInit" in str(err.value) and "libnvidia-ml.so.1" in str(err.value)


def test_lost_gpu_names_the_gpu_and_nvml_is_shut_down() -> None:
    lost = t4()
    lost.lost = True
    fake = FakeNvml([a100_mig(), lost])
    with pytest.raises(NvmlError) as err:
        NvmlReader(fake).read()
    assert "GPU 1" in str(err.value) and "fell off the bus" in str(err.value)
    assert fake.initialized == 0 and fake.calls[-1] == "nvmlShutdown"


def _used_functions() -> set[str]:
    tree = ast.parse(Path(nvml_module.__file__).read_text())
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr.startswith("nvml") and isinstance(node.value, ast.Name)
    }


def test_agent_only_queries_and_the_fake_implements_exactly_real_pynvml_functions() -> None:
    used = _used_functions()
    assert "nvmlDeviceGetMigMode" in used and "nvmlGpuInstanceGetInfo" in used  # the scan found the calls
    for name in used:
        assert callable(getattr(pynvml, name)), name  # the real library has it
        assert callable(getattr(FakeNvml, name)), name  # and so does the fake
        query = name in ("nvmlInit", "nvmlShutdown") or "Get" in name
        assert query, f"{name} is not a query: the agent must never change the GPUs"
    fake_api = {n for n in vars(FakeNvml) if n.startswith("nvml")}
    assert fake_api == used, "the fake implements exactly what the agent uses"


def test_a_read_on_real_hardware_would_only_issue_queries() -> None:
    fake = FakeNvml([a100_mig(), h100_no_mig(), t4()])
    NvmlReader(fake).read()
    assert fake.calls[0] == "nvmlInit" and fake.calls[-1] == "nvmlShutdown"
    assert all("Get" in c for c in fake.calls[1:-1])
