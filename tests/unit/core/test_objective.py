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


@given(waste=ints, scarce=ints, other=ints, unusable=ints, useful=ints, reconfigure=st.booleans(), last=st.booleans())
def test_with_scarce_is_the_cost_the_option_has_under_another_scarce_term(
    waste: int, scarce: int, other: int, unusable: int, useful: int, reconfigure: bool, last: bool
) -> None:
    """`with_scarce` is judged by `cost`, not by its own body: a cost given another scarce term is the cost of
    the same option computed with that term, and that term outranks stranded memory but not reshape-last."""
    opt = Option(unusable, 1, 1, useful, reconfigure, True)
    assert with_scarce(cost(waste, scarce, opt, last), other) == cost(waste, other, opt, last)
    cheap = with_scarce(cost(waste + 1, 0, opt, last), 0)
    assert cheap < with_scarce(cost(0, 0, opt, last), 1)  # a smaller scarce term wins over less waste
    if reconfigure and last:  # reshape-last still ranks a reshape after an existing instance of any scarcity
        assert existing_cost(waste, other + 1, 0) < with_scarce(cost(waste, scarce, opt, last), 0)


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
