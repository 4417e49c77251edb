"""Fences on a DynamicMIG node: which devices to taint (DeviceTaintRule, NoSchedule) so that first fit picks what
the plan wants, and which fences to lift.

The plan reserves placements per GPU (`Reservation`: a profile at a start and size, or the whole GPU), e.g. a GPU
kept whole for a 7g claim or a 4g region. First fit knows nothing of them: on an idle H100 a 1g claim takes
`gpu-0-mig-1g10gb-19-0`, slice 0 of GPU 0, and a 4g or 7g can no longer be made there. The rule, deterministic:
predict first fit for the pending queue; take the first claim (queue order) whose predicted device overlaps the
memory slices of a reservation it is not exactly (a bad choice: it strands memory the plan keeps for other demand);
fence that device and predict again; stop when no choice is bad or the node's cap is reached (`capped`). A device
that is a reservation exactly (same profile, start and size, or the whole GPU for a whole-GPU reservation) is never
bad: whichever claim takes it, the reserved instance is made.

Existing fences are kept while their demand remains, i.e. while the device overlaps a reservation that is not yet
served (its exact device is not allocated); the others are lifted (served, or the plan no longer reserves there).

Fences are advisory, as KEP-5055 says: a claim tolerating the taint bypasses them, and a claim may land between a
fence's creation and the scheduler seeing it. The predictor honours tolerations, so the plan shows such claims.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec
from migctl.core.dra.devices import Device, DeviceId, Mode, NodePool
from migctl.core.dra.firstfit import Choice, Prediction, predict
from migctl.core.model.cluster import Taint
from migctl.wire.names import PLACEMENT_TAINT

FENCE = Taint(PLACEMENT_TAINT, "reserved", "NoSchedule")
DEFAULT_CAP = 32


@dataclass(frozen=True, slots=True)
class Reservation:
    """A placement the plan wants served on GPU `minor`: `profile` at [start, start+size); profile "" is the whole
    GPU device (start 0, size the GPU's placement units)."""

    minor: int
    profile: str
    start: int
    size: int

    @property
    def slices(self) -> frozenset[int]:
        return frozenset(range(self.start, self.start + self.size))

    def is_device(self, dev: Device) -> bool:
        """Whether `dev` is exactly this reservation."""
        if dev.minor != self.minor:
            return False
        if not self.profile:
            return dev.kind == "gpu"
        p = dev.placement
        return (
            dev.kind == "mig"
            and p is not None
            and (dev.profile, p.start, p.size) == (self.profile, self.start, self.size)
        )


@dataclass(frozen=True)
class FencePlan:
    """Devices to fence now (`add`), existing fences to keep and to lift, first fit with keep + add in place, and
    the bad choices left (claim, device): when the cap stopped it (`capped`), or when a claim tolerates the fence."""

    add: tuple[str, ...]
    keep: tuple[str, ...]
    lift: tuple[str, ...]
    prediction: Prediction
    capped: bool = False
    bad: tuple[tuple[str, str], ...] = ()

    @property
    def fenced(self) -> tuple[str, ...]:
        return (*self.keep, *self.add)


def conflict(dev: Device, reservations: Iterable[Reservation]) -> Reservation | None:
    """The first reservation `dev` overlaps without being it, or None."""
    held = dev.slices
    for r in reservations:
        if r.minor != dev.minor or r.is_device(dev):
            continue
        if held & r.slices:
            return r
    return None


def plan_fences(
    pool: NodePool,
    queue: Sequence[ClaimSpec | Sequence[ClaimSpec]],
    classes: Mapping[str, DeviceClassSpec],
    reservations: Sequence[Reservation],
    *,
    allocated: Iterable[DeviceId] = (),
    fences: Iterable[str] = (),
    cap: int = DEFAULT_CAP,
    taint: Taint = FENCE,
) -> FencePlan:
    """The fences that make first fit on `pool` (a DynamicMIG node) serve `reservations` (rule: module docstring).
    `fences` are the device names migctl fences now; `cap` bounds the fences the node may hold."""
    if pool.mode is not Mode.DYNAMIC:
        raise ValueError(f"node {pool.node}: fences steer DynamicMIG pools only; this pool is {pool.mode}")
    taken = set(allocated)
    open_ = [r for r in reservations if not any(r.is_device(d) and d.id in taken for d in pool.devices)]
    keep: list[str] = []
    lift: list[str] = []
    for name in sorted(set(fences)):
        dev = pool.by_name.get(name)
        (keep if dev is not None and conflict(dev, open_) is not None else lift).append(name)
    fenced = list(keep)
    add: list[str] = []
    while True:
        prediction = _predict(pool, queue, classes, taken, fenced, taint)
        bad = _bad(prediction, open_)
        fresh = [b for b in bad if b[1] not in fenced]  # a fenced device still chosen: its claim tolerates fences
        if not fresh:
            return FencePlan(tuple(add), tuple(keep), tuple(lift), prediction, bad=tuple(bad))
        if len(fenced) >= cap:
            return FencePlan(tuple(add), tuple(keep), tuple(lift), prediction, capped=True, bad=tuple(bad))
        fenced.append(fresh[0][1])
        add.append(fresh[0][1])


def _predict(
    pool: NodePool,
    queue: Sequence[ClaimSpec | Sequence[ClaimSpec]],
    classes: Mapping[str, DeviceClassSpec],
    taken: set[DeviceId],
    fenced: Sequence[str],
    taint: Taint,
) -> Prediction:
    marks = {pool.by_name[n].id: (taint,) for n in fenced}
    return predict([pool], queue, classes, allocated=taken, fences=marks)


def _bad(prediction: Prediction, reservations: Sequence[Reservation]) -> list[tuple[str, str]]:
    out = []
    for o in prediction.outcomes:
        if isinstance(o, Choice):
            out += [(o.claim, d.name) for _, d in o.devices if conflict(d, reservations) is not None]
    return out
