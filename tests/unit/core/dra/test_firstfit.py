"""First fit on realistic DynamicMIG and static pools (NVIDIA's exact slice shape, read by the adapter).

The real allocator is the oracle of the cluster tier; here the predictor is checked against the rules it
reproduces and against a plain single-device oracle written independently (`_first_free`)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.dra.claims import Constraint, Request
from migctl.core.dra.devices import Device, DeviceId, NodePool
from migctl.core.dra.firstfit import Choice, NoFit, predict
from migctl.core.hardware.geometry import Placement
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import Taint, Toleration
from tests.unit.core.dra.helpers import GPU, MIG, claim, classes, exact, memory_cel, pool, profile_cel, profile_claim

PARENT = "gpu.nvidia.com/parentUUID"


def names(prediction_outcome: object) -> tuple[str, ...]:
    assert isinstance(prediction_outcome, Choice), prediction_outcome
    return prediction_outcome.names


@pytest.mark.parametrize(("model", "one_g"), [("a100-40gb", "1g.5gb"), ("h100-80gb", "1g.10gb")])
def test_a_1g_lands_at_start_0_of_gpu_0_and_blocks_4g_and_7g_there(catalog: Catalog, model: str, one_g: str) -> None:
    p, cls = pool(catalog, model, gpus=2), classes(catalog)
    m = catalog.model(model)
    four = next(x.name for x in m.base_profiles if x.compute_slices == 4)
    pred = predict(
        [p], [profile_claim("a", one_g), profile_claim("b", m.full_profile.name), profile_claim("c", four)], cls
    )
    first = names(pred.outcomes[0])[0]
    assert first.startswith("gpu-0-mig-") and first.endswith("-0")
    assert p.by_name[first].placement == Placement(one_g, 0, 1)
    assert names(pred.outcomes[1])[0].startswith("gpu-1-mig-")  # 7g: GPU 0 lost slice 0
    assert isinstance(pred.outcomes[2], NoFit)  # 4g: GPU 0 lost slice 0, GPU 1 is whole-7g


def test_one_gpu_after_the_1g_no_4g_or_7g(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    pred = predict(
        [p], [profile_claim("a", "1g.10gb"), profile_claim("b", "4g.40gb"), profile_claim("c", "3g.40gb")], cls
    )
    assert isinstance(pred.outcomes[1], NoFit)
    assert names(pred.outcomes[2]) == ("gpu-0-mig-3g40gb-9-4",)


def test_whole_gpu_first_in_name_order(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb", gpus=2), classes(catalog)
    assert names(predict([p], [claim("a", exact(GPU))], cls).outcomes[0]) == ("gpu-0",)
    pred = predict([p], [profile_claim("a", "1g.10gb"), claim("b", exact(GPU))], cls)
    assert names(pred.outcomes[1]) == ("gpu-1",)  # gpu-0's counters are partly drawn: the whole GPU no longer fits
    anything = classes(catalog) | {
        "any": replace(cls[MIG], name="any", selectors=("device.driver == 'gpu.nvidia.com'",))
    }
    got = predict([p], [claim("c", exact("any", memory_cel("isGreaterThan", "10Gi")))], anything)
    assert names(got.outcomes[0]) == ("gpu-0",)  # no type restriction: gpu-0 sorts before gpu-0-mig-...


def test_ampere_with_mig_mode_on_offers_no_whole_gpu(catalog: Catalog) -> None:
    p, cls = pool(catalog, "a100-40gb", mig_mode_on=True), classes(catalog)
    assert isinstance(predict([p], [claim("a", exact(GPU))], cls).outcomes[0], NoFit)


def test_counters_fill_a_gpu_then_move_on(catalog: Catalog) -> None:
    p, cls = pool(catalog, "a100-40gb", gpus=2), classes(catalog)
    pred = predict([p], [profile_claim(f"c{i}", "1g.10gb") for i in range(5)], cls)
    got = [names(o)[0] for o in pred.outcomes]
    assert got == [f"gpu-0-mig-1g10gb-15-{s}" for s in (0, 2, 4, 6)] + ["gpu-1-mig-1g10gb-15-0"]
    one = pool(catalog, "a100-40gb")
    pred1 = predict([one], [profile_claim(f"c{i}", "1g.10gb") for i in range(5)], cls)
    assert isinstance(pred1.outcomes[4], NoFit)


def test_allocated_devices_and_their_counters_are_respected(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    taken = [p.by_name["gpu-0-mig-4g40gb-5-0"].id]
    pred = predict([p], [profile_claim("a", "1g.10gb"), profile_claim("b", "3g.40gb")], cls, allocated=taken)
    assert names(pred.outcomes[0]) == ("gpu-0-mig-1g10gb-19-4",)
    assert isinstance(pred.outcomes[1], NoFit)
    assert pred.allocated == {*taken, p.by_name["gpu-0-mig-1g10gb-19-4"].id}


def test_taints_block_unless_tolerated(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    first = p.by_name["gpu-0-mig-1g10gb-19-0"].id
    fence = {first: (Taint("migctl.io/placement", "reserved", "NoSchedule"),)}
    assert names(predict([p], [profile_claim("a", "1g.10gb")], cls, fences=fence).outcomes[0]) == (
        "gpu-0-mig-1g10gb-19-1",
    )
    execute = {first: (Taint("k", "", "NoExecute"),)}
    assert names(predict([p], [profile_claim("a", "1g.10gb")], cls, fences=execute).outcomes[0])[0].endswith("-19-1")
    harmless = {first: (Taint("k", "", "None"),)}
    assert names(predict([p], [profile_claim("a", "1g.10gb")], cls, fences=harmless).outcomes[0])[0].endswith("-19-0")
    tolerant = claim("t", exact(MIG, profile_cel("1g.10gb"), tolerations=[Toleration("migctl.io/placement", "Exists")]))
    assert names(predict([p], [tolerant], cls, fences=fence).outcomes[0])[0].endswith("-19-0")
    in_slice = replace(p, devices=tuple(replace(d, taints=fence[first]) if d.id == first else d for d in p.devices))
    assert names(predict([in_slice], [profile_claim("a", "1g.10gb")], cls).outcomes[0])[0].endswith("-19-1")


def test_parent_uuid_keeps_a_claim_on_one_gpu_by_backtracking(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb", gpus=2), classes(catalog)
    taken = [p.by_name["gpu-0-mig-4g40gb-5-0"].id]
    reqs = (exact(MIG, profile_cel("1g.10gb")), exact(MIG, profile_cel("4g.40gb")))
    free = predict([p], [claim("a", *reqs)], cls, allocated=taken)
    assert names(free.outcomes[0]) == ("gpu-0-mig-1g10gb-19-4", "gpu-1-mig-4g40gb-5-0")
    same = predict([p], [claim("a", *reqs, constraints=[Constraint(match_attribute=PARENT)])], cls, allocated=taken)
    # GPU 0 has no 4g left; on GPU 1 a 1g at slices 0-3 would block the 4g, so the search backtracks to slice 4
    assert names(same.outcomes[0]) == ("gpu-1-mig-1g10gb-19-4", "gpu-1-mig-4g40gb-5-0")
    two = predict(
        [p],
        [claim("b", exact(MIG, profile_cel("4g.40gb"), count=2), constraints=[Constraint(match_attribute=PARENT)])],
        cls,
    )
    assert isinstance(two.outcomes[0], NoFit)
    distinct = predict(
        [p],
        [claim("c", exact(MIG, profile_cel("1g.10gb"), count=2), constraints=[Constraint(distinct_attribute=PARENT)])],
        cls,
    )
    assert names(distinct.outcomes[0]) == ("gpu-0-mig-1g10gb-19-0", "gpu-1-mig-1g10gb-19-0")


def test_first_available_falls_through(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    req = Request(
        "r",
        first_available=(("big", exact(MIG, profile_cel("7g.80gb"))), ("small", exact(MIG, profile_cel("1g.10gb")))),
    )
    pred = predict([p], [profile_claim("x", "1g.10gb"), claim("a", req)], cls)
    got = pred.outcomes[1]
    assert isinstance(got, Choice) and got.devices[0][0] == "r/small" and got.names == ("gpu-0-mig-1g10gb-19-1",)


def test_a_pods_claims_are_allocated_together(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    pod = (profile_claim("a", "3g.40gb"), profile_claim("b", "4g.40gb"))
    pred = predict([p], [pod], cls)  # 3g first would take slices 0-3; the 4g needs them: backtrack
    assert names(pred.outcomes[0]) == ("gpu-0-mig-3g40gb-9-4",) and names(pred.outcomes[1]) == ("gpu-0-mig-4g40gb-5-0",)
    alone = predict([p], list(pod), cls)  # two pods: the first commits before the second is tried
    assert names(alone.outcomes[0]) == ("gpu-0-mig-3g40gb-9-0",) and isinstance(alone.outcomes[1], NoFit)


def test_static_pools_walk_the_made_devices(catalog: Catalog) -> None:
    layout = [[Placement("3g.40gb", 4, 4), Placement("1g.10gb", 0, 1), Placement("1g.10gb", 1, 1)]]
    p, cls = pool(catalog, "h100-80gb", mode="static", static_layouts=layout), classes(catalog)
    pred = predict(
        [p],
        [
            profile_claim("a", "1g.10gb"),
            profile_claim("b", "1g.10gb"),
            profile_claim("c", "1g.10gb"),
            profile_claim("d", "3g.40gb"),
        ],
        cls,
    )
    assert [o.names if isinstance(o, Choice) else None for o in pred.outcomes] == [
        ("gpu-0-mig-1g10gb-19-0",),
        ("gpu-0-mig-1g10gb-19-1",),
        None,
        ("gpu-0-mig-3g40gb-9-4",),
    ]


def test_what_cannot_be_predicted_says_so(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    odd = predict([p], [claim("a", exact(MIG, "has(device.attributes['gpu.nvidia.com'].profile)"))], cls).outcomes[0]
    assert isinstance(odd, NoFit) and odd.unpredictable
    every = predict([p], [claim("b", exact(MIG, mode="All"))], cls).outcomes[0]
    assert isinstance(every, NoFit) and every.unpredictable
    missing = predict([p], [claim("c", exact("nope"))], cls).outcomes[0]
    assert isinstance(missing, NoFit) and not missing.unpredictable and "does not exist" in missing.why
    err = predict([p], [claim("d", exact(GPU, profile_cel("1g.10gb")))], cls).outcomes[0]
    assert isinstance(err, NoFit) and "no such key" in err.why  # a CEL runtime error fails the pod, as upstream


def test_incomplete_pools_offer_nothing(catalog: Catalog) -> None:
    p, cls = pool(catalog, "h100-80gb"), classes(catalog)
    assert isinstance(predict([replace(p, complete=False)], [profile_claim("a", "1g.10gb")], cls).outcomes[0], NoFit)


# -- properties ---------------------------------------------------------------------------------------------------


def _first_free(p: NodePool, used: set[DeviceId], profile: str) -> Device | None:
    """Independent oracle for one single-device claim: the first listed device of the profile whose memory slices
    are free on its GPU (DynamicMIG: a device draws its slices; the whole GPU draws all)."""
    held: dict[int | None, set[int]] = {}
    for d in p.devices:
        if d.id in used:
            held.setdefault(d.minor, set()).update(d.slices)
    for d in p.devices:
        if d.kind == "mig" and d.profile == profile and d.id not in used and not d.slices & held.get(d.minor, set()):
            return d
    return None


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_first_fit_matches_the_oracle_and_never_double_books(catalog: Catalog, data: st.DataObject) -> None:
    model = catalog.model(data.draw(st.sampled_from(["a100-40gb", "h100-80gb", "a30-24gb"])))
    p, cls = pool(catalog, model.id, gpus=data.draw(st.integers(1, 2))), classes(catalog)
    profiles = [x.name for x in model.profiles if x.profile_id is not None and not x.attributes]
    queue = [profile_claim(f"c{i}", data.draw(st.sampled_from(profiles))) for i in range(data.draw(st.integers(1, 12)))]
    pred = predict([p], queue, cls)
    used: set[DeviceId] = set()
    for spec, outcome in zip(queue, pred.outcomes, strict=True):
        want = spec.requests[0].exactly.selectors[0].split("'")[-2]  # type: ignore[union-attr]
        expected = _first_free(p, used, want)
        if expected is None:
            assert isinstance(outcome, NoFit)
            continue
        assert isinstance(outcome, Choice) and outcome.names == (expected.name,)
        used.add(expected.id)
    for gpu in p.gpus:  # no memory slice held twice, no counter overdrawn
        mine = [d for d in p.devices if d.id in pred.allocated and d.minor == gpu.minor]
        slices = [s for d in mine for s in d.slices]
        assert len(slices) == len(set(slices)) <= model.placement_units
        assert gpu.counter_set is not None
        for counter, total in gpu.counter_set.counters.items():
            assert sum(c.amount for d in mine for c in d.consumes if c.counter == counter) <= total
