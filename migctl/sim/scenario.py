"""Scenarios: a workload on a cluster shape, every policy, several seeds; metrics as mean ± std.

Metric definitions (all memory figures are MiB of GPU memory; "cluster memory" is the full-instance memory of
every GPU):
* alloc %: demand placed (the pods' VRAM, not their instances) / cluster memory (FGD's allocation ratio,
  with VRAM in place of GPU share);
* placed % (pods, VRAM): placed / arrived, by count and by requested VRAM;
* stranded %, split: internal = Σ(instance MiB − pod's VRAM) over running pods / cluster memory (profile
  rounding), unusable = memory the layouts of busy GPUs leave unreachable / cluster memory — both read when the
  last pod has arrived;
* pending time: seconds from arrival to start (reconfiguration cost included), over placed pods;
* reconfigurations (GPU layout changes), node pauses (node-wide reconfiguration windows) and evictions per
  1,000 placed pods; plan latency: wall time of one planner call (migctl) or policy step (the others).
With departures, alloc % is the time average of the running pods' VRAM from the first to the last arrival.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import GpuModel
from migctl.core.model.settings import PlannerSettings
from migctl.sim.continuous import MILLI, ContinuousSim, resample, typical_pods
from migctl.sim.dra import DraTime
from migctl.sim.mig import RunResult
from migctl.sim.names import (
    ALL_POLICIES,
    CONTINUOUS,
    DEFAULT_DRA_FENCE_S,
    DEFAULT_DRA_RESTART_S,
    DEFAULT_READVERTISE_S,
    DEFAULT_RECONFIG_S,
    DEFAULT_SIGMA,
    MIG_POLICIES,
    WORKLOADS,
)
from migctl.sim.run import simulate
from migctl.sim.timing import InPlaceTime, ReconfigTime
from migctl.sim.workloads import (
    BUNDLED,
    OPENB,
    OPENB_MAPPING,
    NodeList,
    PodList,
    Workload,
    data_dir,
    genai_workload,
    load_openb_nodes,
    load_openb_pods,
    miso_workload,
    openb_jobs,
)

__all__ = ["ALL_POLICIES", "CONTINUOUS", "MIG_POLICIES", "WORKLOADS", "Scenario", "load_cluster", "summarize"]
METRICS = (
    "alloc_pct",
    "alloc_pct_at_100",
    "placed_pods_pct",
    "placed_vram_pct",
    "internal_pct",
    "unusable_pct",
    "pending_s_mean",
    "reconfigs_per_1k",
    "node_pauses_per_1k",
    "evictions_per_1k",
    "plan_ms_p50",
    "plan_ms_p99",
)


@dataclass(frozen=True)
class ClusterShape:
    name: str
    nodes: NodeList

    @property
    def gpus(self) -> int:
        return int(self.nodes.gpus.sum())


def load_cluster(spec: str) -> ClusterShape:
    """`openb` (1,213 nodes / 6,212 GPUs), `openb/K` (every K-th openb node), `openb-slice` (bundled), `NxG`."""
    if spec == "openb-slice":
        return ClusterShape(spec, load_openb_nodes(BUNDLED / "openb_slice_nodes.csv"))
    if spec.startswith("openb"):
        nodes = load_openb_nodes(data_dir(OPENB) / "openb_node_list_gpu_node.csv")
        step = int(spec.split("/")[1]) if "/" in spec else 1
        sel = np.arange(0, len(nodes), step)
        return ClusterShape(spec, _subset(nodes, sel))
    n, g = (int(x) for x in spec.lower().split("x"))
    nodes = NodeList(
        tuple(f"node-{i}" for i in range(n)),
        np.full(n, 128_000, dtype=np.int64),
        np.full(n, 1 << 20, dtype=np.int64),
        np.full(n, g, dtype=np.int64),
        tuple("" for _ in range(n)),
    )
    return ClusterShape(spec, nodes)


def _subset(nodes: NodeList, sel: np.ndarray[Any, Any]) -> NodeList:
    return NodeList(
        tuple(nodes.name[i] for i in sel),
        nodes.cpu_milli[sel],
        nodes.memory_mib[sel],
        nodes.gpus[sel],
        tuple(nodes.model[i] for i in sel),
    )


def _openb_pods(workload: str) -> PodList:
    if workload == "openb-slice":
        return load_openb_pods(BUNDLED / "openb_slice_pods.csv")
    return load_openb_pods(data_dir(OPENB) / "openb_pod_list_default.csv")


@dataclass
class Scenario:
    workload: str
    cluster: ClusterShape
    model: GpuModel
    policies: Sequence[str]
    seeds: Sequence[int]
    reconfig_s: float = DEFAULT_RECONFIG_S  # median of the reconfiguration time
    reconfig_sigma: float = DEFAULT_SIGMA  # lognormal shape; 0: always reconfig_s
    readvertise_s: float = DEFAULT_READVERTISE_S  # median of the in-place path's re-advertise window
    dra_restart_s: float = DEFAULT_DRA_RESTART_S  # median of the static-MIG DRA plugin's restart
    dra_fence_s: float = DEFAULT_DRA_FENCE_S  # a DeviceTaintRule written until first fit honours it
    ratio: float = 1.3
    batch: int = 32
    miso_gap_s: float = 20.0
    miso_copies: int = 3
    planner: PlannerSettings | None = None  # migctl's settings (a config file's); defaults when None
    controller: ControllerSettings | None = None
    runs: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    curves: dict[str, list[tuple[list[float], list[float], list[float]]]] = field(default_factory=dict)
    timelines: dict[str, list[Timeline]] = field(default_factory=dict)
    mapping: str = ""
    source: str = ""

    @property
    def timing(self) -> ReconfigTime:
        return ReconfigTime(self.reconfig_s, self.reconfig_sigma)

    @property
    def in_place(self) -> InPlaceTime:
        return InPlaceTime(self.readvertise_s)

    @property
    def dra(self) -> DraTime:
        return DraTime(self.dra_fence_s, self.dra_restart_s)

    def run(self, on_run: Callable[[str, int], None] | None = None) -> None:
        """Every policy on every seed; `on_run(policy, seed)` after each run (the CLI's progress bar)."""
        for seed in self.seeds:
            for policy in self.policies:
                metrics, curve, timeline = self._one(policy, seed)
                self.runs.setdefault(policy, []).append(metrics)
                self.curves.setdefault(policy, []).append(curve)
                if timeline is not None:
                    self.timelines.setdefault(policy, []).append(timeline)
                if on_run is not None:
                    on_run(policy, seed)

    def _one(
        self, policy: str, seed: int
    ) -> tuple[dict[str, float], tuple[list[float], list[float], list[float]], Timeline | None]:
        full = self.model.full_profile.memory_mib
        if self.workload.startswith("openb"):
            pods = _openb_pods(self.workload)
            rng = np.random.default_rng(seed)
            order = resample(pods, self.cluster.gpus * MILLI, self.ratio, rng)
            self.mapping = OPENB_MAPPING + f" ({full} MiB on {self.model.id})"
            self.source = f"openb default pods, resampled to {self.ratio:.0%} of GPU capacity, no departures"
            if policy in CONTINUOUS:
                return (*_continuous(policy, pods, order, self.cluster.nodes, rng), None)
            jobs = openb_jobs(pods, order, full)
            res = simulate(
                jobs,
                self.cluster.nodes.gpus.tolist(),
                self.model,
                policy,
                reconfig=self.timing,
                in_place=self.in_place,
                dra=self.dra,
                batch=self.batch,
                departures=False,
                drop_unplaced=True,
                seed=seed,
                planner=self.planner,
                controller=self.controller,
            )
            return summarize(res), curve_of(res), None
        if policy in CONTINUOUS:
            raise ValueError(f"{policy} needs an openb workload (it packs gpu_milli shares)")
        wl = self._workload(seed)
        self.mapping, self.source = wl.mapping, wl.source
        nodes = self.cluster.nodes.gpus.tolist()
        res = simulate(
            list(wl.jobs),
            nodes,
            self.model,
            policy,
            reconfig=self.timing,
            in_place=self.in_place,
            dra=self.dra,
            seed=seed,
            planner=self.planner,
            controller=self.controller,
        )
        return summarize(res), curve_of(res), timeline_of(res)

    def _workload(self, seed: int) -> Workload:
        if self.workload == "miso":
            return miso_workload(seed=seed, mean_gap_s=self.miso_gap_s, copies=self.miso_copies)
        if self.workload == "genai":
            return genai_workload(seed=seed)
        raise ValueError(f"unknown workload {self.workload!r}; choose from {', '.join(WORKLOADS)}")

    def table(self) -> dict[str, dict[str, tuple[float, float]]]:
        """policy -> metric -> (mean, std over seeds)."""
        out: dict[str, dict[str, tuple[float, float]]] = {}
        for policy, runs in self.runs.items():
            out[policy] = {}
            for m in METRICS:
                vals = np.array([r.get(m, math.nan) for r in runs], dtype=np.float64)
                if np.all(np.isnan(vals)):
                    out[policy][m] = (math.nan, math.nan)
                else:
                    out[policy][m] = (float(np.nanmean(vals)), float(np.nanstd(vals)))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "source": self.source,
            "mapping": self.mapping,
            "cluster": {"shape": self.cluster.name, "nodes": len(self.cluster.nodes), "gpus": self.cluster.gpus},
            "model": self.model.id,
            "seeds": list(self.seeds),
            "reconfig_s": self.reconfig_s,
            "reconfig_sigma": self.reconfig_sigma,
            "reconfig": self.timing.describe(),
            "readvertise_s": self.readvertise_s,
            "in_place": self.in_place.describe(),
            "dra_restart_s": self.dra_restart_s,
            "dra_fence_s": self.dra_fence_s,
            "dra": self.dra.describe(),
            "batch": self.batch,
            "metrics": {p: {m: {"mean": v[0], "std": v[1]} for m, v in t.items()} for p, t in self.table().items()},
            "runs": self.runs,
        }


