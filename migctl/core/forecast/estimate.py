"""Demand forecast: the mix of GPU requests the cluster expects next, per GPU model, read from the snapshot alone.

The planner chooses the spare instances of every GPU it reshapes for this mix (`forecast/spare.py`), and
pre-shapes idle GPUs toward it (`forecast/over_time.py`). The controller, `migctl plan` and the simulator all
call `forecast(snapshot, settings)` on the snapshot they plan, so they see the same forecast.

Estimator (docs/planning.md, "Objective over time"): every GPU pod of the snapshot, running or pending, is one
sample of the demand. Samples are weighted by recency of creation: a pod counts `0.5 ** (r / h)`, where `r` is
the number of GPU pods created after it and `h` is `planner.forecast_half_life_pods` (default 32, so about the
last hundred pods matter). Counting in pods rather than seconds keeps the window the same at any arrival rate,
and the creation times live on the pods themselves, so the forecast has no state of its own and survives a
failover. Each request unit becomes a *class* per model: an exact profile, or a VRAM request rounded up to the
smallest instance that holds it; a class carries its weighted share and the weighted mean of what its pods
really need. An optional named prior (`planner.forecast_prior`) adds its classes as `pods` pods of evidence.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migctl.core.hardware.catalog import GpuModel, Profile
from migctl.core.model.cluster import GpuDemand, Pod, Snapshot
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.settings import ForecastPrior, PlannerSettings
from migctl.core.text.quantity import to_bytes
from migctl.wire import names

# Pods older than this many half-lives weigh less than 2**-16 of the newest and are not read.
_HALF_LIVES_READ = 16
# ("p", profile) for an exact profile, ("v", MiB of the smallest instance that holds it) for a VRAM request.
ClassKey = tuple[str, str | int]


@dataclass(frozen=True)
class DemandClass:
    """One class of requests on one model: which smallest profile it takes, its share, what it really needs."""

    key: ClassKey
    profile: str  # the smallest profile that serves it
    accepts: tuple[str, ...]  # every profile that serves it, smallest first
    share: float  # of the model's mix (the shares of a model add up to 1)
    need_mib: int  # weighted mean real need of one unit


@dataclass(frozen=True)
class ModelForecast:
    model: str
    classes: tuple[DemandClass, ...]  # exact profiles first, then VRAM classes, largest first
    evidence: float  # sum of the weights read (pods, prior included)


@dataclass(frozen=True)
class Forecast:
    models: Mapping[str, ModelForecast]
    pods_read: int
    prior: str | None = None

    def of(self, model_id: str) -> ModelForecast | None:
        return self.models.get(model_id)

    def describe(self) -> list[str]:
        """Lines for `migctl plan --explain`."""
        head = f"demand forecast from {self.pods_read} GPU pods"
        if self.prior:
            head += f" and prior {self.prior!r}"
        lines = [head + " (smallest profile: share of requests, mean need):"]
        for mid in sorted(self.models):
            mf = self.models[mid]
            mix = ", ".join(f"{c.profile} {c.share:.0%} ({c.need_mib} MiB)" for c in mf.classes)
            lines.append(f"  {mid}: {mix or 'no demand seen'}")
        return lines


EMPTY = Forecast({}, 0)


def forecast(snapshot: Snapshot, settings: PlannerSettings | None = None) -> Forecast:
    """The expected mix of requests per GPU model in `snapshot` (deterministic: same snapshot, same forecast)."""
    settings = settings or PlannerSettings()
    if not settings.forecast:
        return EMPTY
    models: dict[str, GpuModel] = {}
    for node in snapshot.nodes:
        if node.model is not None:
            models.setdefault(node.model.id, node.model)
    if not models:
        return EMPTY
    samples = _weighted(_gpu_pods(snapshot.pods), settings.forecast_half_life_pods)
    read = len(samples)
    prior = settings.forecast_prior
    if prior is not None:
        samples += _prior_samples(prior)
    out = {mid: _mix(model, samples) for mid, model in sorted(models.items())}
    return Forecast(out, read, prior.name if prior else None)


def _gpu_pods(pods: Iterable[Pod]) -> list[Pod]:
    """Pods that show GPU demand: pending or running ones with a GPU request (finished pods show none)."""
    fallback = names.FALLBACK_SCHEDULER  # its pods hold VRAM units, not MIG instances
    return [p for p in pods if p.gpu and p.phase not in ("Succeeded", "Failed") and p.scheduler_name != fallback]


def _weighted(pods: list[Pod], half_life: float) -> list[tuple[float, tuple[GpuDemand, ...], int | None]]:
    """(weight, requests, annotated need) per pod, newest first; pods created at the same time weigh the same."""
    pods = sorted(pods, key=lambda p: (p.created, p.key), reverse=True)
    out: list[tuple[float, tuple[GpuDemand, ...], int | None]] = []
    newer = 0
    horizon = half_life * _HALF_LIVES_READ
    i = 0
    while i < len(pods) and newer < horizon:
        j = i
        while j < len(pods) and pods[j].created == pods[i].created:
            j += 1
        weight = 0.5 ** (newer / half_life)
        out.extend((weight, p.gpu, p.need_mib) for p in pods[i:j])
        newer += j - i
        i = j
    return out


def _prior_samples(prior: ForecastPrior) -> list[tuple[float, tuple[GpuDemand, ...], int | None]]:
    total = sum(c.weight for c in prior.classes)
    out: list[tuple[float, tuple[GpuDemand, ...], int | None]] = []
    for c in prior.classes:
        if c.profile:
            demand = GpuDemand("profile", profile=c.profile)
        else:
            demand = GpuDemand("vram", vram_mib=-(-to_bytes(c.vram) // 2**20))
        out.append((prior.pods * c.weight / total, (demand,), None))
    return out


def _mix(model: GpuModel, samples: list[tuple[float, tuple[GpuDemand, ...], int | None]]) -> ModelForecast:
    weight: dict[ClassKey, float] = {}
    need: dict[ClassKey, float] = {}
    info: dict[ClassKey, tuple[str, tuple[str, ...], int]] = {}
    serves: dict[GpuDemand, tuple[Profile, ...]] = {}  # thousands of samples, a few dozen distinct requests
    for w, demands, annotated in samples:
        for d in demands:
            if d.kind == "gpu":
                continue  # a whole GPU with MIG off leaves no MIG instance to plan for
            fits = serves.get(d)
            if fits is None:
                fits = serves[d] = profiles_for(model, d)
            if not fits:
                continue  # this model cannot serve it: no demand for its instances
            smallest = fits[0]
            key: ClassKey = ("p", smallest.name) if d.kind == "profile" else ("v", smallest.memory_mib)
            info.setdefault(key, (smallest.name, tuple(p.name for p in fits), smallest.memory_mib))
            weight[key] = weight.get(key, 0.0) + w * d.count
            need[key] = need.get(key, 0.0) + w * d.count * need_mib(d, smallest.memory_mib, annotated)
    total = sum(weight.values())
    classes = [
        DemandClass(k, info[k][0], info[k][1], weight[k] / total, round(need[k] / weight[k]))
        for k in sorted(weight, key=lambda k: (k[0] != "p", -info[k][2], str(k[1])))
        if weight[k] > 0
    ]
    return ModelForecast(model.id, tuple(classes), total)


# The burst rule (docs/planning.md, "Bursts"): a burst is at least BURST_PODS GPU pods created less than
# BURST_QUIET_S apart; it has landed once no GPU pod has been created for BURST_QUIET_S, or BURST_MAX_S after
# its first pod, whichever comes first. Until then, its pending pods that would leave more than BURST_WASTE of
# their smallest instance unused wait for it to land.
BURST_PODS = 8
BURST_QUIET_S = 30.0
BURST_MAX_S = 600.0
BURST_WASTE = 0.4


@dataclass(frozen=True)
class Burst:
    """A burst still arriving: until when (seconds since the epoch) it holds, and the pending pods it holds."""

    until: float
    held: frozenset[str]


def burst_hold(snapshot: Snapshot, now: float) -> Burst | None:
    """The burst still arriving at `now` (seconds since the epoch), or None. A plan made on a burst's first pods
    cuts GPUs for them, and with short relabels, or on the in-place path, they bind at once and hold their
    instances for as long as they run. A pod that would leave much of its instance unused (a 45 GiB pod in an
    80 GB 7g) then takes a GPU that two of the burst's later pods would have filled. So until the burst has
    landed, such pods are not planned (they stay pending, and may still bind to a free instance); the others are
    served as they come. Once it has landed, the plan sees them all and its objective (pods placed, then
    stranded MiB) decides."""
    models = [n.model for n in snapshot.nodes if n.model is not None]
    if not models:
        return None
    model = max(models, key=lambda m: m.full_profile.memory_mib)  # what the burst's pods are measured on
    times = sorted({t for p in _gpu_pods(snapshot.pods) if (t := p.created_s) is not None})
    if not times or now - times[-1] >= BURST_QUIET_S:
        return None
    start = len(times) - 1
    while start > 0 and times[start] - times[start - 1] < BURST_QUIET_S:
        start -= 1
    until = min(times[-1] + BURST_QUIET_S, times[start] + BURST_MAX_S)
    if len(times) - start < BURST_PODS or until <= now:
        return None
    held = frozenset(p.key for p in snapshot.pending if _wasteful(model, p))
    return Burst(until, held) if held else None


def _wasteful(model: GpuModel, pod: Pod) -> bool:
    """Whether the pod would leave more than `BURST_WASTE` of its smallest instance on `model` unused."""
    for d in pod.gpu:
        fits = profiles_for(model, d)
        if not fits:
            return False  # nothing here serves it: holding it changes nothing
        mib = fits[0].memory_mib
        if mib - need_mib(d, mib, pod.need_mib) > BURST_WASTE * mib:
            return True
    return False
