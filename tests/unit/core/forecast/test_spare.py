"""The memos of the objective over time (`migctl/core/forecast/spare.py`) never change a value: what `served`, `takes`,
`best` and `regroup` answer from a memo, capped key or shared family equals `pour` of the instances themselves,
with the caller's own want (they are keyed more coarsely than their inputs only where `pour` cannot tell)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from migctl.core.forecast.estimate import forecast
from migctl.core.forecast.spare import Completions, pour
from migctl.core.hardware.geometry import canonical, geometry
from migctl.core.model.cluster import Pod, Snapshot
from tests.unit.builders import CATALOG, mig, node, vram

H100 = "h100-80gb"
GEO = geometry(CATALOG.model(H100))
PLAIN = sorted(n for n, p in GEO.profiles.items() if not p.attributes)

history = st.lists(
    st.one_of(
        st.integers(1, 80).map(lambda gib: ("v", gib)),
        st.sampled_from(["1g.10gb", "2g.20gb", "3g.40gb", "1g.20gb"]).map(lambda p: ("p", p)),
    ),
    min_size=1,
    max_size=12,
)


def _completions(reqs: list[tuple[str, object]]) -> Completions:
    pods: list[Pod] = [
        vram(f"p{i}", int(str(what))) if kind == "v" else mig(f"p{i}", str(what)) for i, (kind, what) in enumerate(reqs)
    ]
    mf = forecast(Snapshot((node("n", H100, [{"7g.80gb": 1}]),), tuple(pods))).of(H100)
    return Completions(GEO, mf)


def _served(comp: Completions, free: dict[str, int]) -> int:
    return round(pour(comp.want, canonical((n, c) for n, c in free.items() if c > 0), comp.pod_mib)[0])


@settings(max_examples=60, deadline=None)
@given(
    history,
    st.dictionaries(st.sampled_from(PLAIN), st.integers(0, 40), min_size=1),
    st.dictionaries(st.sampled_from(PLAIN), st.integers(1, 20)),
)
def test_a_pools_value_and_takes_are_those_of_all_its_instances(
    reqs: list[tuple[str, object]], free: dict[str, int], more: dict[str, int]
) -> None:
    """Also for a second pool of the same profiles with more of some, asked of the same memos: where both are
    above what a GPU holds they share a capped key, and each still gets its own value."""
    comp = _completions(reqs)
    sq = {n: (p.memory_mib // 1024) ** 2 for n, p in GEO.profiles.items()}
    for pool in (free, {n: c + more.get(n, 0) if c else 0 for n, c in free.items()}):
        assert comp.served(pool) == _served(comp, pool)
        for name, useful in comp.takes(pool):
            rest = dict(pool)
            rest[name] -= 1
            squares = sum(sq[n] * c for n, c in rest.items() if c > 0)
            assert useful == (_served(comp, rest) << 24) + squares
            assert useful == comp.usefulness_without(pool, name)


@settings(max_examples=40, deadline=None)
@given(history, st.lists(st.floats(0, 30, allow_nan=False), min_size=12, max_size=12), st.integers(0, 11))
def test_wants_alike_once_capped_share_memos_and_nothing_else(
    reqs: list[tuple[str, object]], pods: list[float], extra: int
) -> None:
    base = _completions(reqs)
    cap = GEO.model.max_instances
    first: dict[object, float] = {c.key: round(n * 8) / 8 for (c, _), n in zip(base.want, pods, strict=False)}
    # the same once capped at a GPU's instances: more pods only where the first already has `cap` or more
    second: dict[object, float] = {k: n + extra if n >= cap else n for k, n in first.items()}
    # and one that differs below the cap: its own family
    third: dict[object, float] = {k: min(n, cap / 2) for k, n in first.items()}
    a, b = base.with_want(first), base.with_want(second)
    c = base.with_want(third)
    for layout in GEO.layouts:  # `a` fills the shared memos, `b` answers from them
        assert a.served_of(layout) == _served(a, dict(layout))
        assert b.served_of(layout) == _served(b, dict(layout))
        assert c.served_of(layout) == _served(c, dict(layout))
    assert b.best(()) == Completions(GEO, base.demand, want=second).best(())  # fresh memos, uncapped
    pool = {n: 3 * cap for n in PLAIN}  # more instances than a GPU holds: never answered from the family
    assert b.served(pool) == _served(b, pool)
    assert a.served(pool) == _served(a, pool)


needs = st.lists(st.lists(st.integers(1, 80), min_size=1, max_size=7), min_size=2, max_size=5)


def _reqs(gib: list[int], shift: int) -> tuple[tuple[tuple[str, ...], int], ...]:
    """VRAM requests as `regroup` takes them, largest first: the plain profiles that hold each, smallest first,
    and a real need `shift` MiB below the request."""
    out = []
    for g in sorted(gib, reverse=True):
        fits = sorted((GEO.profiles[n].memory_mib, n) for n in PLAIN if GEO.profiles[n].memory_mib >= g * 1024)
        if fits:
            out.append((tuple(n for _, n in fits), max(1, g * 1024 - shift)))
    return tuple(out)


@settings(max_examples=60, deadline=None)
@given(history, needs, st.integers(0, 9000), st.lists(st.floats(0, 12, allow_nan=False), min_size=12, max_size=12))
def test_regroups_answered_from_shared_memos_are_fresh_ones(
    reqs: list[tuple[str, object]], gpus: list[list[int]], shift: int, pods: list[float]
) -> None:
    """Which layouts serve which requests is memoised across wants and needs (`_serving`): GPU after GPU, each
    regrouped by a copy with its own want and needs, as `for_the_forecast` does, gets what fresh memos give. With
    no demand left the least stranded decides alone."""
    base = _completions(reqs)
    want: dict[object, float] = {c.key: round(n * 8) / 8 for (c, _), n in zip(base.want, pods, strict=False)}
    for i, gib in enumerate(gpus):
        w = want if i % 2 else {k: 0.0 for k in want}
        got = base.with_want(w).regroup(_reqs(gib, shift * i))
        assert got == Completions(GEO, base.demand, want=w).regroup(_reqs(gib, shift * i))