def _pct(a: float, b: float) -> float:
    return 100.0 * a / b if b else math.nan


def summarize(res: RunResult) -> dict[str, float]:
    wait = np.array(res.wait_s) if res.wait_s else np.array([math.nan])
    pending = float(wait.mean()) if res.wait_s else math.nan
    plan = np.array(res.plan_s) * 1000 if res.plan_s else np.array([math.nan])
    arrived_pods = res.samples[-1].arrived_pods if res.samples else res.jobs
    at100 = [s for s in res.samples if s.arrived_mib <= res.total_mib]
    alloc = _pct(res.placed_mib, res.total_mib)
    alloc100 = _pct(at100[-1].placed_mib, res.total_mib) if at100 else math.nan
    if res.departures:  # pods leave: time-weighted running VRAM while pods arrive
        alloc, alloc100 = _pct(time_average(res, "running_mib"), res.total_mib), math.nan
    return {
        "alloc_pct": alloc,
        "alloc_pct_at_100": alloc100,
        "placed_pods_pct": _pct(res.placed, arrived_pods),
        "placed_vram_pct": _pct(res.placed_mib, res.arrived_mib),
        "internal_pct": _pct(res.internal_mib, res.total_mib),
        "unusable_pct": _pct(res.unusable_mib, res.total_mib),
        "pending_s_mean": pending,
        "reconfigs_per_1k": 1000.0 * res.reconfigs / res.placed if res.placed else math.nan,
        "node_pauses_per_1k": 1000.0 * res.windows / res.placed if res.placed else math.nan,
        "evictions_per_1k": 1000.0 * res.evictions / res.placed if res.placed else math.nan,
        "plan_ms_p50": float(np.nanpercentile(plan, 50)),
        "plan_ms_p99": float(np.nanpercentile(plan, 99)),
    }


