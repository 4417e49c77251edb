"""Continuous (non-MIG) GPU sharing: BestFit and FGD as in the FGD artifact, for validating the simulator.

Pods ask for `gpu_milli` (1/1000 of a GPU) on one GPU, or whole GPUs; a GPU can be shared by any pods whose
shares sum to at most 1000. This is the FGD paper's model (Weng et al., ATC'23), reproduced from its artifact
(`hkust-adsl/kubernetes-scheduler-simulator@8f3d641`, files named below) so that our numbers can be checked
against the authors' published results before anything MIG-specific is trusted:

* filters: CPU and host memory fit (kube-scheduler NodeResourcesFit), and a GPU with enough free share (share
  pods) or enough fully free GPUs (whole-GPU pods) (`open_gpu_share.go`);
* BestFit (`best_fit_score.go`): raw = 0.5·(cpu_left−cpu)/128000 + 0.5·(gpu_left−gpu)/8000, score =
  int((1−raw)·100), then min-max normalised to 0..100 with integer arithmetic; a share pod goes to the GPU
  with the least free share that fits (`gpusel best`);
* FGD (`fgd_score.go`, `utils/frag.go`): node fragmentation w.r.t. the *typical pods* (the most popular pod
  shapes covering 95% of the original pod list, CPU-only pods included, `generate_config_and_run.py`
  defaults), F_n = Σ_m p_m·frag_m(n); score = int(sigmoid((F_before − F_after)/1000)·100), best GPU per node;
* the scheduler takes the highest score and breaks ties uniformly at random (kube-scheduler `selectHost`).

Numpy vectorises every pod's scoring over all nodes (and, for FGD, over every GPU of every node).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from migctl.sim.workloads import NodeList, PodList

MILLI = 1000
MAX_GPUS = 8
MAX_SPEC_CPU = 128_000.0
MAX_SPEC_GPU = 8_000.0
POLICIES = ("bestfit", "fgd")

IntArray = NDArray[np.int64]
FloatArray = NDArray[np.float64]


@dataclass(frozen=True)
class TypicalPods:
    """Pod shapes (cpu, gpu_milli per GPU, number of GPUs) with their popularity p_m (sums to 1)."""

    cpu: IntArray
    milli: IntArray
    num: IntArray
    prob: FloatArray


def typical_pods(pods: PodList, threshold_pct: int = 95) -> TypicalPods:
    """The artifact's `GetTypicalPods`: most frequent shapes until `threshold_pct` of pods is covered."""
    shapes: Counter[tuple[int, int, int]] = Counter()
    for c, m, n in zip(pods.cpu_milli.tolist(), pods.gpu_milli.tolist(), pods.num_gpu.tolist(), strict=True):
        shapes[(c, m if n > 0 else 0, n)] += 1
    total = sum(shapes.values())
    # decreasing count, ties: larger (cpu, milli, num) first (sort.Reverse of the artifact's Less)
    ranked = sorted(shapes.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    chosen: list[tuple[tuple[int, int, int], int]] = []
    cum = 0
    for shape, count in ranked:
        if cum >= threshold_pct * total / 100:
            break
        chosen.append((shape, count))
        cum += count
    return TypicalPods(
        cpu=np.array([s[0] for s, _ in chosen], dtype=np.int64),
        milli=np.array([s[1] for s, _ in chosen], dtype=np.int64),
        num=np.array([s[2] for s, _ in chosen], dtype=np.int64),
        prob=np.array([c / cum for _, c in chosen], dtype=np.float64),
    )


def resample(pods: PodList, capacity_milli: int, ratio: float, rng: np.random.Generator) -> IntArray:
    """Pod indices in arrival order, as the artifact's `-tune` + `--shuffle-pod` (no departures).

    The original list is shuffled; then (ratio above its total) random pods are appended until the next one
    would push the requested GPU past `ratio` × capacity, or (ratio below) random pods are removed.
    """
    order = rng.permutation(len(pods))
    total_req = pods.num_gpu * pods.gpu_milli
    requested = int(total_req.sum())
    target = ratio * capacity_milli
    if requested > target:
        keep = list(order)
        while requested > target and keep:
            i = int(rng.integers(len(keep)))
            requested -= int(total_req[keep[i]])
            del keep[i]
        return np.array(keep, dtype=np.int64)
    extra: list[int] = []
    while True:
        i = int(rng.integers(len(pods)))
        if requested + int(pods.gpu_milli[i]) > target:  # the artifact tests the per-GPU share here
            break
        requested += int(total_req[i])
        extra.append(i)
    return np.concatenate([order, np.array(extra, dtype=np.int64)])


@dataclass
class Curve:
    """After every arriving pod: cumulative requested GPU milli and allocated GPU milli."""

    arrived: IntArray
    used: IntArray
    total_gpus: int
    placed: int
    failed: int

    def alloc_pct_at(self, arrived_pct: int) -> float:
        """The artifact's read-out: mean allocation % over records whose arrived % rounds to `arrived_pct`."""
        arr = np.rint(self.arrived / self.total_gpus / 10)
        alloc = self.used / self.total_gpus / 10
        sel = arr == arrived_pct
        if not sel.any():
            sel = (arr >= arrived_pct - 1) & (arr <= arrived_pct + 1)
        return float(alloc[sel].mean()) if sel.any() else float("nan")

    def alloc_curve(self, upto: int = 130) -> FloatArray:
        return np.array([self.alloc_pct_at(p) for p in range(upto + 1)], dtype=np.float64)


class ContinuousSim:
    """Cluster state for fractional sharing; `run()` schedules pods one by one with a policy."""

    def __init__(self, nodes: NodeList, typical: TypicalPods, rng: np.random.Generator) -> None:
        n = len(nodes)
        self.rng = rng
        # Ties go to the node that comes first in a random order drawn once per run: the artifact renames
        # nodes with a random prefix and its patched kube-scheduler fork picks among equal scores by that order
        # (a per-pod uniform draw instead loses ~5 points for FGD, see docs/simulation.md).
        self.rank = rng.permutation(n)
        self.cpu = nodes.cpu_milli.astype(np.int64).copy()
        self.mem = nodes.memory_mib.astype(np.int64).copy()
        self.ngpu = nodes.gpus.astype(np.int64)
        exists = np.arange(MAX_GPUS)[None, :] < self.ngpu[:, None]
        self.left = np.where(exists, MILLI, 0).astype(np.int64)  # (N, 8); absent GPUs have 0 free
        self.total_gpus = int(self.ngpu.sum())
        self._idx: IntArray = np.arange(n)
        gpu_types = typical.num > 0
        self.p_cpu_only = float(typical.prob[~gpu_types].sum())
        self.tg = typical.milli[gpu_types]
        self.tk = typical.num[gpu_types]
        self.tc = typical.cpu[gpu_types]
        self.tp = typical.prob[gpu_types]
        self.count = np.zeros((n, len(self.tg)), dtype=np.int64)
        self.partial = np.zeros((n, len(self.tg)), dtype=np.int64)
        self.frag = np.zeros(n, dtype=np.float64)
        for i in range(n):
            self._refresh(i)

    # -- fragmentation bookkeeping -------------------------------------------------------------------------

    def _refresh(self, i: int) -> None:
        row = self.left[i]
        ge = row[:, None] >= self.tg[None, :]
        self.count[i] = ge.sum(axis=0)
        self.partial[i] = np.where(ge, 0, row[:, None]).sum(axis=0)
        self.frag[i] = self._frag(self.cpu[i], self.count[i], self.partial[i], row.sum())

    def _frag(self, cpu: object, count: IntArray, partial: IntArray, total: object) -> FloatArray:
        """F_n(M) for arrays broadcast over candidates: Σ_m p_m · (Q-III ? partial_m : all free)."""
        cpu_a = np.asarray(cpu)[..., None]
        total_a = np.asarray(total)
        ok = (cpu_a >= self.tc) & (count >= self.tk)
        per_type = np.where(ok, partial, total_a[..., None])
        out: FloatArray = self.p_cpu_only * total_a + per_type @ self.tp
        return out

    # -- placement -------------------------------------------------------------------------------------------

    def _pick(self, scores: IntArray) -> int:
        """Index (into the current candidate list `self._idx`) of the best score; ties by the run's node order."""
        ties = np.flatnonzero(scores == scores.max())
        if len(ties) == 1:
            return int(ties[0])
        return int(ties[np.argmin(self.rank[self._idx[ties]])])

    def place(self, policy: str, cpu: int, mem: int, num: int, milli: int) -> bool:
        """Schedule one pod; returns whether it was placed."""
        share = num == 1 and milli < MILLI
        feasible = (self.cpu >= cpu) & (self.mem >= mem)
        if num == 0:
            pass
        elif share:
            feasible &= self.left.max(axis=1) >= milli
        else:
            feasible &= (self.left == MILLI).sum(axis=1) >= num
        idx = np.flatnonzero(feasible)
        if len(idx) == 0:
            return False
        self._idx = idx
        if policy == "bestfit":
            node, gpu = self._bestfit(idx, cpu, num, milli, share)
        elif policy == "fgd":
            node, gpu = self._fgd(idx, cpu, num, milli, share)
        else:
            raise ValueError(f"unknown continuous policy {policy!r}")
        self.cpu[node] -= cpu
        self.mem[node] -= mem
        if num > 0:
            if share:
                self.left[node, gpu] -= milli
            else:
                free = np.flatnonzero(self.left[node] == MILLI)[:num]
                self.left[node, free] = 0
        self._refresh(node)
        return True

    def _bestfit(self, idx: IntArray, cpu: int, num: int, milli: int, share: bool) -> tuple[int, int]:
        gpu_left = self.left[idx].sum(axis=1)
        raw = 0.5 * (self.cpu[idx] - cpu) / MAX_SPEC_CPU + 0.5 * (gpu_left - num * milli) / MAX_SPEC_GPU
        score = ((1.0 - raw) * 100).astype(np.int64)  # Go int64() truncates toward zero
        lo, hi = int(score.min()), int(score.max())
        norm = (score - lo) * 100 // (hi - lo) if hi > lo else np.zeros_like(score)
        node = int(idx[self._pick(norm)])
        gpu = -1
        if share:
            row = self.left[node]
            cand = np.where(row >= milli, row, MILLI + 1)
            gpu = int(np.argmin(cand))  # least free share that fits, lowest index on ties
        return node, gpu

    def _fgd(self, idx: IntArray, cpu: int, num: int, milli: int, share: bool) -> tuple[int, int]:
        before = self.frag[idx]
        cpu_after = self.cpu[idx] - cpu
        total = self.left[idx].sum(axis=1)
        gpu_choice = np.full(len(idx), -1, dtype=np.int64)
        if num == 0:
            after = self._frag(cpu_after, self.count[idx], self.partial[idx], total)
            score = _sig_score(before - after)
        elif share:
            lf = self.left[idx]  # (n, 8)
            l2 = lf - milli
            tg = self.tg[None, None, :]
            dcount = (l2[:, :, None] >= tg).astype(np.int64) - (lf[:, :, None] >= tg)
            dpart = np.where(l2[:, :, None] < tg, l2[:, :, None], 0) - np.where(lf[:, :, None] < tg, lf[:, :, None], 0)
            count2 = self.count[idx][:, None, :] + dcount
            part2 = self.partial[idx][:, None, :] + dpart
            after = self._frag(cpu_after[:, None], count2, part2, (total - milli)[:, None])  # (n, 8)
            gpu_scores = np.where(lf >= milli, _sig_score(before[:, None] - after), -1)
            gpu_choice = np.argmax(gpu_scores, axis=1)  # first GPU with the best score
            score = gpu_scores[np.arange(len(idx)), gpu_choice]
        else:
            # num fully free GPUs drop to 0: they leave every count and never were partial fragments
            after = self._frag(cpu_after, self.count[idx] - num, self.partial[idx], total - num * MILLI)
            score = _sig_score(before - after)
        k = self._pick(score)
        return int(idx[k]), int(gpu_choice[k])

    def run(self, policy: str, pods: PodList, order: IntArray) -> Curve:
        arrived = np.zeros(len(order), dtype=np.int64)
        used = np.zeros(len(order), dtype=np.int64)
        a = u = placed = 0
        for j, i in enumerate(order.tolist()):
            num, milli = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
            req = num * milli
            a += req
            if self.place(policy, int(pods.cpu_milli[i]), int(pods.memory_mib[i]), num, milli):
                u += req
                placed += 1
            arrived[j], used[j] = a, u
        return Curve(arrived, used, self.total_gpus, placed, len(order) - placed)


def _sig_score(delta: FloatArray) -> IntArray:
    """int(sigmoid(ΔF/1000)·100): FGD's node score (higher = less new fragmentation)."""
    out: IntArray = (100.0 / (1.0 + np.exp(-delta / 1000.0))).astype(np.int64)
    return out


def run_protocol(
    pods: PodList, nodes: NodeList, policy: str, seed: int, ratio: float = 1.3, typical: TypicalPods | None = None
) -> Curve:
    """One run of the FGD protocol: resample to `ratio` of GPU capacity, shuffle, schedule, no departures."""
    rng = np.random.default_rng(seed)
    order = resample(pods, int(nodes.gpus.sum()) * MILLI, ratio, rng)
    sim = ContinuousSim(nodes, typical or typical_pods(pods), rng)
    return sim.run(policy, pods, order)
