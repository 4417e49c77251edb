"""Repacking one GPU: the least-stranded valid layout serving a set of requests, or none."""

from __future__ import annotations

from migctl.core.cluster import GpuDemand, Snapshot
from migctl.core.geometry import geometry
from migctl.core.planner import plan
from migctl.core.repack import repack
from tests.unit.builders import CATALOG, mig, node, vram

A100 = geometry(CATALOG.model("a100-40gb"))


def test_vram_requests_get_the_smallest_instances_that_cover_them() -> None:
    got = repack(A100, [(GpuDemand("vram", vram_mib=9216), None), (GpuDemand("vram", vram_mib=3072), None)])
    assert got is not None
    layout, profiles, stranded = got
    assert profiles == ["1g.10gb", "1g.5gb"]
    assert A100.is_valid(layout)
    waste = (9984 - 9216) + (4864 - 3072)
    assert stranded == A100.unusable_mib(layout) + waste


def test_exact_profiles_are_honoured_and_impossible_sets_refused() -> None:
    got = repack(
        A100, [(GpuDemand("profile", profile="3g.20gb"), None), (GpuDemand("profile", profile="4g.20gb"), None)]
    )
    assert got is not None and sorted(got[1]) == ["3g.20gb", "4g.20gb"]
    two_big = [(GpuDemand("profile", profile="4g.20gb"), None)] * 2
    assert repack(A100, two_big) is None  # max one 4g.20gb per GPU


def test_pod_that_fits_one_model_is_not_crowded_out() -> None:
    """A 30 GiB pod fits an A100-40GB 7g or an H100 3g; the 3g.20gb pod fits only the A100. Both must land."""
    a100 = node("a100", "a100-40gb", [{"7g.40gb": 1}])
    h100 = node("h100", "h100-80gb", [{"7g.80gb": 1}])
    result = plan(Snapshot((a100, h100), (vram("flexible", 30), mig("rigid", "3g.20gb"))))
    placed = {a.pod: a.node for a in result.assignments}
    assert placed == {"ns/flexible": "h100", "ns/rigid": "a100"}
