"""Layout geometry must be exact: checked against a brute force over placements for every model."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from functools import cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.hardware.catalog import Catalog, GpuModel, load_catalog
from migctl.core.hardware.geometry import canonical, enumerate_layouts, geometry, place, unusable_mib, validate
from migctl.errors import LayoutError

CATALOG = load_catalog()
MODEL_IDS = [m.id for m in CATALOG.models]


@cache
def brute_force(model_id: str) -> frozenset[tuple[tuple[str, int], ...]]:
    """Every multiset reachable by choosing pairwise-disjoint (profile, placement) pairs, then the count,
    compute, instance and media-engine rules. Written independently of migctl.core.hardware.geometry."""
    model = CATALOG.model(model_id)
    slots = [(p.name, start, size) for p in model.profiles for start, size in p.placements]
    results: set[tuple[tuple[str, int], ...]] = set()

    def ok(chosen: list[tuple[str, int, int]]) -> bool:
        counts = Counter(n for n, _, _ in chosen)
        profs = {p.name: p for p in model.profiles}
        if any(c > profs[n].max_instances for n, c in counts.items()):
            return False
        if sum(profs[n].compute_slices for n, _, _ in chosen) > model.compute_slices:
            return False
        if len(chosen) > model.max_instances:
            return False
        me_all = [n for n in counts if profs[n].attributes == "+me.all"]
        if not me_all:
            return True
        others_ok = all(profs[n].attributes == "-me" for n in counts if n not in me_all)
        return sum(counts[n] for n in me_all) == 1 and others_ok

    def go(i: int, used: set[int], chosen: list[tuple[str, int, int]]) -> None:
        if i == len(slots):
            if chosen and ok(chosen):
                results.add(tuple(sorted(Counter(n for n, _, _ in chosen).items())))
            return
        go(i + 1, used, chosen)
        name, start, size = slots[i]
        cells = set(range(start, start + size))
        if not cells & used:
            go(i + 1, used | cells, [*chosen, (name, start, size)])

    go(0, set(), [])
    return frozenset(results)


@pytest.mark.parametrize("model_id", MODEL_IDS)
def test_enumeration_matches_brute_force(model_id: str) -> None:
    model = CATALOG.model(model_id)
    assert set(enumerate_layouts(model)) == brute_force(model_id)


@pytest.mark.parametrize(
    ("layout", "valid"),
    [
        ({"4g.20gb": 1, "3g.20gb": 1}, True),
        ({"3g.20gb": 2, "1g.5gb": 1}, False),  # memory slices: 2×4 already fill the 8 units
        ({"1g.5gb": 7}, True),
        ({"1g.5gb": 8}, False),
        ({"1g.5gb": 6, "1g.10gb": 1}, True),
        ({"2g.10gb": 3, "1g.5gb": 1}, True),
        ({"7g.40gb": 1, "1g.5gb": 1}, False),
        ({"1g.5gb+me": 2}, False),
        ({"4g.20gb": 1, "2g.10gb": 2}, False),  # 2g.10gb at 4 only; two need 4..8 but 6 is not a 2g start
    ],
)
def test_a100_40gb_examples(layout: dict[str, int], valid: bool) -> None:
    a100 = CATALOG.model("a100-40gb")
    assert geometry(a100).is_valid(layout) is valid


def test_a100_2g_times_3_plus_1g_10gb() -> None:
    """2g.10gb uses starts 0/2/4 and 1g.10gb may start at 6: the layout fits (7 compute slices)."""
    a100 = CATALOG.model("a100-40gb")
    placed = place(a100, {"2g.10gb": 3, "1g.10gb": 1})
    assert [(p.profile, p.start) for p in placed] == [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.10gb", 6)]


def test_invalid_layout_names_the_rule() -> None:
    a100 = CATALOG.model("a100-40gb")
    with pytest.raises(LayoutError, match="no placement"):
        validate(a100, {"3g.20gb": 2, "1g.5gb": 1})
    with pytest.raises(LayoutError, match="exceeds the maximum of 7"):
        validate(a100, {"1g.5gb": 8})
    with pytest.raises(LayoutError, match="no MIG profile"):
        validate(a100, {"1g.10gb.me": 1})


def test_me_all_shares_only_with_minus_me() -> None:
    rtx = CATALOG.model("rtx-pro-6000-blackwell-96gb")
    geo = geometry(rtx)
    assert geo.is_valid({"1g.24gb+me.all": 1, "1g.24gb-me": 3})
    assert not geo.is_valid({"1g.24gb+me.all": 1, "1g.24gb": 1})


def test_rtx_pro_mixed_layout_lands_like_hardware() -> None:
    """2g.48gb + 2×1g.24gb landed at 0:6, 6:3, 9:3 on real hardware (mig-data.md 1.12)."""
    rtx = CATALOG.model("rtx-pro-6000-blackwell-96gb")
    placed = place(rtx, {"2g.48gb": 1, "1g.24gb": 2})
    assert {(p.profile, p.start, p.size) for p in placed} == {("2g.48gb", 0, 6), ("1g.24gb", 6, 3), ("1g.24gb", 9, 3)}


def test_placement_keeps_large_runs_free() -> None:
    """One 1g.5gb on an empty A100 goes to an end, not the middle, so a 3g/4g still fits."""
    a100 = CATALOG.model("a100-40gb")
    (p,) = place(a100, {"1g.5gb": 1})
    assert p.start == 0
    (q, r) = place(a100, {"3g.20gb": 1, "1g.5gb": 1})
    assert {q.start, r.start} in ({0, 4}, {4, 0})


def test_unusable_memory() -> None:
    a100 = CATALOG.model("a100-40gb")
    seven = a100.profile("1g.5gb").memory_mib * 7
    assert unusable_mib(a100, {"1g.5gb": 7}) == a100.full_profile.memory_mib - seven
    assert unusable_mib(a100, {"7g.40gb": 1}) == 0


def test_equal_models_share_one_geometry_and_live_memory_gets_its_own() -> None:
    """The adapter builds a fresh model per node on every read (live memory labels): equal models must share
    the cached geometry, or the cache grows with every plan of a long-running controller."""
    h100 = CATALOG.model("h100-80gb")
    assert geometry(replace(h100)) is geometry(h100)
    assert geometry(h100.with_live_memory({"1g.10gb": 9728})) is geometry(h100.with_live_memory({"1g.10gb": 9728}))
    live = geometry(h100.with_live_memory({"1g.10gb": 9728}))
    assert live is not geometry(h100)
    assert live.model.profile("1g.10gb").memory_mib == 9728


def _layout_strategy(model: GpuModel) -> st.SearchStrategy[dict[str, int]]:
    names = [p.name for p in model.profiles]
    return st.dictionaries(st.sampled_from(names), st.integers(min_value=1, max_value=8), max_size=4)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), model_id=st.sampled_from(MODEL_IDS))
def test_validity_agrees_with_brute_force(data: st.DataObject, model_id: str) -> None:
    model = CATALOG.model(model_id)
    layout = data.draw(_layout_strategy(model))
    if not layout:
        return
    assert geometry(model).is_valid(layout) == (canonical(layout) in brute_force(model_id))


@settings(max_examples=200, deadline=None)
@given(data=st.data(), model_id=st.sampled_from(MODEL_IDS))
def test_every_enumerated_layout_places(data: st.DataObject, model_id: str) -> None:
    model = CATALOG.model(model_id)
    layout = data.draw(st.sampled_from(enumerate_layouts(model)))
    placed = place(model, layout)
    assert Counter(p.profile for p in placed) == Counter(dict(layout))
    used: set[int] = set()
    for p in placed:
        assert (p.start, p.size) in model.profile(p.profile).placements
        cells = set(range(p.start, p.start + p.size))
        assert not cells & used
        used |= cells


def test_catalog_fixture_is_the_shipped_one(catalog: Catalog) -> None:
    assert [m.id for m in catalog.models] == MODEL_IDS


@pytest.mark.parametrize("model_id", ["h100-80gb", "rtx-pro-6000-blackwell-96gb"])
def test_best_completion_is_the_least_key_among_supersets_that_pad_with_no_variant(model_id: str) -> None:
    """`best_completion` against a scan of the brute-force layouts: every valid layout that contains `must` and
    adds no media-variant instance beyond it is a candidate; the result has the least key of them (a key that
    prefers more memory, so an inverted comparison or a dropped filter picks another layout)."""
    model = CATALOG.model(model_id)
    geo = geometry(model)
    variants = {p.name for p in model.profiles if p.attributes}

    def key(lay: tuple[tuple[str, int], ...]) -> tuple[int, tuple[tuple[str, int], ...]]:
        return (-geo.instance_mib(lay) + 7 * len(lay), lay)

    musts = sorted({canonical(Counter({n: 1})) for n, _ in geo.profiles.items()} | set(brute_force(model_id)))[:60]
    for must in musts:
        need = dict(must)
        expected = min(
            (
                lay
                for lay in brute_force(model_id)
                if all(dict(lay).get(n, 0) >= c for n, c in need.items())
                and all(c <= need.get(n, 0) for n, c in lay if n in variants)
            ),
            key=key,
            default=None,
        )
        got = geo.best_completion(need, lambda f: key(f.layout))
        assert (None if got is None else got.layout) == expected, must
        plain = geo.best_completion(need, lambda f: key(f.layout), base_only=True)
        if plain is not None:
            assert not any(n in variants for n, _ in plain.layout)
