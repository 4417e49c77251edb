"""Faults converge: random A100-40GB states, targets and one failpoint each (a create that fails, an IN_USE that
never clears, an IN_USE that clears), run through the apply engine against the fake driver. Whatever happens, no
instance in use is touched, the GPU ends at the target (exit 0) or exactly at its previous layout (exit 1 or 3),
and the journal is empty. The kubelet is an in-process holder map here (its gRPC path: test_apply.py)."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

import pynvml
from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import Holder
from migctl.agent.apply import Applier, Retry
from migctl.agent.journal import Journal
from migctl.core.hardware.geometry import geometry
from tests.unit.builders import CATALOG
from tests.unit.fake_nvml_mig import FakeMigNvml, MigGpu

MODEL = CATALOG.model("a100-40gb")
GEO = geometry(MODEL)
LAYOUTS = [lay for lay in GEO.base_layouts if sum(n for _, n in lay) <= 4]


class Kubelet:
    def __init__(self, held: Mapping[str, Holder]) -> None:
        self.held = dict(held)

    def holders(self) -> Mapping[str, Holder]:
        return self.held


@settings(max_examples=40, deadline=None)
@given(
    before=st.sampled_from(LAYOUTS),
    target=st.sampled_from(LAYOUTS),
    busy=st.lists(st.sampled_from(["", "process", "pod"]), min_size=4, max_size=4),
    fault=st.sampled_from(["none", "create", "in-use-forever", "in-use-clears"]),
)
def test_every_fault_ends_at_the_target_or_the_previous_layout(
    before: tuple[tuple[str, int], ...], target: tuple[tuple[str, int], ...], busy: list[str], fault: str
) -> None:
    fake = FakeMigNvml([MigGpu()])
    held: dict[str, Holder] = {}
    for i, p in enumerate(GEO.place(before)):
        uuid = fake.add(0, p.profile, p.start, processes=1 if busy[i] == "process" else 0)
        if busy[i] == "pod":
            held[uuid] = Holder("ns", f"pod-{i}", "main", f"nvidia.com/mig-{p.profile}")
    in_use = {u for g in fake.gpus[0].gis.values() for c in g.cis.values() for u in [c.uuid] if c.processes}
    in_use |= set(held)
    if fault == "create":
        fake.fail_gi_create[2] = pynvml.NVML_ERROR_UNKNOWN
    elif fault.startswith("in-use"):
        for g in fake.gpus[0].gis.values():
            fake.in_use_on_destroy[(0, (g.start, g.size))] = -1 if fault == "in-use-forever" else 1
    layout_before = [(pid, s, z) for pid, s, z, _ in fake.layout(0)]
    with tempfile.TemporaryDirectory() as state:
        journal = Journal(Path(state))
        applier = Applier(MigNvml(fake), Kubelet(held), journal, CATALOG, lambda: None, Retry(3, 0.0001, 0.0001))
        result = applier.apply({0: dict(target)})
        assert journal.entries() == [] and not journal.path.exists()
    now = fake.layout(0)
    assert in_use <= {u for *_, u in now}, "an instance in use was destroyed"
    touched = {span for _, _, span in fake.mutations}
    assert not any((s, z) in touched for _, s, z, u in now if u in in_use), "an instance in use was touched"
    if result.exit_code == 0:
        assert Counter(MODEL.profile(p).name for p in _names(now)) == Counter(dict(target))
    else:
        assert [(pid, s, z) for pid, s, z, _ in now] == layout_before


def _names(layout: list[tuple[int, int, int, str]]) -> list[str]:
    by_id = {p.profile_id: p.name for p in MODEL.profiles}
    return [by_id[pid] for pid, *_ in layout]
