"""Discrete-event simulation of a MIG cluster and the layout policies compared in docs/simulation.md.

State: every GPU has a layout (a multiset of MIG instances) and the instances in use. Jobs arrive, wait in a
queue, get an instance (or `num_gpu` full instances on one node), run for their duration and leave. After every
event batch the policy places what it can; a GPU whose layout changes costs `reconfig_s` seconds before the
pods placed on it start (the cost has not been measured: a parameter, default 60 s).

What a policy may change: *static* policies never reconfigure. `migctl` calls the real planner
(`migctl.core.planner.plan`) on a snapshot of the simulator's state, so, like migctl in a cluster, it only
reshapes idle GPUs. `nos` reshapes only idle GPUs too. `first-fit`, `best-fit` and `fgd-mig` may also re-cut
the *free* part of a busy GPU (keeping instances in use), as an agent driving NVML directly could; this is more
freedom than migctl has, on purpose, so the comparison shows what that freedom is worth.
CPU and host memory are not modelled in MIG mode (the openb CPU limits are in the continuous validation only).
"""

from __future__ import annotations

import heapq
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from migctl.core.catalog import GpuModel
from migctl.core.cluster import Gpu, GpuDemand, Node, Pod, Resources, Snapshot
from migctl.core.geometry import CanonicalLayout, ModelGeometry, canonical, geometry
from migctl.core.migparted import GpuConfig
from migctl.core.planner import plan
from migctl.core.settings import PlannerSettings
from migctl.sim.names import DEFAULT_RECONFIG_S, MIG_POLICIES
from migctl.sim.workloads import Job

# ---------------------------------------------------------------------------------------------------------
# Geometry helpers (per model, cached)


class Shapes:
    """Layout facts of one model the policies need, cached by multiset."""

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

    def completion(self, must: CanonicalLayout) -> CanonicalLayout | None:
        """The valid layout containing `must` that leaves the least memory unusable (then the most free MiB)."""
        if must in self._best:
            return self._best[must]
        need = Counter(dict(must))
        best: tuple[tuple[int, int, CanonicalLayout], CanonicalLayout] | None = None
        for lay in self.layouts:
            have = Counter(dict(lay))
            if need - have:
                continue
            rank = (self.geo.unusable_mib(lay), -self.geo.instance_mib(lay), lay)
            if best is None or rank < best[0]:
                best = (rank, lay)
        out = None if best is None else best[1]
        self._best[must] = out
        return out

    def unusable(self, layout: CanonicalLayout) -> int:
        return self.geo.unusable_mib(layout)


# ---------------------------------------------------------------------------------------------------------
# Cluster state


@dataclass
class GpuState:
    node: int
    index: int
    layout: Counter[str]
    used: Counter[str] = field(default_factory=Counter)
    busy_until: float = 0.0  # reconfiguring until then

    @property
    def free(self) -> Counter[str]:
        return self.layout - self.used

    def key(self) -> tuple[CanonicalLayout, CanonicalLayout]:
        return canonical(self.layout), canonical(self.used)


@dataclass
class Placement:
    job: int
    gpus: list[tuple[int, str]]  # (gpu id, profile) per unit
    layouts: dict[int, CanonicalLayout]  # GPUs whose layout changes first (counted once, on this placement)
    delayed: bool = False  # lands on a GPU re-cut in this round (waits for the reconfiguration)


class Cluster:
    def __init__(self, node_gpus: Sequence[int], model: GpuModel, initial: CanonicalLayout | None = None) -> None:
        self.shapes = Shapes(model)
        start = initial if initial is not None else ()  # MIG on, no instances: dynamic policies cut on demand
        self.gpus: list[GpuState] = []
        self.by_node: list[list[int]] = []
        for n, count in enumerate(node_gpus):
            ids = []
            for i in range(count):
                ids.append(len(self.gpus))
                self.gpus.append(GpuState(n, i, Counter(dict(start))))
            self.by_node.append(ids)
        self.total_mib = self.shapes.full_mib * len(self.gpus)

    def instance_mib(self, counter: Counter[str]) -> int:
        return sum(self.shapes.mem[p] * c for p, c in counter.items())