def time_average(res: RunResult, what: str) -> float:
    """Time average of a sample field (a step function: each sample holds until the next) over the arrivals,
    from the first arrival to the last; NaN when they all arrive at once."""
    t0, t1 = res.first_arrival, res.last_arrival
    if t1 <= t0:
        return math.nan
    area = 0.0
    for a, b in zip(res.samples, [*res.samples[1:], None], strict=True):
        end = min(b.time if b is not None else t1, t1)
        start = max(a.time, t0)
        if end > start:
            area += (end - start) * float(getattr(a, what))
    return area / (t1 - t0)


@dataclass(frozen=True)
class Timeline:
    """One run over time: seconds, pods queued (pending or waiting for a reconfiguration), running VRAM %."""

    t: list[float]
    queued: list[int]
    running_pct: list[float]


def timeline_of(res: RunResult) -> Timeline:
    return Timeline(
        [s.time for s in res.samples],
        [s.queued for s in res.samples],
        [_pct(s.running_mib, res.total_mib) for s in res.samples],
    )


def curve_of(res: RunResult) -> tuple[list[float], list[float], list[float]]:
    """(arrived %, alloc %, stranded %) per sample, all relative to cluster memory."""
    arr = [_pct(s.arrived_mib, res.total_mib) for s in res.samples]
    alloc = [_pct(s.placed_mib, res.total_mib) for s in res.samples]
    strand = [_pct(s.internal_mib + s.unusable_mib, res.total_mib) for s in res.samples]
    return arr, alloc, strand


