"""Layout facts of one GPU model that the simulated policies need, and the fixed layouts of the static ones."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, ModelGeometry, canonical, geometry
from migctl.sim.workloads import Job


class Shapes:
    """Layout facts of one model, cached by multiset (the policies ask the same questions many times)."""

    def __init__(self, model: GpuModel) -> None:
        self.model = model
        self.geo: ModelGeometry = geometry(model)
        self.mem = {p.name: p.memory_mib for p in model.base_profiles}
        self.full = model.full_profile
        self.full_mib = self.full.memory_mib
        self.layouts = self.geo.base_layouts
        self._best: dict[CanonicalLayout, CanonicalLayout | None] = {}
        self._fits: dict[int, tuple[str, ...]] = {}

    def fitting(self, vram_mib: int) -> tuple[str, ...]:
        """Base profiles with at least `vram_mib`, smallest memory (then fewest compute slices) first."""
        hit = self._fits.get(vram_mib)
        if hit is None:
            ps = [p for p in self.model.base_profiles if p.memory_mib >= vram_mib]
            hit = tuple(p.name for p in sorted(ps, key=lambda p: (p.memory_mib, p.compute_slices, p.name)))
            self._fits[vram_mib] = hit
        return hit

    def smallest(self, job: Job) -> str | None:
        """The profile the webhook would give `job` (smallest plain profile covering its VRAM), or None."""
        fits = self.fitting(self.full_mib if job.whole else job.vram_mib)
        return fits[0] if fits else None

    def completion(self, must: CanonicalLayout) -> CanonicalLayout | None:
        """The plain layout containing `must` that leaves the least memory unusable (then the most free MiB): the
        geometry's one best completion with the baselines' objective (migctl's own policy uses the planner's)."""
        if must in self._best:
            return self._best[must]
        geo = self.geo
        best = geo.best_completion(
            dict(must), lambda f: (f.unusable, -geo.instance_mib(f.layout), f.layout), base_only=True
        )
        out = None if best is None else best.layout
        self._best[must] = out
        return out

    def unusable(self, layout: CanonicalLayout) -> int:
        return self.geo.unusable_mib(layout)

    def instance_mib(self, counter: Counter[str]) -> int:
        return sum(self.mem[p] * c for p, c in counter.items())


def all_1g(shapes: Shapes) -> CanonicalLayout:
    """mig-parted's `all-1g.*`: as many of the smallest profile as the GPU holds."""
    model = shapes.model
    smallest = min(model.base_profiles, key=lambda p: (p.memory_mib, p.compute_slices))
    lay: CanonicalLayout = ((smallest.name, model.compute_slices),)
    return lay if shapes.geo.is_valid(lay) else ((smallest.name, smallest.max_instances),)


def balanced(shapes: Shapes) -> CanonicalLayout:
    """mig-parted's `all-balanced` as the catalog gives it: 2×1g + 1×2g + 1×3g (the smallest of each), less the
    sizes the model lacks (an A30 has no 3g: 2×1g + 2g) and what does not fit. The simulator takes NVIDIA's own
    entry where its config has one (`migctl/sim/named.py`); this is the fallback."""
    by_slices: dict[int, list[tuple[int, str]]] = {}
    for p in shapes.model.base_profiles:
        by_slices.setdefault(p.compute_slices, []).append((p.memory_mib, p.name))
    wanted = [(min(by_slices[k])[1], n) for k, n in ((1, 2), (2, 1), (3, 1)) if k in by_slices]
    while wanted and not shapes.geo.is_valid(canonical(dict(wanted))):
        wanted.pop()  # the largest size first
    return canonical(dict(wanted)) if wanted else all_1g(shapes)


def best_static_mix(shapes: Shapes, jobs: Sequence[Job], n_gpus: int) -> list[CanonicalLayout]:
    """MISO's 'optimal static partition' analogue (an oracle: it reads the whole trace): one layout per GPU, chosen
    greedily from the trace's smallest-fitting-profile histogram (scaled to the cluster) so that the covered MiB
    is largest."""
    hist: Counter[str] = Counter()
    for j in jobs:
        p = shapes.smallest(j)
        if p is not None:
            hist[p] += j.num_gpu
    demand_mib = sum(shapes.mem[p] * n for p, n in hist.items()) or 1
    scale = shapes.full_mib * n_gpus / demand_mib
    remaining = {p: n * scale for p, n in hist.items()}
    out = []
    for _ in range(n_gpus):
        best: tuple[tuple[float, int], CanonicalLayout] | None = None
        for lay in shapes.layouts:
            covered = sum(min(c, max(0.0, remaining.get(p, 0.0))) * shapes.mem[p] for p, c in lay)
            rank = (-covered, shapes.unusable(lay))
            if best is None or rank < best[0]:
                best = (rank, lay)
        assert best is not None
        out.append(best[1])
        for p, c in best[1]:
            remaining[p] = remaining.get(p, 0.0) - c
    return sorted(out)


def trace_mix(shapes: Shapes, jobs: Sequence[Job]) -> Counter[str]:
    """How many jobs of the trace take each smallest profile (fgd-mig's target mix; an oracle input too)."""
    out: Counter[str] = Counter()
    for j in jobs:
        p = shapes.smallest(j)
        if p is not None:
            out[p] += 1
    return out
