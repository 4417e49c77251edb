"""The mutating NVML adapter (migctl/adapters/nvml_mig.py) against the fake driver (tests/unit/fake_nvml_mig.py):
NVML is simulated at pynvml's interface, with pynvml's real error classes."""

from __future__ import annotations

import pynvml
import pytest

from migctl.adapters.nvml import NvmlError
from migctl.adapters.nvml_mig import InstanceInUseError, MigNvml
from migctl.errors import MigctlError
from tests.unit.fake_nvml_mig import FakeMigNvml, MigGpu


def machine() -> FakeMigNvml:
    fake = FakeMigNvml([MigGpu()])
    fake.add(0, "3g.20gb", 0, processes=2)
    fake.add(0, "1g.5gb", 6)
    return fake


def test_the_fake_offers_only_real_pynvml_functions() -> None:
    for name in vars(FakeMigNvml):
        if name.startswith("nvml"):
            assert callable(getattr(pynvml, name)), name


def test_read_finds_placements_uuids_and_nvml_holders() -> None:
    fake = machine()
    with MigNvml(fake).session() as nvml:
        gpu = nvml.gpu(0)
    assert gpu.mig_enabled and gpu.uuid == "GPU-a100-0"
    assert [(f.profile, f.start, f.size, f.ci, f.holder) for f in gpu.instances] == [
        ("3g.20gb", 0, 4, 0, "2 processes (NVML)"),
        ("1g.5gb", 6, 1, 0, ""),
    ]
    assert all(f.uuid.startswith("MIG-") for f in gpu.instances)
    assert fake.mutations == [] and fake.initialized == 0


def test_create_at_an_explicit_placement_with_a_full_compute_instance() -> None:
    fake = machine()
    with MigNvml(fake).session() as nvml:
        gi, ci, uuid = nvml.create(0, 14, 4, 2)  # 2g.10gb at 4
        gpu = nvml.gpu(0)
    assert uuid.startswith("MIG-") and ci == 0
    assert ("2g.10gb", 4, 2, gi) in [(f.profile, f.start, f.size, f.gi) for f in gpu.instances]
    ci_profile = fake.gpus[0].gis[gi].cis[0].profile_id
    assert ci_profile == pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE  # spans the whole GPU instance


def test_create_on_occupied_slices_raises_insufficient_resources() -> None:
    with MigNvml(machine()).session() as nvml, pytest.raises(NvmlError) as err:
        nvml.create(0, 19, 6, 1)  # the 1g at 6 is there
    assert err.value.code == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES


def test_a_failed_compute_instance_create_leaves_no_gpu_instance_behind() -> None:
    fake = machine()
    fake.fail_ci_create[1] = pynvml.NVML_ERROR_UNKNOWN
    with MigNvml(fake).session() as nvml, pytest.raises(MigctlError):
        nvml.create(0, 14, 4, 2)
    assert [t[1] for t in fake.layout(0)] == [0, 6]


def test_destroying_a_busy_instance_raises_in_use_and_keeps_it() -> None:
    fake = machine()
    with MigNvml(fake).session() as nvml:
        busy = nvml.gpu(0).instances[0]
        with pytest.raises(InstanceInUseError):
            nvml.destroy(0, busy)
    assert len(fake.layout(0)) == 2


def test_destroy_is_idempotent_and_never_hits_a_new_instance_on_a_reused_id() -> None:
    fake = machine()
    with MigNvml(fake).session() as nvml:
        old = nvml.gpu(0).instances[1]
        nvml.destroy(0, old)
        nvml.destroy(0, old)  # already gone: nothing
        gi, _, uuid = nvml.create(0, 19, 6, 1)  # the same span: NVML gives the same GPU-instance id
        assert gi == old.gi and uuid != old.uuid
        nvml.destroy(0, old)  # the stale record names the new instance's id: it must be left alone
    assert [t[3] for t in fake.layout(0)][1] == uuid


def test_a_gpu_instance_without_compute_instance_is_seen() -> None:
    fake = machine()
    gi = next(g for g in fake.gpus[0].gis.values() if g.start == 6)
    gi.cis.clear()
    with MigNvml(fake).session() as nvml:
        half = nvml.gpu(0).instances[1]
    assert (half.start, half.ci, half.uuid, half.in_use) == (6, None, "", False)


def test_an_instance_created_elsewhere_than_asked_is_destroyed_and_reported() -> None:
    """Guards the unconfirmed ctypes form of the placement argument: a misread placement never sticks."""
    fake = machine()
    fake.ignore_placement = True
    with MigNvml(fake).session() as nvml, pytest.raises(NvmlError, match=r"created at \(4, 1\)"):
        nvml.create(0, 19, 5, 1)  # asked 5; the driver picks the first free 1g spot, 4
    assert [t[1] for t in fake.layout(0)] == [0, 6]
