"""Every MIG model of the catalog simulates with every policy, and the static layouts are NVIDIA's named configs
for that model (the GPU Operator's default mig-parted config, vendored in migctl/sim/data)."""

from __future__ import annotations

import numpy as np
import pytest

from migctl.core.hardware.catalog import load_catalog
from migctl.sim.named import named_layout, static_layout
from migctl.sim.names import ANALYSIS, MIG_POLICIES
from migctl.sim.run import simulate
from migctl.sim.workloads import Job

CATALOG = load_catalog()
MIG_MODELS = [m for m in CATALOG.models if m.profiles]


def _jobs(full_mib: int, seed: int = 0) -> list[Job]:
    """A few pods of every size class, with departures: enough to make every policy cut, bind and re-cut."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(14):
        share = float(rng.choice([0.1, 0.2, 0.35, 0.5, 0.9]))
        out.append(Job(f"j{i}", int(full_mib * share), arrival=30.0 * i, duration=200.0 + 50.0 * (i % 4)))
    out.append(Job("whole", full_mib, num_gpu=2, whole=True, arrival=100.0, duration=300.0))
    return out


@pytest.mark.parametrize("model", MIG_MODELS, ids=lambda m: m.id)
def test_every_model_simulates_with_every_policy(model: object) -> None:
    from migctl.core.hardware.catalog import GpuModel

    assert isinstance(model, GpuModel)
    jobs = _jobs(model.full_profile.memory_mib)
    for policy in (*MIG_POLICIES, *ANALYSIS):
        res = simulate(jobs, [2, 2], model, policy, seed=1)
        assert res.placed > 0, f"{policy} on {model.id} placed nothing"
        assert len(res.wait_s) == res.placed


def test_the_a30_gets_nvidias_balanced_layout_not_a_3g_it_lacks() -> None:
    a30 = CATALOG.model("a30-24gb")
    layout, source = static_layout(a30, "static-balanced")
    assert layout == (("1g.6gb", 2), ("2g.12gb", 1))
    assert "NVIDIA's all-balanced" in source
    assert static_layout(a30, "static-all-1g")[0] == (("1g.6gb", 4),)


def test_static_layouts_come_from_the_entry_for_the_models_device() -> None:
    # all-balanced has one entry per device filter; the H100-80GB's and the A100-40GB's differ
    assert named_layout(CATALOG.model("h100-80gb"), "all-balanced") == (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1))
    assert named_layout(CATALOG.model("a100-40gb"), "all-balanced") == (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))
    assert named_layout(CATALOG.model("h100-80gb"), "all-1g.5gb") is None  # no 1g.5gb on an H100
    # all-1g.35gb: 4 on an H200 (its 1g.35gb takes two memory slices), 7 on a GB300, told apart by the filter
    assert named_layout(CATALOG.model("gb300-278gb"), "all-1g.35gb") == (("1g.35gb", 7),)
    assert named_layout(CATALOG.model("h200-141gb"), "all-1g.35gb") == (("1g.35gb", 4),)
