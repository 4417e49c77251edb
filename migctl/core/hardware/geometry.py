"""Exact MIG layout geometry: which multisets of profiles fit on one GPU, and where.

A layout is a multiset of profiles on one GPU. It is valid when (a) each profile's count is within its maximum,
(b) the instances can be given placements from each profile's allowed list whose `[start, start+size)`
intervals are pairwise disjoint, (c) compute slices and the instance count stay within the GPU's totals, and
(d) a `+me.all` instance shares the GPU only with `-me` instances (nvml.h). Placements are bit masks over the
placement axis (8 units on A100/H100, 12 on RTX PRO 6000), so every check is a handful of integer operations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from migctl.core.hardware.catalog import GpuModel, Profile
from migctl.errors import LayoutError

Layout = Mapping[str, int]
CanonicalLayout = tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Placement:
    """One GPU instance at a concrete position on the placement axis."""

    profile: str
    start: int
    size: int


@dataclass(frozen=True, slots=True, eq=False)
class LayoutFacts:
    """One valid layout with what every best completion asks of it, computed once per model (`ModelGeometry.facts`)."""

    layout: CanonicalLayout
    have: dict[str, int]  # the layout as a dict
    size: int  # instances
    unusable: int  # MiB the layout leaves unreachable
    variants: frozenset[str]  # media-variant profiles (+me, -me, +gfx, ...) it contains


def canonical(layout: Layout | Iterable[tuple[str, int]]) -> CanonicalLayout:
    """Sorted `(profile, count)` pairs without zero counts: the one spelling of a layout."""
    items = layout.items() if isinstance(layout, Mapping) else layout
    merged: Counter[str] = Counter()
    for name, count in items:
        merged[name] += count
    return tuple(sorted((n, c) for n, c in merged.items() if c != 0))


def describe(layout: Layout | CanonicalLayout) -> str:
    """`2×3g.40gb + 1g.10gb`, or `(empty)`."""
    items = canonical(layout)
    if not items:
        return "(empty)"
    return " + ".join(f"{c}×{n}" if c > 1 else n for n, c in items)


class ModelGeometry:
    """Geometry facts of one GPU model, computed once and cached."""

    def __init__(self, model: GpuModel) -> None:
        self.model = model
        self.profiles: dict[str, Profile] = {p.name: p for p in model.profiles}
        self.masks: dict[str, tuple[int, ...]] = {
            p.name: tuple(((1 << size) - 1) << start for start, size in p.placements) for p in model.profiles
        }
        self._feasible: dict[CanonicalLayout, bool] = {}
        self._unusable: dict[tuple[tuple[str, int], ...], int] = {}

    # -- checks ------------------------------------------------------------------------------------------

    def problem(self, layout: Layout | CanonicalLayout) -> str | None:
        """Why `layout` cannot exist on this model, or None when it is valid."""
        items = canonical(layout)
        m = self.model
        compute = instances = 0
        for name, count in items:
            p = self.profiles.get(name)
            if p is None:
                return f"GPU model {m.id} has no MIG profile {name!r}"
            if count < 0:
                return f"negative count {count} for {name}"
            if count > p.max_instances:
                return f"{count}×{name} exceeds the maximum of {p.max_instances} per GPU"
            compute += p.compute_slices * count
            instances += count
        if compute > m.compute_slices:
            return f"needs {compute} compute slices; {m.id} has {m.compute_slices}"
        if instances > m.max_instances:
            return f"{instances} instances exceed the {m.id} limit of {m.max_instances}"
        me_all = [n for n, _ in items if self.profiles[n].attributes == "+me.all"]
        if me_all and any(self.profiles[n].attributes != "-me" for n, _ in items if n not in me_all):
            return f"{me_all[0]} takes every media engine: it can share the GPU only with -me profiles"
        if me_all and sum(c for n, c in items if n in me_all) > 1:
            return "at most one +me.all instance fits on a GPU"
        if not self._fits(items):
            return f"no placement of {describe(items)} fits in the {m.placement_units} memory-slice units"
        return None

    def is_valid(self, layout: Layout | CanonicalLayout) -> bool:
        return self.problem(layout) is None

    def _fits(self, items: CanonicalLayout) -> bool:
        cached = self._feasible.get(items)
        if cached is None:
            cached = self._search(items, best=False) is not None
            self._feasible[items] = cached
        return cached

    # -- placement ---------------------------------------------------------------------------------------

    def _instances(self, items: CanonicalLayout) -> list[str]:
        # Largest first: the most constrained instances are placed first, which prunes fastest.
        names = [n for n, c in items for _ in range(c)]
        return sorted(names, key=lambda n: (-self.profiles[n].memory_slices, len(self.masks[n]), n))

    def _search(self, items: CanonicalLayout, best: bool, used: int = 0) -> tuple[int, ...] | None:
        """Placement indices per instance (in `_instances` order) on the units `used` leaves free; with best=True,
        the best-scoring one."""
        inst = self._instances(items)
        chosen: list[int] = []
        found: list[tuple[tuple[int, ...], tuple[int, ...]]] = []

        def go(i: int, used: int, min_idx: int) -> bool:
            if i == len(inst):
                if best:
                    found.append((self._score(used, inst, chosen), tuple(chosen)))
                    return False
                found.append(((), tuple(chosen)))
                return True
            name = inst[i]
            masks = self.masks[name]
            for k in range(min_idx, len(masks)):
                if masks[k] & used:
                    continue
                chosen.append(k)
                nxt = i + 1
                # identical instances take increasing placement indices (symmetry breaking)
                same = nxt < len(inst) and inst[nxt] == name
                if go(nxt, used | masks[k], k + 1 if same else 0):
                    return True
                chosen.pop()
            return False

        go(0, used, 0)
        if not found:
            return None
        return max(found)[1] if best else found[0][1]

    def _score(self, used: int, inst: list[str], chosen: list[int]) -> tuple[int, ...]:
        """Prefer placements that leave the longest free run, then fewer free fragments, then low starts."""
        units = self.model.placement_units
        runs, run = [], 0
        for b in range(units):
            if used >> b & 1:
                if run:
                    runs.append(run)
                run = 0
            else:
                run += 1
        if run:
            runs.append(run)
        starts = [self.model.profile(n).placements[k][0] for n, k in zip(inst, chosen, strict=True)]
        return (max(runs, default=0), -len(runs), *(-s for s in starts))

    def place(self, layout: Layout | CanonicalLayout) -> tuple[Placement, ...]:
        """Concrete placements for a valid layout, keeping large runs free; raises LayoutError if invalid."""
        items = canonical(layout)
        reason = self.problem(items)
        if reason:
            raise LayoutError(f"{self.model.id}: {describe(items)} is not a valid layout: {reason}")
        inst = self._instances(items)
        chosen = self._search(items, best=True)
        assert chosen is not None  # problem() already proved a placement exists
        out = [Placement(n, *self.profiles[n].placements[k]) for n, k in zip(inst, chosen, strict=True)]
        return tuple(sorted(out, key=lambda p: (p.start, p.profile)))

    def place_around(self, add: Layout | CanonicalLayout, fixed: Iterable[Placement]) -> tuple[Placement, ...] | None:
        """Placements for the instances `add` beside instances that must not move, or None when none exists.

        The one placement rule of the in-place path: the agent creates at these placements, and the planner and
        the simulator ask it whether a layout can be reached without touching an instance in use. `fixed` are
        instances that stay where they are (in use, or kept); the whole layout (`fixed` plus `add`) must be valid.
        Of the placements that fit, the one that keeps the longest free run is chosen (as `place` does).
        """
        items = canonical(add)
        kept = tuple(fixed)
        whole = canonical([*items, *((p.profile, 1) for p in kept)])
        if self.problem(whole) is not None:
            return None  # counts, slices, media engines, or no placement at all
        used = 0
        for p in kept:
            mask = ((1 << p.size) - 1) << p.start
            if used & mask:
                return None  # the fixed instances overlap: not a state NVML can be in
            used |= mask
        if not items:
            return ()
        inst = self._instances(items)
        chosen = self._search(items, best=True, used=used)
        if chosen is None:
            return None
        out = [Placement(n, *self.profiles[n].placements[k]) for n, k in zip(inst, chosen, strict=True)]
        return tuple(sorted(out, key=lambda p: (p.start, p.profile)))

    # -- enumeration -------------------------------------------------------------------------------------

    @cached_property
    def layouts(self) -> tuple[CanonicalLayout, ...]:
        """Every valid non-empty layout, in canonical form, sorted."""
        names = sorted(self.profiles)
        out: list[CanonicalLayout] = []

        def go(i: int, acc: list[tuple[str, int]]) -> None:
            if i == len(names):
                if acc:
                    out.append(canonical(acc))
                return
            go(i + 1, acc)
            name = names[i]
            for count in range(1, self.profiles[name].max_instances + 1):
                trial = [*acc, (name, count)]
                if self.problem(canonical(trial)) is not None:
                    break  # every rule is monotone: more instances never become valid again
                go(i + 1, trial)

        go(0, [])
        return tuple(sorted(out))

    @cached_property
    def base_layouts(self) -> tuple[CanonicalLayout, ...]:
        """Valid layouts that use only plain profiles (no media variants): what VRAM demand is served from."""
        return tuple(lay for lay in self.layouts if all(not self.profiles[n].attributes for n, _ in lay))

    @cached_property
    def facts(self) -> tuple[LayoutFacts, ...]:
        """`layouts` with their facts, in the same order."""
        p = self.profiles
        return tuple(
            LayoutFacts(
                lay,
                dict(lay),
                sum(c for _, c in lay),
                self.unusable_mib(lay),
                frozenset(n for n, _ in lay if p[n].attributes),
            )
            for lay in self.layouts
        )

    # -- best completion ---------------------------------------------------------------------------------

    def completions(self, must: Mapping[str, int], base_only: bool = False) -> Iterator[LayoutFacts]:
        """Valid layouts that contain every instance of `must` and pad it with no media variant it does not ask
        for (a variant nobody asked for only takes slices), in `layouts` order; `base_only`: plain profiles only."""
        for f in self.facts:
            have = f.have
            if any(have.get(n, 0) < c for n, c in must.items()):
                continue  # not a superset
            if f.variants and (base_only or any(have[n] > must.get(n, 0) for n in f.variants)):
                continue
            yield f

    def best_completion(
        self, must: Mapping[str, int], key: Callable[[LayoutFacts], Any], base_only: bool = False
    ) -> LayoutFacts | None:
        """The one best completion: of `completions(must)`, the layout with the least `key` (the first of equal
        keys), None when `must` fits no layout. The key is the caller's objective: the planner's is what the spare
        instances serve of the forecast (`migctl/core/forecast/spare.py`), the simulator's baselines' the least unusable
        memory; a key that ends with the layout makes the choice independent of the order."""
        best: tuple[Any, LayoutFacts] | None = None
        for f in self.completions(must, base_only):
            k = key(f)
            if best is None or k < best[0]:
                best = (k, f)
        return None if best is None else best[1]

    # -- memory ------------------------------------------------------------------------------------------

    def instance_mib(self, layout: Layout | CanonicalLayout) -> int:
        return sum(self.profiles[n].memory_mib * c for n, c in canonical(layout))

    def unusable_mib(self, layout: Layout | CanonicalLayout) -> int:
        """Memory the layout leaves unreachable: the full-GPU instance's memory minus its instances' memory
        (memoised for tuples: a plan asks it for every GPU, and layouts repeat)."""
        if isinstance(layout, tuple):
            hit = self._unusable.get(layout)
            if hit is None:
                hit = self._unusable[layout] = max(0, self.model.full_profile.memory_mib - self.instance_mib(layout))
            return hit
        return max(0, self.model.full_profile.memory_mib - self.instance_mib(layout))

    def addable(self, layout: Layout | CanonicalLayout) -> tuple[str, ...]:
        """Plain profiles that could still be added to the layout."""
        items = canonical(layout)
        return tuple(p.name for p in self.model.base_profiles if self.is_valid(canonical([*items, (p.name, 1)])))


_GEOMETRY: dict[tuple[object, ...], ModelGeometry] = {}


def geometry(model: GpuModel) -> ModelGeometry:
    """The cached geometry of a model, keyed by what geometry depends on. Not by identity: the adapter builds a
    fresh model per node from its live memory labels on every read, so an identity key grew by one entry per
    model per plan in a long-running controller, and every plan enumerated the layouts again."""
    key = (model.id, model.memory_mib, model.compute_slices, model.placement_units, model.max_instances, model.profiles)
    geo = _GEOMETRY.get(key)
    if geo is None:
        geo = _GEOMETRY[key] = ModelGeometry(model)
    return geo


def validate(model: GpuModel, layout: Layout | CanonicalLayout) -> None:
    """Raise LayoutError naming the broken rule when `layout` cannot exist on `model`."""
    reason = geometry(model).problem(layout)
    if reason:
        raise LayoutError(f"{model.id}: {describe(layout)} is not a valid layout: {reason}")


def place(model: GpuModel, layout: Layout | CanonicalLayout) -> tuple[Placement, ...]:
    return geometry(model).place(layout)


def enumerate_layouts(model: GpuModel, include_variants: bool = True) -> tuple[CanonicalLayout, ...]:
    geo = geometry(model)
    return geo.layouts if include_variants else geo.base_layouts


def unusable_mib(model: GpuModel, layout: Layout | CanonicalLayout) -> int:
    return geometry(model).unusable_mib(layout)