# ---------------------------------------------------------------------------------------------------------
# Policies: each returns placements for (some of) the pending jobs, given the cluster.


Policy = Callable[[Cluster, list[int], list[Job]], list[Placement]]


def _free_profile(g: GpuState, fits: tuple[str, ...]) -> str | None:
    free = g.free
    for p in fits:
        if free[p] > 0:
            return p
    return None


def _relayout(cl: Cluster, g: GpuState, p: str, mode: str) -> CanonicalLayout | None:
    """New layout of `g` with a free `p`: only on idle GPUs (`idle`), or keeping used instances (`free-slices`)."""
    busy = sum(g.used.values()) > 0
    if busy and mode != "free-slices":
        return None
    if mode == "free-slices":
        grown = cl.shapes.completion(canonical(g.layout + Counter({p: 1})))  # add into unpartitioned slices
        if grown is not None:
            return grown
    return cl.shapes.completion(canonical(g.used + Counter({p: 1})))


def _option(cl: Cluster, g: GpuState, fits: tuple[str, ...], mode: str) -> tuple[str | None, CanonicalLayout | None]:
    """Smallest fitting profile this GPU can give: a free instance, or (dynamic modes) a re-cut of free slices."""
    for p in fits:
        if g.free[p] > 0:
            return p, None
        if mode != "static":
            lay = _relayout(cl, g, p, mode)
            if lay is not None:
                return p, lay
    return None, None


def _multi(cl: Cluster, job: Job, ji: int, mode: str, pick_best: bool) -> Placement | None:
    """Full-GPU units on one node: free full instances first, then GPUs a re-layout can give one."""
    full = cl.shapes.full.name
    best: tuple[int, Placement] | None = None
    for ids in cl.by_node:
        units: list[tuple[int, str]] = []
        lays: dict[int, CanonicalLayout] = {}
        for gid in ids:
            g = cl.gpus[gid]
            if g.free[full] > 0:
                units.append((gid, full))
        for gid in ids:
            if len(units) >= job.num_gpu or mode == "static":
                break
            g = cl.gpus[gid]
            if g.free[full] == 0 and not g.used:
                lays[gid] = ((full, 1),)
                units.append((gid, full))
        if len(units) >= job.num_gpu:
            units = units[: job.num_gpu]
            used_ids = {u[0] for u in units}
            pl = Placement(ji, units, {k: v for k, v in lays.items() if k in used_ids})
            if not pick_best:
                return pl
            spare = sum(1 for gid in ids if not cl.gpus[gid].used) - job.num_gpu
            if best is None or spare < best[0]:
                best = (spare, pl)
    return None if best is None else best[1]


def greedy_policy(kind: str) -> Policy:
    """first-fit / best-fit on instances (free slices may be re-cut), and the static layouts (never re-cut)."""
    mode = "static" if kind.startswith("static") else "free-slices"

    def run(cl: Cluster, pending: list[int], jobs: list[Job]) -> list[Placement]:
        out = []
        for ji in pending:
            job = jobs[ji]
            if job.num_gpu > 1 or job.whole:
                pl = _multi(cl, job, ji, mode, kind != "first-fit")
                if pl is not None:
                    _apply(cl, pl)
                    out.append(pl)
                continue
            fits = cl.shapes.fitting(job.vram_mib)
            choice: tuple[tuple[int, ...], int, str, CanonicalLayout | None] | None = None
            for gid, g in enumerate(cl.gpus):
                p, lay = _option(cl, g, fits, mode)
                if p is None:
                    continue
                if kind == "first-fit":
                    choice = ((0,), gid, p, lay)
                    break
                after = (Counter(dict(lay)) if lay else g.layout) - g.used
                after[p] -= 1
                rank = (cl.shapes.mem[p], 1 if lay else 0, cl.instance_mib(after), gid)  # best fit: least left
                if choice is None or rank < choice[0]:
                    choice = (rank, gid, p, lay)
            if choice is None:
                continue
            _, gid, p, lay = choice
            pl = Placement(ji, [(gid, p)], {gid: lay} if lay else {})
            _apply(cl, pl)
            out.append(pl)
        return out

    return run


