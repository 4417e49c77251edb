"""Each baseline's defining behaviour (docs/simulation.md §2), and the metrics the comparison rests on."""

from __future__ import annotations

import pytest

from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import canonical, geometry
from migctl.sim.mig import Sim
from migctl.sim.policies.hami import Hami
from migctl.sim.policies.nos import Nos
from migctl.sim.run import simulate
from migctl.sim.scenario import summarize
from migctl.sim.state import Cluster
from migctl.sim.workloads import GENAI, Job, data_dir, genai_workload

H100 = load_catalog().model("h100-80gb")
# The GenAI trace is shared data (../shared/data or $MIGCTL_SIM_DATA), not bundled: without it the test is skipped,
# as tests/unit/sim/test_sim_validation.py does for openb.
needs_genai = pytest.mark.skipif(
    not (data_dir(GENAI) / "pod_gpu_memory_summary_derived.csv").exists(), reason="shared GenAI trace data absent"
)
GIB = 1024


def test_nos_recuts_the_free_part_of_a_busy_gpu_node_wide() -> None:
    # A (5 GiB) runs long; B (35 GiB) needs a 3g.40gb that A's first cut does not leave free. nos's agent
    # deletes only free devices, so B starts while A still runs, after a second node-wide window.
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=10_000.0), Job("b", 35 * GIB, arrival=500.0, duration=10.0)]
    res = simulate(jobs, [1], H100, Nos(), reconfig_s=30.0, initial=(("1g.10gb", 7),))
    assert res.placed == 2
    assert res.wait_s[0] == 0.0  # A took a free 1g.10gb
    assert res.windows == 1 and res.reconfigs == 1
    b_start = 500.0 + res.wait_s[1]
    assert b_start < res.wait_s[0] + 10_000.0  # before A leaves
    assert res.window_log[0][2] == pytest.approx(b_start)  # B started when the second window closed


def test_nos_stock_recuts_only_idle_gpus() -> None:
    # The same trace as above through `nos-stock` (nos's partitioner under the stock mig-manager's rule): A's GPU
    # is busy, so B waits until A leaves and the GPU is idle, and only then is it re-cut.
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=10_000.0), Job("b", 35 * GIB, arrival=500.0, duration=10.0)]
    res = simulate(jobs, [1], H100, Nos(busy=False), reconfig_s=30.0, initial=(("1g.10gb", 7),))
    assert res.placed == 2 and res.reconfigs == 1
    assert 500.0 + res.wait_s[1] > 10_000.0  # after A left
    assert res.window_log[0][1] >= 10_000.0  # the one re-cut began on an idle GPU


def test_nos_batches_unschedulable_pods() -> None:
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=10.0)]
    res = simulate(jobs, [1], H100, "nos", reconfig_s=30.0)
    assert res.window_log[0][1] == pytest.approx(10.0)  # batchWindowIdleSeconds after the pod appeared
    assert res.wait_s == [pytest.approx(40.0)]


def test_hami_creates_one_smallest_instance_per_pod_and_places_1g_high() -> None:
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=100.0), Job("b", 15 * GIB, arrival=1.0, duration=100.0)]
    policy = Hami(Cluster([1], H100))
    seen: list[tuple[str, int]] = []
    sims: list[Sim] = []
    real_step = policy.step

    def spy(sim: Sim) -> None:
        real_step(sim)
        sims.append(sim)
        g = sim.cl.gpus[0]
        assert g.layout == g.used, "HAMi's instances are exactly its pods' instances"
        for ji, units in policy.taken.items():
            seen.append((sim.running[ji][0][1], units[0][1]))

    policy.step = spy  # type: ignore[method-assign]
    res = simulate(jobs, [1], H100, policy, create_s=2.0)
    assert res.wait_s == [2.0, 3.0]  # NVML creation closes this GPU only: b waits for a's, then its own
    masks = geometry(H100).masks
    profiles = dict(seen)
    assert set(profiles) == {"1g.10gb", "1g.20gb"}  # the smallest (memory, then slices) profile covering each
    assert profiles["1g.10gb"] == max(masks["1g.10gb"])  # 1g placed high
    assert profiles["1g.20gb"] == max(m for m in masks["1g.20gb"] if not m & profiles["1g.10gb"])
    empty = Cluster([1], H100)
    assert Hami(empty)._slot(empty, 0, "2g.20gb") == min(masks["2g.20gb"])  # the others low
    assert Hami(empty)._slot(empty, 0, "3g.40gb") == max(masks["3g.40gb"])
    assert canonical(sims[-1].cl.gpus[0].layout) == ()  # destroyed when the pods left


def test_first_fit_recuts_free_slices_but_static_never_changes() -> None:
    jobs = [Job("a", 5 * GIB, arrival=0.0, duration=1000.0), Job("b", 35 * GIB, arrival=10.0, duration=10.0)]
    ff = simulate(jobs, [1], H100, "first-fit")
    assert ff.placed == 2 and ff.reconfigs == 2 and ff.windows == 0
    static = simulate(jobs, [1], H100, "static-balanced")
    assert static.reconfigs == 0


def test_alloc_is_the_time_average_while_pods_arrive() -> None:
    # static all-balanced H100; a (30 GiB) runs 0-30 s, b (8 GiB) arrives at 100 s and runs 1,000 s. Arrivals span
    # [0, 100]: a's 30 GiB for 30 of those 100 s. The long tail after the last arrival does not count.
    jobs = [Job("a", 30 * GIB, arrival=0.0, duration=30.0), Job("b", 8 * GIB, arrival=100.0, duration=1000.0)]
    res = simulate(jobs, [1], H100, "static-balanced")
    full = H100.full_profile.memory_mib
    assert summarize(res)["alloc_pct"] == pytest.approx(100 * 30 * GIB * 30 / 100 / full)


@needs_genai
def test_genai_seeds_give_different_arrivals() -> None:
    a, b, a2 = (genai_workload(seed=s) for s in (42, 43, 42))
    arr = [j.arrival for j in a.jobs]
    assert arr == [j.arrival for j in a2.jobs]
    assert arr != [j.arrival for j in b.jobs]
    assert arr == sorted(arr)
    assert sorted(j.vram_mib for j in a.jobs) == sorted(j.vram_mib for j in b.jobs)  # same pods, new arrivals
