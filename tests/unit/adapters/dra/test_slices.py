"""ResourceSlices of gpu.nvidia.com -> node pools; bad slices named by kind, name and field; the rest still read."""

from __future__ import annotations

import copy
from typing import Any

from migctl.adapters.dra.slices import read_slices
from migctl.core.dra.devices import Mode
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import Catalog
from tests.nvidia_slices import node_slices


def test_dynamic_pool_in_nvidias_shape(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    r = read_slices(node_slices("n1", h100, 2), catalog)
    assert r.problems == ()
    (p,) = r.pools
    assert (p.name, p.node, p.mode, p.complete, p.generation) == ("n1", "n1", Mode.DYNAMIC, True, 1)
    assert [g.minor for g in p.gpus] == [0, 1] and all(g.model is not None and g.model.id == h100.id for g in p.gpus)
    assert p.devices[0].name == "gpu-0" and p.devices[1].name == "gpu-0-mig-1g10gb-19-0"  # counter slice walks nothing
    assert p.gpus[0].counter_set is not None and p.gpus[0].counter_set.memory_slices == 8
    one = p.by_name["gpu-1-mig-3g40gb-9-4"]
    assert (one.kind, one.minor, one.profile, one.profile_id, one.placement) == (
        "mig",
        1,
        "3g.40gb",
        9,
        Placement("3g.40gb", 4, 4),
    )
    assert one.gpu_uuid == p.gpus[1].uuid and one.mig_uuid == ""  # DynamicMIG devices have no UUID before they exist
    assert p.by_name["gpu-0"].placement == Placement("", 0, 8)
    assert one.attributes["gpu.nvidia.com/type"] == "mig" and one.memory_mib == h100.profile("3g.40gb").memory_mib


def test_walk_order_is_slice_name_order_not_input_order(catalog: Catalog) -> None:
    slices = node_slices("n1", catalog.model("h100-80gb"), 3)
    p = read_slices(list(reversed(slices)), catalog).pools[0]
    minors = [d.minor if d.minor is not None else -1 for d in p.devices]
    assert minors == sorted(minors) and p.slices == tuple(sorted(s["metadata"]["name"] for s in slices))


def test_static_pool_with_made_instances_and_a_whole_gpu(catalog: Catalog) -> None:
    layouts = [[Placement("3g.40gb", 4, 4), Placement("1g.10gb", 0, 1)], None]
    p = read_slices(
        node_slices("n2", catalog.model("h100-80gb"), 2, mode="static", static_layouts=layouts), catalog
    ).pools[0]
    assert p.mode is Mode.STATIC and [d.name for d in p.devices] == [
        "gpu-0-mig-1g10gb-19-0",
        "gpu-0-mig-3g40gb-9-4",
        "gpu-1",
    ]
    made = p.by_name["gpu-0-mig-3g40gb-9-4"]
    assert made.mig_uuid.startswith("MIG-") and made.placement == Placement("3g.40gb", 4, 4)
    assert p.gpus[1].memory_mib == catalog.model("h100-80gb").memory_mib


def test_older_generations_are_ignored_and_missing_slices_make_a_pool_incomplete(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    old = node_slices("n1", h100, 1, mode="static")
    new = node_slices("n1", h100, 2, generation=2)
    for s in old:
        s["metadata"]["name"] = "old-" + s["metadata"]["name"]
    p = read_slices(old + new, catalog).pools[0]
    assert p.generation == 2 and p.mode is Mode.DYNAMIC and len(p.gpus) == 2 and p.complete
    partial = read_slices(new[:2], catalog).pools[0]
    assert not partial.complete


def _bad_quantity(slices: list[dict[str, Any]]) -> None:
    slices[1]["spec"]["devices"][3]["capacity"]["memory"]["value"] = "lots"


def test_a_malformed_slice_costs_only_itself(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    broken, fine = node_slices("n1", h100, 1), node_slices("n2", h100, 1)
    _bad_quantity(broken)
    r = read_slices(broken + fine, catalog)
    (problem,) = r.problems
    assert (problem.kind, problem.name) == ("ResourceSlice", broken[1]["metadata"]["name"])
    assert problem.path == "spec.devices[3].capacity.memory.value" and "quantity" in problem.message
    assert not r.pool("n1").complete  # type: ignore[union-attr]
    n2 = r.pool("n2")
    assert n2 is not None and n2.complete and len(n2.devices) == len(fine[1]["spec"]["devices"])


def test_counters_that_contradict_the_catalog(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    slices = node_slices("n1", h100, 2)
    dev = next(d for d in slices[1]["spec"]["devices"] if d["name"] == "gpu-0-mig-1g20gb-15-2")
    counters = dev["consumesCounters"][0]["counters"]
    del counters["memory-slice-3"]
    counters["memory-slice-5"] = {"value": "1"}  # slices 2 and 5: not one range
    r = read_slices(slices, catalog)
    assert r.problems and r.problems[0].path.startswith("spec.devices[") and "contiguous" in r.problems[0].message

    shifted = node_slices("n1", h100, 2)
    dev = next(d for d in shifted[1]["spec"]["devices"] if d["name"] == "gpu-0-mig-3g40gb-9-4")
    c = dev["consumesCounters"][0]["counters"]
    for i in range(4, 8):
        del c[f"memory-slice-{i}"]
    c.update({f"memory-slice-{i}": {"value": "1"} for i in range(2, 6)})  # 3g at 2: H100 places 3g at 0 or 4 only
    r2 = read_slices(shifted, catalog)
    (p2,) = r2.problems
    index = [d["name"] for d in shifted[1]["spec"]["devices"]].index("gpu-0-mig-3g40gb-9-4")
    assert (p2.name, p2.path) == (shifted[1]["metadata"]["name"], f"spec.devices[{index}]")
    assert "start 4" in p2.message or "never placed" in p2.message
    pool = r2.pools[0]
    assert pool.gpu(0).model is None and pool.gpu(1).model is not None  # type: ignore[union-attr]
    assert pool.complete and pool.by_name["gpu-0-mig-3g40gb-9-4"].placement == Placement("3g.40gb", 2, 4)

    seven = node_slices("n1", h100, 1)
    del seven[0]["spec"]["sharedCounters"][0]["counters"]["memory-slice-7"]
    r3 = read_slices(seven, catalog)
    assert r3.problems[0].path == "spec.sharedCounters" and "7 memory slices" in r3.problems[0].message


def test_unknown_profile_and_wrong_name(catalog: Catalog) -> None:
    h100 = catalog.model("h100-80gb")
    slices = node_slices("n1", h100, 1, mode="static", static_layouts=[[Placement("1g.10gb", 0, 1)]])
    odd = copy.deepcopy(slices)
    odd[0]["spec"]["devices"][0]["attributes"]["profile"]["string"] = "5g.99gb"
    assert "not a profile" in read_slices(odd, catalog).problems[0].message
    renamed = copy.deepcopy(slices)
    renamed[0]["spec"]["devices"][0]["name"] = "gpu-0-mig-1g10gb-15-0"  # 15 is 1g.20gb's id
    assert "the name is not 1g.10gb's" in read_slices(renamed, catalog).problems[0].message
    nowhere = copy.deepcopy(slices)
    dev = nowhere[0]["spec"]["devices"][0]
    dev["name"] = "gpu-0-mig-1g10gb-19-7"  # name and slice agree, but H100 places a 1g at 0-6 only
    dev["capacity"] = {"memory": dev["capacity"]["memory"], "memorySlice7": {"value": "1"}}
    assert "never placed at (7, 1)" in read_slices(nowhere, catalog).problems[0].message


def test_legacy_static_names(catalog: Catalog) -> None:
    slices = node_slices(
        "n1", catalog.model("h100-80gb"), 1, mode="static", static_layouts=[[Placement("1g.10gb", 4, 1)]]
    )
    slices[0]["spec"]["devices"][0]["name"] = "gpu-0-mig-19-4-1"  # releases up to v25.8
    r = read_slices(slices, catalog)
    assert r.problems == () and r.pools[0].devices[0].placement == Placement("1g.10gb", 4, 1)
    slices[0]["spec"]["devices"][0]["name"] = "gpu-0-mig-19-3-1"
    assert "start 3" in read_slices(slices, catalog).problems[0].message


def test_other_drivers_and_kinds_are_skipped(catalog: Catalog) -> None:
    other = node_slices("n1", catalog.model("h100-80gb"), 1)
    for s in other:
        s["spec"]["driver"] = "net.example.com"
    r = read_slices([*other, {"kind": "Node", "metadata": {"name": "n1"}}], catalog)
    assert r.pools == () and r.problems == ()


def test_duplicate_device_names_invalidate_the_pool(catalog: Catalog) -> None:
    slices = node_slices("n1", catalog.model("h100-80gb"), 2)
    slices[2]["spec"]["devices"][0]["name"] = "gpu-0"
    r = read_slices(slices, catalog)
    assert any("listed twice" in p.message for p in r.problems) and not r.pools[0].complete