def nos_policy(cl: Cluster, pending: list[int], jobs: list[Job]) -> list[Placement]:
    """nos-like: use free instances; otherwise re-cut an idle GPU to the layout serving the most pending pods."""
    out = []
    for ji in pending:
        job = jobs[ji]
        if job.num_gpu > 1 or job.whole:
            pl = _multi(cl, job, ji, "idle", False)
            if pl is not None:
                _apply(cl, pl)
                out.append(pl)
            continue
        fits = cl.shapes.fitting(job.vram_mib)
        placed = None
        for gid, g in enumerate(cl.gpus):
            p = _free_profile(g, fits)
            if p is not None:
                placed = Placement(ji, [(gid, p)], {})
                break
        if placed is None:
            idle = next((gid for gid, g in enumerate(cl.gpus) if not g.used), None)
            if idle is not None:
                missing: Counter[str] = Counter()
                for other in pending:
                    o = jobs[other]
                    if not (o.num_gpu > 1 or o.whole) and cl.shapes.fitting(o.vram_mib):
                        missing[cl.shapes.fitting(o.vram_mib)[0]] += 1
                best: tuple[tuple[int, int], CanonicalLayout, str] | None = None
                for lay in cl.shapes.layouts:
                    have = dict(lay)
                    own = next((q for q in fits if have.get(q, 0) > 0), None)
                    if own is None:
                        continue
                    served = sum(min(have.get(q, 0), n) for q, n in missing.items())
                    rank = (-served, cl.shapes.unusable(lay))
                    if best is None or rank < best[0]:
                        best = (rank, lay, own)
                if best is not None:
                    placed = Placement(ji, [(idle, best[2])], {idle: best[1]})
        if placed is not None:
            _apply(cl, placed)
            out.append(placed)
    return out


def fgd_mig_policy(target: Counter[str]) -> Policy:
    """FGD on MIG: place where the expected fragmentation w.r.t. the trace's profile mix grows least.

    frag_m(g) = MiB of free instances too small for profile m, or all free MiB of g when neither a free instance
    nor a re-cut of its free slices can host m (the FGD measure with MIG feasibility, workloads.md §2).
    """
    total = sum(target.values()) or 1
    mix = [(p, n / total) for p, n in sorted(target.items())]

    def frag(cl: Cluster, layout: Counter[str], used: Counter[str]) -> float:
        free = layout - used
        spare = cl.shapes.full_mib - cl.instance_mib(used)  # free instances + unpartitioned memory
        out = 0.0
        for p, w in mix:
            need = cl.shapes.mem[p]
            hostable = any(free[q] > 0 and cl.shapes.mem[q] >= need for q in free)
            if hostable or cl.shapes.completion(canonical(used + Counter({p: 1}))) is not None:
                out += w * sum(cl.shapes.mem[q] * c for q, c in free.items() if cl.shapes.mem[q] < need)
            else:
                out += w * spare
        return out

    cache: dict[tuple[CanonicalLayout, CanonicalLayout], float] = {}

    def f_of(cl: Cluster, layout: Counter[str], used: Counter[str]) -> float:
        k = (canonical(layout), canonical(used))
        if k not in cache:
            cache[k] = frag(cl, layout, used)
        return cache[k]

    def run(cl: Cluster, pending: list[int], jobs: list[Job]) -> list[Placement]:
        out = []
        for ji in pending:
            job = jobs[ji]
            if job.num_gpu > 1 or job.whole:
                pl = _multi(cl, job, ji, "free-slices", True)
                if pl is not None:
                    _apply(cl, pl)
                    out.append(pl)
                continue
            fits = cl.shapes.fitting(job.vram_mib)
            seen: dict[tuple[CanonicalLayout, CanonicalLayout], tuple[float, str, CanonicalLayout | None] | None] = {}
            best: tuple[tuple[float, int], int, str, CanonicalLayout | None] | None = None
            for gid, g in enumerate(cl.gpus):
                k = g.key()
                if k not in seen:
                    opt: tuple[float, str, CanonicalLayout | None] | None = None
                    before = f_of(cl, g.layout, g.used)
                    for p in fits:
                        cands: list[CanonicalLayout | None] = []
                        if g.free[p] > 0:
                            cands.append(None)
                        lay = _relayout(cl, g, p, "free-slices")
                        if lay is not None:
                            cands.append(lay)
                        for c in cands:
                            layout = Counter(dict(c)) if c else g.layout
                            d = f_of(cl, layout, g.used + Counter({p: 1})) - before
                            d += cl.shapes.mem[p] - job.vram_mib  # internal waste counts as fragmentation too
                            if opt is None or (d, c is not None) < (opt[0], opt[2] is not None):
                                opt = (d, p, c)
                    seen[k] = opt
                opt = seen[k]
                if opt is None:
                    continue
                rank = (opt[0], 1 if opt[2] else 0)
                if best is None or rank < best[0]:
                    best = (rank, gid, opt[1], opt[2])
            if best is None:
                continue
            _, gid, p, lay = best
            pl = Placement(ji, [(gid, p)], {gid: lay} if lay else {})
            _apply(cl, pl)
            out.append(pl)
        return out

    return run