def _continuous(
    policy: str, pods: PodList, order: np.ndarray[Any, Any], nodes: NodeList, rng: np.random.Generator
) -> tuple[dict[str, float], tuple[list[float], list[float], list[float]]]:
    """The FGD paper's fractional-sharing reference: GPU share allocation, no MIG (so no MIG stranding)."""
    sim = ContinuousSim(nodes, typical_pods(pods), rng)
    curve = sim.run(policy.removeprefix("cont-"), pods, order)
    gpu_pods = int((pods.num_gpu[order] > 0).sum())
    placed_gpu = curve.placed - int((pods.num_gpu[order] == 0).sum())  # CPU-only pods always count as placed
    total = curve.total_gpus * MILLI
    metrics = {
        "alloc_pct": _pct(float(curve.used[-1]), total),
        "alloc_pct_at_100": curve.alloc_pct_at(100),
        "placed_pods_pct": _pct(max(placed_gpu, 0), gpu_pods),
        "placed_vram_pct": _pct(float(curve.used[-1]), float(curve.arrived[-1])),
        "internal_pct": math.nan,
        "unusable_pct": math.nan,
        "pending_s_mean": 0.0,
        "reconfigs_per_1k": math.nan,
        "node_pauses_per_1k": math.nan,
        "evictions_per_1k": math.nan,
        "plan_ms_p50": math.nan,
        "plan_ms_p99": math.nan,
    }
    step = max(1, len(curve.arrived) // 200)
    arr = [_pct(float(a), total) for a in curve.arrived[::step]]
    alloc = [_pct(float(u), total) for u in curve.used[::step]]
    return metrics, (arr, alloc, [math.nan] * len(arr))


def write_slice(out_dir: Path, pods_n: int = 400, node_step: int = 50, seed: int = 7) -> None:
    """Re-create the bundled openb slice (kept for provenance: `python -c` in migctl/sim/data/README.md)."""
    d = data_dir(OPENB)
    with (d / "openb_pod_list_default.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    rng = np.random.default_rng(seed)
    pick = sorted(rng.choice(len(rows), size=pods_n, replace=False).tolist())
    with (out_dir / "openb_slice_pods.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows[i] for i in pick)
    with (d / "openb_node_list_gpu_node.csv").open(newline="") as f:
        nrows = list(csv.DictReader(f))
    with (out_dir / "openb_slice_nodes.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(nrows[0]))
        w.writeheader()
        w.writerows(nrows[::node_step])
