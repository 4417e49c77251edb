"""The objective's costs are one rule, and the strategies are records that change only what they say."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from migctl.core.objective import Option, cost, existing_cost, with_scarce
from migctl.core.planner.strategy import STRATEGIES, Order, Strategy, strategy

ints = st.integers(min_value=0, max_value=1 << 40)


@given(waste=ints, scarce=ints, useful=ints, mig=st.booleans(), reshape_last=st.booleans())
def test_an_existing_instance_costs_what_cost_gives_an_option_that_changes_nothing(
    waste: int, scarce: int, useful: int, mig: bool, reshape_last: bool
) -> None:
    """The greedy's shortcut for existing instances is the same objective as `cost`, for every strategy."""
    opt = Option(0, 0, 0, useful, False, mig)
    assert existing_cost(waste, scarce, useful) == cost(waste, scarce, opt, reshape_last)


@given(waste=ints, unusable=ints, other_waste=ints, useful=ints)
def test_reshape_last_ranks_every_reshape_after_every_existing_instance(
    waste: int, unusable: int, other_waste: int, useful: int
) -> None:
    reshape = cost(waste, 0, Option(unusable, 1, 1, useful, True, True), reshape_last=True)
    assert existing_cost(other_waste, 0, 0) < reshape
    # without the rule, stranded MiB decides
    plain = cost(waste, 0, Option(unusable, 1, 1, useful, True, True), reshape_last=False)
    assert (plain < existing_cost(other_waste, 0, 0)) == (waste + unusable < other_waste)


def test_with_scarce_replaces_only_the_term_before_stranded_memory() -> None:
    c = cost(5, 0, Option(7, 1, 1, 3, True, True), reshape_last=False)
    assert with_scarce(c, 9) == (c[0], 9, *c[2:])


def test_strategies_are_found_by_name_and_an_unknown_name_is_refused() -> None:
    names = [s.name for s in STRATEGIES]
    assert len(set(names)) == len(names)
    for s in STRATEGIES:
        assert strategy(s.name) is s
        assert strategy(s) is s
    with pytest.raises(ValueError, match="'most-first'"):
        strategy("most-first")


def _order(s: Strategy, pods: list[tuple[str, int, int]]) -> list[str]:
    """(name, priority, size) in the order the strategy takes them."""
    return [p[0] for p in sorted(pods, key=lambda p: s.sort_key(p[2], p[1], False, 1, "", p[0]))]


def test_each_order_of_pods_is_the_one_its_record_says() -> None:
    pods = [("hi-small", 10, 1), ("hi-big", 10, 9), ("lo-small", 0, 1), ("lo-big", 0, 9)]
    assert _order(Strategy("x"), pods) == ["hi-big", "hi-small", "lo-big", "lo-small"]
    assert _order(Strategy("x", order=Order.ASCENDING), pods) == ["hi-small", "hi-big", "lo-small", "lo-big"]
    assert _order(Strategy("x", order=Order.SMALLEST), pods) == ["hi-small", "lo-small", "hi-big", "lo-big"]
    boosted = sorted(
        [("a", 0, 9, False), ("b", 0, 1, True)], key=lambda p: Strategy("x").sort_key(p[2], p[1], p[3], 1, "", p[0])
    )
    assert [p[0] for p in boosted] == ["b", "a"]  # left out by an earlier pass: first within its priority