def migctl_policy(settings: PlannerSettings | None = None) -> Policy:
    """The real planner on a snapshot of the simulator's state (every GPU's layout and used instances)."""
    settings = settings or PlannerSettings()

    def run(cl: Cluster, pending: list[int], jobs: list[Job]) -> list[Placement]:
        nodes = []
        for n, ids in enumerate(cl.by_node):
            gpus = []
            free: Counter[str] = Counter()
            for gid in ids:
                g = cl.gpus[gid]
                gpus.append(Gpu(g.index, GpuConfig.mig(canonical(g.layout)), dict(g.used), False))
                free += g.free
            nodes.append(
                Node(
                    name=f"n{n:05d}",
                    allocatable=Resources(10**9, 2**62, 10**6),
                    model=cl.shapes.model,
                    gpus=tuple(gpus),
                    mig_free=dict(free),
                    usage_known=True,
                )
            )
        pods = []
        for ji in pending:
            job = jobs[ji]
            vram = cl.shapes.full_mib if job.whole else job.vram_mib
            pods.append(
                Pod(
                    "sim",
                    f"j{ji}",
                    priority=job.priority,
                    gpu=(GpuDemand("vram", job.num_gpu, vram_mib=vram),),
                    need_mib=min(vram, cl.shapes.full_mib),
                    created=f"{ji:09d}",
                )
            )
        result = plan(Snapshot(tuple(nodes), tuple(pods)), settings)
        changed: dict[int, CanonicalLayout] = {}
        for npl in result.nodes:
            n = int(npl.name[1:])
            for gp in npl.gpus:
                if gp.changed:
                    changed[cl.by_node[n][gp.index]] = gp.target.layout
        units: dict[int, list[tuple[int, str]]] = {}
        for a in result.assignments:
            ji = int(a.pod.split("/j")[1])
            assert a.gpu is not None
            units.setdefault(ji, []).append((cl.by_node[int(a.node[1:])][a.gpu], a.profile))
        out = []
        for g_id, lay in changed.items():  # layouts first: several pods may land on one re-cut GPU
            _relayout_gpu(cl, g_id, lay)
        counted: set[int] = set()
        for ji, u in units.items():
            lays = {gid: changed[gid] for gid, _ in u if gid in changed and gid not in counted}
            counted.update(lays)
            pl = Placement(ji, u, lays, any(gid in changed for gid, _ in u))
            _apply(cl, pl, relayout=False)
            out.append(pl)
        return out

    return run


def _relayout_gpu(cl: Cluster, gid: int, layout: CanonicalLayout) -> None:
    g = cl.gpus[gid]
    new = Counter(dict(layout))
    assert not (g.used - new), f"re-layout of GPU {gid} would destroy instances in use"
    assert cl.shapes.geo.is_valid(layout), f"invalid layout {layout}"
    g.layout = new


