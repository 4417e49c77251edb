"""The in-place change of one GPU, as pure data: from the instances found and the target counts to ordered steps.

The node agent (`migctl agent apply`, and its loop for the controller) runs these steps through NVML. The rules:
an instance in use is never destroyed or moved; free instances the target still holds are kept where they sit
when the target fits around them, and moved only when it does not (the fewest moved); free instances the target
drops are destroyed first, then the missing ones are created at the placements `ModelGeometry.place_around`
chooses beside every instance that stays. When the target cannot be reached without touching an instance in use,
the GPU is blocked as a whole (no step at all) and the reason names the instances that block it.

An instance is identified by where it sits (profile id, start, size) on its parent GPU and by its MIG UUID, never
by its GPU-instance id alone: the driver gives the same id to the next instance created on the same span.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations, product
from typing import Literal

from migctl.core.hardware.geometry import ModelGeometry, Placement, canonical, describe


@dataclass(frozen=True, slots=True)
class Found:
    """One GPU instance as the agent found it on a GPU, and what holds it."""

    profile: str
    profile_id: int
    start: int
    size: int
    gi: int
    ci: int | None  # its compute instance; None: a GPU instance without one (a half-made change), never usable
    uuid: str  # the MIG device UUID; "" without a compute instance
    holder: str = ""  # why it is in use, for people ("pod ns/name", "2 processes", "unknown: ..."); "" = free

    @property
    def in_use(self) -> bool:
        return bool(self.holder)

    @property
    def placement(self) -> Placement:
        return Placement(self.profile, self.start, self.size)

    def __str__(self) -> str:
        ids = f"GI {self.gi}" + (f", CI {self.ci}" if self.ci is not None else ", no compute instance")
        return f"{self.profile} at {self.start}+{self.size} ({ids}{', ' + self.uuid if self.uuid else ''})"


@dataclass(frozen=True, slots=True)
class Op:
    """One step: destroy a found instance (compute instance, then GPU instance), or create one at a placement."""

    kind: Literal["destroy", "create"]
    profile: str
    start: int
    size: int
    found: Found | None = None  # the instance a destroy removes

    def __str__(self) -> str:
        if self.kind == "destroy" and self.found is not None:
            return f"destroy {self.found}"
        return f"create {self.profile} at {self.start}+{self.size}"


@dataclass(frozen=True, slots=True)
class GpuPlan:
    """The steps for one GPU, or why it is blocked (then no step)."""

    index: int
    ops: tuple[Op, ...] = ()
    blocked: str = ""


def held(target: Mapping[str, int], found: Iterable[Found]) -> bool:
    """Whether the GPU already holds exactly the target's counts, every instance usable."""
    items = list(found)
    return all(f.ci is not None for f in items) and canonical(Counter(f.profile for f in items)) == canonical(target)


def plan_gpu(geo: ModelGeometry, index: int, found: Sequence[Found], target: Mapping[str, int]) -> GpuPlan:
    """The fewest steps that take the GPU from `found` to the `target` counts without touching an instance in
    use; the target must already be a valid layout of the model (`target_problem`)."""
    busy = [f for f in found if f.in_use]
    free = [f for f in found if not f.in_use]
    busy_counts = Counter(f.profile for f in busy)
    dropped = sorted(p for p, n in busy_counts.items() if target.get(p, 0) < n)
    if dropped:
        blockers = [f for f in busy if f.profile in dropped]
        return GpuPlan(index, blocked=f"GPU {index}: the target drops {_list(blockers)}")
    need = Counter({p: n - busy_counts[p] for p, n in target.items() if n - busy_counts[p] > 0})
    fixed = [f.placement for f in busy]
    for kept in _keep_choices(free, need):
        add = need - Counter(f.profile for f in kept)
        placements = geo.place_around(add, [*fixed, *(f.placement for f in kept)])
        if placements is None:
            continue
        ids = {id(f) for f in kept}
        destroys = [Op("destroy", f.profile, f.start, f.size, f) for f in free if id(f) not in ids]
        creates = [Op("create", p.profile, p.start, p.size) for p in placements]
        return GpuPlan(index, tuple(destroys + creates))
    blockers = [b for b in busy if _fits_without(geo, target, busy, b)] or busy
    reason = f"{describe(target)} does not fit around the instances in use; it would have to move {_list(blockers)}"
    return GpuPlan(index, blocked=f"GPU {index}: {reason}")


def _keep_choices(free: Sequence[Found], need: Mapping[str, int]) -> list[tuple[Found, ...]]:
    """Sets of free instances to keep, most kept first: per profile, up to the count the target still needs."""
    per_profile: list[list[tuple[Found, ...]]] = []
    for profile, wanted in sorted(need.items()):
        usable = [f for f in free if f.profile == profile and f.ci is not None]
        most = min(wanted, len(usable))
        per_profile.append([c for k in range(most, -1, -1) for c in combinations(usable, k)])
    choices = [tuple(f for group in pick for f in group) for pick in product(*per_profile)]
    return sorted(choices, key=lambda c: -len(c))  # stable: within a size, the earlier (lower-start) sets first


def _fits_without(geo: ModelGeometry, target: Mapping[str, int], busy: Sequence[Found], moved: Found) -> bool:
    """Whether the target would fit if `moved` alone could be moved: then it is one of the blockers."""
    rest = [f for f in busy if f is not moved]
    add = Counter(target) - Counter(f.profile for f in rest)
    return geo.place_around(add, [f.placement for f in rest]) is not None


def _list(items: Iterable[Found]) -> str:
    return "; ".join(f"{f} held by {f.holder}" for f in items)


def target_problem(geo: ModelGeometry, target: Mapping[str, int]) -> str | None:
    """Why the target counts cannot exist on this GPU model at all (bad input, not a busy GPU), or None."""
    for profile, count in target.items():
        if profile not in geo.profiles:
            known = ", ".join(sorted(geo.profiles))
            return f"GPU model {geo.model.id} has no MIG profile {profile!r} (it has {known})"
        if count < 0:
            return f"{profile}: negative count {count}"
    return geo.problem(target)


def restore_ops(
    found: Sequence[Found], wanted: Sequence[Placement], removable: Callable[[Found], bool]
) -> tuple[Op, ...]:
    """Steps back to the instances `wanted` (a rollback, a journal's undo, a rebuild after a reboot): destroy the
    free instances `removable` allows that are not wanted, create the wanted ones that are missing."""
    spots = {(p.profile, p.start, p.size) for p in wanted}
    present = {(f.profile, f.start, f.size) for f in found if f.ci is not None}
    destroys = [
        Op("destroy", f.profile, f.start, f.size, f)
        for f in found
        if not f.in_use and removable(f) and ((f.profile, f.start, f.size) not in spots or f.ci is None)
    ]
    creates = [Op("create", p.profile, p.start, p.size) for p in wanted if (p.profile, p.start, p.size) not in present]
    return tuple(destroys + creates)
