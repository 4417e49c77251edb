"""Workload and cluster loaders for the shared traces (`../shared/data/`, see `docs/simulation.md`).

No public trace gives requested VRAM per pod at cluster scale, so every workload states how its demand was
derived (`Workload.mapping`), and every result repeats it:

* openb (Alibaba GPU v2023, the FGD trace): `gpu_milli` is a share of one GPU; VRAM = gpu_milli/1000 × the
  memory of the simulated MIG model's full instance ("same fraction of the card"). Whole-GPU pods
  (`gpu_milli` 1000) ask for the full instance on each of their `num_gpu` GPUs, all on one node.
* MISO (SoCC'22 artifact): measured MiB per model×batch (`memory.json`) for its 100-job mix; runtimes from
  `trace_100.json`; arrivals Poisson (MISO's own `exp_full.py` draws exponential gaps).
* GenAI (Alibaba v2026 GenTD26): per-pod peak GPU memory (GiB) as the request; lifetime from first/last sample.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
BUNDLED = Path(__file__).resolve().parent / "data"

OPENB = "alibaba-gpu-v2023-openb"
MISO = "miso-socc22-profiles"
GENAI = "alibaba-v2026-genai-gpumem"


def data_dir(name: str, root: Path | None = None) -> Path:
    """Where a shared data set lives (`MIGCTL_SIM_DATA` or ../shared/data next to the checkout)."""
    import os

    base = root or Path(os.environ.get("MIGCTL_SIM_DATA", str(SHARED_DATA)))
    return base / name


@dataclass(frozen=True)
class PodList:
    """Columns of a pod list (openb schema); times in seconds, -1 where unknown."""

    name: tuple[str, ...]
    cpu_milli: NDArray[np.int64]
    memory_mib: NDArray[np.int64]
    num_gpu: NDArray[np.int64]
    gpu_milli: NDArray[np.int64]
    creation: NDArray[np.int64]
    deletion: NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.name)


@dataclass(frozen=True)
class NodeList:
    name: tuple[str, ...]
    cpu_milli: NDArray[np.int64]
    memory_mib: NDArray[np.int64]
    gpus: NDArray[np.int64]
    model: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.name)


def _int(v: str, default: int = -1) -> int:
    return int(float(v)) if v not in ("", None) else default


def load_openb_pods(path: Path) -> PodList:
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    return PodList(
        name=tuple(r["name"] for r in rows),
        cpu_milli=np.array([_int(r["cpu_milli"], 0) for r in rows], dtype=np.int64),
        memory_mib=np.array([_int(r["memory_mib"], 0) for r in rows], dtype=np.int64),
        num_gpu=np.array([_int(r["num_gpu"], 0) for r in rows], dtype=np.int64),
        gpu_milli=np.array([_int(r["gpu_milli"], 0) if _int(r["num_gpu"], 0) > 0 else 0 for r in rows], np.int64),
        creation=np.array([_int(r.get("creation_time", "")) for r in rows], dtype=np.int64),
        deletion=np.array([_int(r.get("deletion_time", "")) for r in rows], dtype=np.int64),
    )


def load_openb_nodes(path: Path) -> NodeList:
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if _int(r["gpu"], 0) > 0]
    return NodeList(
        name=tuple(r["sn"] for r in rows),
        cpu_milli=np.array([_int(r["cpu_milli"], 0) for r in rows], dtype=np.int64),
        memory_mib=np.array([_int(r["memory_mib"], 0) for r in rows], dtype=np.int64),
        gpus=np.array([_int(r["gpu"], 0) for r in rows], dtype=np.int64),
        model=tuple(r["model"] for r in rows),
    )


# ---------------------------------------------------------------------------------------------------------
# MIG-mode workloads: jobs with a VRAM demand (MiB) per GPU, a GPU count, arrival and duration.


@dataclass(frozen=True)
class Job:
    """One pod of a MIG-mode workload. `vram_mib` is per GPU; `whole` asks for full GPUs (num_gpu of them)."""

    name: str
    vram_mib: int
    num_gpu: int = 1
    whole: bool = False
    arrival: float = 0.0
    duration: float | None = None  # None: runs to the end
    priority: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: tuple[Job, ...]
    mapping: str  # how demand was derived from the trace: printed with every result
    source: str
    extra: dict[str, str] = field(default_factory=dict)


def openb_jobs(
    pods: PodList, order: NDArray[np.int64], full_mib: int, *, departures: bool = False, skip_cpu_only: bool = True
) -> list[Job]:
    """Jobs from openb pods in `order`; VRAM = gpu_milli/1000 × `full_mib` (the full MIG instance's memory)."""
    jobs: list[Job] = []
    for seq, i in enumerate(order.tolist()):
        num, milli = int(pods.num_gpu[i]), int(pods.gpu_milli[i])
        if num == 0 and skip_cpu_only:
            continue
        whole = num > 0 and milli >= 1000
        vram = full_mib if whole else -(-milli * full_mib // 1000)
        dur: float | None = None
        arrival = float(seq)
        if departures and pods.creation[i] >= 0:
            arrival = float(pods.creation[i])
            if pods.deletion[i] > pods.creation[i]:
                dur = float(pods.deletion[i] - pods.creation[i])
        jobs.append(
            Job(
                f"{pods.name[i]}#{seq}",
                vram,
                max(num, 1),
                whole,
                arrival,
                dur,
                0,
                int(pods.cpu_milli[i]),
                int(pods.memory_mib[i]),
            )
        )
    return jobs


OPENB_MAPPING = "VRAM = gpu_milli/1000 x full-instance memory of the simulated model; gpu_milli=1000 -> full GPU"


def miso_workload(root: Path | None = None, seed: int = 0, mean_gap_s: float = 60.0, copies: int = 1) -> Workload:
    """MISO's 100-job mix: measured MiB per job (memory.json), runtime from trace_100.json, Poisson arrivals."""
    d = data_dir(MISO, root)
    memory = json.loads((d / "memory.json").read_text())
    models = json.loads((d / "job_models.json").read_text())
    runtime = json.loads((d / "trace_100.json").read_text())
    rng = np.random.default_rng(seed)
    jobs: list[Job] = []
    t = 0.0
    keys = sorted(models, key=int)
    for c in range(copies):
        for k in keys:
            spec = models[k]  # e.g. "resnet_train64"
            model, batch = spec.split("_train")
            mib = int(memory[model][batch]) if isinstance(memory.get(model), dict) else int(memory[spec])
            t += float(rng.exponential(mean_gap_s))
            jobs.append(Job(f"miso-{k}-{c}", mib, 1, False, t, float(runtime[k])))
    return Workload(
        "miso",
        tuple(jobs),
        "VRAM = MISO memory.json MiB per model x batch (measured on A100)",
        f"boringlee24/socc22-miso@39b1ee69 ({copies}x the 100-job mix, Poisson gaps mean {mean_gap_s:.0f} s)",
    )


def genai_workload(
    root: Path | None = None, quantile: str = "peak_gib", seed: int | None = None, jitter_s: float = 300.0
) -> Workload:
    """GenTD26 pods: request = per-pod peak (or p95) GiB; arrival/departure from the first/last sample.

    With a `seed`, every arrival moves later by a uniform draw from [0, `jitter_s`) (lifetimes kept), so seeds
    differ: 114 of the 144 pods share the trace's first sample, and the jitter decides their order and spacing.
    """
    d = data_dir(GENAI, root)
    with (d / "pod_gpu_memory_summary_derived.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    t0 = min(float(r["first_ts"]) for r in rows)
    rng = np.random.default_rng(seed) if seed is not None else None
    jobs = []
    for i, r in enumerate(sorted(rows, key=lambda r: (float(r["first_ts"]), r["container_ip"]))):
        mib = max(1, int(float(r[quantile]) * 1024))
        start, end = float(r["first_ts"]) - t0, float(r["last_ts"]) - t0
        shift = float(rng.uniform(0.0, jitter_s)) if rng is not None else 0.0
        jobs.append(Job(f"genai-{i}", mib, 1, False, start + shift, max(60.0, end - start)))
    jobs.sort(key=lambda j: j.arrival)
    how = f", arrivals jittered by U[0, {jitter_s:g}) s (seed {seed})" if seed is not None else ""
    return Workload(
        "genai",
        tuple(jobs),
        f"VRAM = GenTD26 per-pod {quantile.replace('_gib', '')} GiB (anonymised; may be scaled)",
        "alibaba/clusterdata cluster-trace-v2026-GenAI@7a6c496e" + how,
    )