def _apply(cl: Cluster, pl: Placement, relayout: bool = True) -> None:
    if relayout:
        for gid, lay in pl.layouts.items():
            _relayout_gpu(cl, gid, lay)
    for gid, p in pl.gpus:
        g = cl.gpus[gid]
        assert g.free[p] > 0, f"no free {p} on GPU {gid}"
        g.used[p] += 1


def best_static_mix(shapes: Shapes, jobs: Sequence[Job], n_gpus: int) -> list[CanonicalLayout]:
    """MISO's 'optimal static partition' analogue: one layout per GPU, chosen greedily from the whole trace's
    smallest-fitting-profile histogram (scaled to the cluster) so that the covered MiB is largest."""
    hist: Counter[str] = Counter()
    for j in jobs:
        fits = shapes.fitting(shapes.full_mib if j.whole else j.vram_mib)
        if fits:
            hist[fits[0]] += j.num_gpu
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


# ---------------------------------------------------------------------------------------------------------
# The event loop


@dataclass
class Sample:
    """Cluster figures after an event batch (MiB unless stated)."""

    time: float
    arrived_mib: int
    placed_mib: int
    used_instance_mib: int
    internal_mib: int
    unusable_mib: int
    arrived_pods: int
    placed_pods: int
    running_mib: int = 0  # demand of the pods running now


@dataclass
class RunResult:
    policy: str
    total_mib: int
    gpus: int
    jobs: int
    placed: int
    placed_mib: int
    arrived_mib: int
    internal_mib: int  # at the end of arrivals: Σ(instance − demand) of running pods
    unusable_mib: int  # at the end of arrivals: memory the layouts leave unreachable
    reconfigs: int
    evictions: int
    wait_s: list[float]
    plan_s: list[float]
    samples: list[Sample]
    departures: bool = False


