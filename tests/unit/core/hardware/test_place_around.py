"""`ModelGeometry.place_around`: placements for new instances beside instances that must not move."""

from __future__ import annotations

import itertools

import pytest

from migctl.core.hardware.catalog import Catalog
from migctl.core.hardware.geometry import Placement, geometry


def _overlaps(a: Placement, b: Placement) -> bool:
    return a.start < b.start + b.size and b.start < a.start + a.size


def test_a_fixed_instance_decides_where_the_rest_go(catalog: Catalog) -> None:
    g = geometry(catalog.model("a100-40gb"))
    assert g.place_around({"3g.20gb": 1}, [Placement("1g.5gb", 0, 1)]) == (Placement("3g.20gb", 4, 4),)
    # 4g.20gb has one placement, [0, 4): a busy 1g.5gb at 0 blocks it, one at 6 does not
    assert g.place_around({"4g.20gb": 1}, [Placement("1g.5gb", 0, 1)]) is None
    assert g.place_around({"4g.20gb": 1}, [Placement("1g.5gb", 6, 1)]) == (Placement("4g.20gb", 0, 4),)


def test_counts_valid_yet_unreachable_around_fixed_instances(catalog: Catalog) -> None:
    """2×3g.20gb is a valid layout, but not beside a busy 1g.5gb: the whole layout must be valid with the fixed one."""
    g = geometry(catalog.model("a100-40gb"))
    assert g.is_valid({"3g.20gb": 2})
    assert g.place_around({"3g.20gb": 2}, []) is not None
    assert g.place_around({"3g.20gb": 1}, [Placement("3g.20gb", 0, 4)]) == (Placement("3g.20gb", 4, 4),)
    assert g.place_around({"3g.20gb": 2}, [Placement("1g.5gb", 6, 1)]) is None


def test_nothing_to_add_and_overlapping_fixed_instances(catalog: Catalog) -> None:
    g = geometry(catalog.model("a100-40gb"))
    assert g.place_around({}, [Placement("1g.5gb", 6, 1)]) == ()
    assert g.place_around({}, [Placement("2g.10gb", 0, 2), Placement("1g.5gb", 1, 1)]) is None
    assert g.place_around({"7g.40gb": 1}, []) == (Placement("7g.40gb", 0, 8),)
    assert g.place_around({"nope": 1}, []) is None


@pytest.mark.parametrize("model", ["a100-40gb", "h100-80gb", "a30-24gb"])
def test_every_answer_is_disjoint_allowed_and_complete(catalog: Catalog, model: str) -> None:
    """Exhaustively over one fixed instance at each allowed placement and every layout of up to three instances:
    an answer is disjoint from the fixed ones and from itself, uses allowed placements only, and gives each added
    instance one placement; None only when no assignment exists (checked by brute force)."""
    m = catalog.model(model)
    g = geometry(m)
    allowed = {p.name: set(p.placements) for p in m.profiles}
    small = [lay for lay in g.layouts if sum(c for _, c in lay) <= 3]
    for fixed_profile in [p.name for p in m.profiles][:3]:
        for start, size in m.profile(fixed_profile).placements:
            fixed = Placement(fixed_profile, start, size)
            for lay in small[:60]:
                got = g.place_around(dict(lay), [fixed])
                names = [n for n, c in lay for _ in range(c)]
                brute = any(
                    g.is_valid([*lay, (fixed_profile, 1)])
                    and all(not _overlaps(a, b) for a, b in itertools.combinations([fixed, *combo], 2))
                    for combo in itertools.product(
                        *[[Placement(n, s, z) for s, z in m.profile(n).placements] for n in names]
                    )
                )
                assert (got is not None) == brute, (model, fixed, lay)
                if got is not None:
                    assert sorted(p.profile for p in got) == sorted(names)
                    assert all((p.start, p.size) in allowed[p.profile] for p in got)
                    assert all(not _overlaps(a, b) for a, b in itertools.combinations([fixed, *got], 2))