def simulate(
    jobs: Sequence[Job],
    node_gpus: Sequence[int],
    model: GpuModel,
    policy: str,
    *,
    reconfig_s: float = DEFAULT_RECONFIG_S,
    batch: int = 32,
    departures: bool = True,
    drop_unplaced: bool = False,
) -> RunResult:
    """Run one policy over `jobs` (sorted by arrival). Jobs arriving at the same instant, or `batch` consecutive
    jobs when `departures` is False (the FGD protocol), form one planning round."""
    jobs = list(jobs)
    shapes = Shapes(model)
    n_gpus = sum(node_gpus)
    initial: CanonicalLayout | None = None
    static_layouts: list[CanonicalLayout] | None = None
    if policy == "static-all-1g":
        smallest = min(model.base_profiles, key=lambda p: (p.memory_mib, p.compute_slices))
        initial = ((smallest.name, model.compute_slices),)
        if not shapes.geo.is_valid(initial):
            initial = ((smallest.name, smallest.max_instances),)
    elif policy == "static-balanced":
        initial = _balanced(shapes)
    elif policy == "static-best-mix":
        static_layouts = best_static_mix(shapes, jobs, n_gpus)
    cl = Cluster(node_gpus, model, initial)
    if static_layouts is not None:
        for g, lay in zip(cl.gpus, static_layouts, strict=True):
            g.layout = Counter(dict(lay))
    run = _policy(policy, shapes, jobs)

    order = sorted(range(len(jobs)), key=lambda i: (jobs[i].arrival, i))
    events: list[tuple[float, int, int]] = []  # (time, kind 0=departure 1=arrival, job)
    for i in order:
        heapq.heappush(events, (jobs[i].arrival, 1, i))
    pending: list[int] = []
    running: dict[int, list[tuple[int, str]]] = {}
    start_at: dict[int, float] = {}
    arrived_mib = placed_mib = internal = running_mib = 0
    arrived_pods = 0
    reconfigs = 0
    plan_s: list[float] = []
    samples: list[Sample] = []
    end_internal = end_unusable = -1
    now = 0.0
    demand = {i: (shapes.full_mib if j.whole else j.vram_mib) * j.num_gpu for i, j in enumerate(jobs)}

    while events:
        now = events[0][0]
        count = 0
        while events and (events[0][0] == now if departures else count < batch):
            _, kind, ji = heapq.heappop(events)
            if kind == 0:
                running_mib -= demand[ji]
                for gid, p in running.pop(ji, []):
                    used = cl.gpus[gid].used
                    used[p] -= 1
                    if used[p] <= 0:
                        del used[p]
                    internal -= shapes.mem[p] - min(shapes.mem[p], demand[ji] // jobs[ji].num_gpu)
            else:
                pending.append(ji)
                arrived_mib += demand[ji]
                arrived_pods += 1
                count += 1
        if pending:
            t0 = time.perf_counter()
            placements = run(cl, sorted(pending, key=lambda i: (-jobs[i].priority, i)), jobs)
            plan_s.append(time.perf_counter() - t0)
            done = set()
            for pl in placements:
                reconfigs += len(pl.layouts)
                delay = reconfig_s if pl.layouts or pl.delayed else 0.0
                # without departures (FGD protocol) a round is a batch of arrivals: only the re-cut delays a pod
                start = (now if departures else jobs[pl.job].arrival) + delay
                start_at[pl.job] = start
                running[pl.job] = pl.gpus
                done.add(pl.job)
                placed_mib += demand[pl.job]
                running_mib += demand[pl.job]
                per_unit = demand[pl.job] // jobs[pl.job].num_gpu
                internal += sum(shapes.mem[p] - min(shapes.mem[p], per_unit) for _, p in pl.gpus)
                dur = jobs[pl.job].duration
                if departures and dur is not None:
                    heapq.heappush(events, (start + dur, 0, pl.job))
            pending = [i for i in pending if i not in done]
            if drop_unplaced:
                pending = []
        unusable = sum(shapes.unusable(canonical(g.layout)) for g in cl.gpus if g.used.total())
        used_mib = sum(cl.instance_mib(g.used) for g in cl.gpus)
        samples.append(
            Sample(now, arrived_mib, placed_mib, used_mib, internal, unusable, arrived_pods, len(start_at), running_mib)
        )
        if not any(k == 1 for _, k, _ in events) and end_internal < 0:
            end_internal, end_unusable = internal, unusable
    wait = [start_at[i] - jobs[i].arrival for i in start_at]
    return RunResult(
        policy,
        cl.total_mib,
        n_gpus,
        len(jobs),
        len(start_at),
        placed_mib,
        arrived_mib,
        max(end_internal, 0),
        max(end_unusable, 0),
        reconfigs,
        0,
        wait,
        plan_s,
        samples,
        departures,
    )


def _balanced(shapes: Shapes) -> CanonicalLayout:
    """mig-parted's `all-balanced`: 2×1g + 1×2g + 1×3g (smallest 1g)."""
    by_slices: dict[int, list[tuple[int, str]]] = {}
    for p in shapes.model.base_profiles:
        by_slices.setdefault(p.compute_slices, []).append((p.memory_mib, p.name))
    one, two, three = min(by_slices[1])[1], min(by_slices[2])[1], min(by_slices[3])[1]
    lay = canonical({one: 2, two: 1, three: 1})
    assert shapes.geo.is_valid(lay)
    return lay


def _policy(name: str, shapes: Shapes, jobs: Sequence[Job]) -> Policy:
    if name == "migctl":
        return migctl_policy()
    if name in ("static-all-1g", "static-balanced", "static-best-mix"):
        return greedy_policy("static")
    if name in ("first-fit", "best-fit"):
        return greedy_policy(name)
    if name == "nos":
        return nos_policy
    if name == "fgd-mig":
        target: Counter[str] = Counter()
        for j in jobs:
            fits = shapes.fitting(shapes.full_mib if j.whole else j.vram_mib)
            if fits:
                target[fits[0]] += 1
        return fgd_mig_policy(target)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(MIG_POLICIES)}")
