"""Benchmark instances: seeded random clusters and trace-derived ones, drawn as `bench.instance_spec.Instance`s.

An `Instance` is a plain description (nodes with per-GPU layouts and in-use instances, pending pods). It renders
to a `Snapshot` and to kubectl-style JSON (`bench/instance_spec.py`), which the adapter translates back to an
equivalent snapshot (the scale run checks that both give the same plan objective). This file draws them.

Families
--------
* `random`: mixed A100-40GB / A100-80GB / H100-80GB / H200 nodes of 1-8 GPUs; current layouts drawn uniformly
  from the model's valid plain layouts; GPUs idle or busy (a random non-empty subset of their instances in use);
  ~20% of nodes without per-GPU usage data (a busy node of several GPUs is then a pool of free instances, as
  the adapter sees it), ~5% frozen; pool labels, a `dedicated=training` taint on ~10%; pending pods asking for
  VRAM (70%, a GiB value from a list with values near profile boundaries) or an exact profile (30%, sometimes
  with a `migctl.io/vram` need annotation), 2 or 3 priority levels, some node selectors and tolerations.
* `hard`: oversubscribed (3-8 pods per GPU, 80% small VRAM requests), node CPU that binds (2-6 cores per GPU),
  on clusters like `random`'s (`hard_instance`).
* `openb-frac` (workloads.md W1): single-GPU pods of Alibaba openb `openb_pod_list_default.csv`
  (`num_gpu == 1`); VRAM request = ceil(`gpu_milli`/1000 × memory of the cluster's full-GPU profile), i.e. the same
  fraction of the card; one model per instance (cycling A100-40/A100-80/H100/H200); CPU and RAM requests from
  the trace; priority from `qos` (LS, Guaranteed: 1000; Burstable: 100; BE: 0); node CPU/RAM and GPUs per node
  from rows of `openb_node_list_gpu_node.csv`.
* `openb-abs` (W1b): the same pods, VRAM = ceil(`gpu_milli`/1000 × 16 GiB) (the trace's 16 GB cards), on mixed
  clusters.
* `genai-peak` (W2): VRAM = ceil(`peak_gib` × 1024) MiB of `pod_gpu_memory_summary_derived.csv` (pods that never
  used the GPU are skipped); mixed clusters; the data has no priority or CPU columns, so those are synthetic.
* `miso` (W3): per-job MiB of MISO's `memory.json` joined with `job_models.json`, on A100-40GB clusters.

Trace files are read from `$MIGCTL_BENCH_DATA` (default `../shared/data` beside the checkout);
`trace_available()` says whether they are there.
"""

from __future__ import annotations

import csv
import json
import math
import os
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

from bench.instance_spec import GIB, POOL_LABEL, GpuSpec, Instance, NodeSpec, PodSpec
from migctl.core.hardware.catalog import Catalog, GpuModel
from migctl.core.hardware.geometry import geometry

MIB = 2**20
MIXED = ("a100-40gb", "a100-80gb", "h100-80gb", "h200-141gb")
# fmt: off
VRAM_GIB = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 16, 18, 19, 20, 24, 30, 32, 35, 38, 39, 40, 45, 60, 70, 75, 79, 80,
            100, 120, 139, 150)
# fmt: on
VRAM_WEIGHTS = (6, 6, 5, 8, 6, 5, 6, 8, 3, 6, 5, 4, 6, 4, 3, 5, 4, 3, 4, 3, 2, 3, 4, 2, 2, 2, 1, 2, 2, 1, 1, 1, 1)
QOS_PRIORITY = {"LS": 1000, "Guaranteed": 1000, "Burstable": 100, "BE": 0}
TRACE_FAMILIES = ("openb-frac", "openb-abs", "genai-peak", "miso")


def data_dir() -> Path:
    return Path(os.environ.get("MIGCTL_BENCH_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data")))


def trace_available() -> bool:
    d = data_dir()
    return all(
        (d / f).is_file()
        for f in (
            "alibaba-gpu-v2023-openb/openb_pod_list_default.csv",
            "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv",
            "alibaba-v2026-genai-gpumem/pod_gpu_memory_summary_derived.csv",
            "miso-socc22-profiles/memory.json",
            "miso-socc22-profiles/job_models.json",
        )
    )


# ---------------------------------------------------------------------------------------------------------
# Generators


def _gpu(rng: random.Random, model: GpuModel, p_busy: float) -> GpuSpec:
    layout = rng.choice(geometry(model).base_layouts)
    if rng.random() >= p_busy:
        return GpuSpec(layout)
    instances = [p for p, c in layout for _ in range(c)]
    used = [p for p in instances if rng.random() < 0.5] or [rng.choice(instances)]
    return GpuSpec(layout, tuple(sorted(Counter(used).items())))


def _nodes(
    rng: random.Random,
    catalog: Catalog,
    target_gpus: int,
    models: Sequence[str],
    shapes: Sequence[tuple[int, int, int]] | None = None,
    prefix: str = "node",
    p_busy: float | None = None,
) -> list[NodeSpec]:
    """Nodes until `target_gpus` GPUs; `shapes` are (GPUs, CPU milli, memory bytes) rows to draw from."""
    out: list[NodeSpec] = []
    total = 0
    busy = rng.uniform(0.1, 0.6) if p_busy is None else p_busy
    while total < target_gpus:
        if shapes:
            n, cpu, mem = rng.choice(shapes)
            n = min(n, target_gpus - total)
        else:
            n = min(rng.randint(1, 8), target_gpus - total)
            cpu, mem = n * rng.choice((8000, 16000, 32000)), n * rng.choice((32, 64, 128)) * GIB
        model = catalog.model(rng.choice(models))
        node_busy = busy if rng.random() < 0.7 else 0.0
        out.append(
            NodeSpec(
                name=f"{prefix}-{len(out):04d}",
                model=model.id,
                gpus=tuple(_gpu(rng, model, node_busy) for _ in range(n)),
                cpu_m=cpu,
                memory=mem,
                pool=rng.choice("ab"),
                tainted=rng.random() < 0.1,
                agent=rng.random() < 0.8,
                frozen=rng.random() < 0.05,
            )
        )
        total += n
    return out


def _decorate(rng: random.Random, pod: PodSpec, nodes: Sequence[NodeSpec], catalog: Catalog) -> PodSpec:
    """Random selectors and tolerations."""
    selector: tuple[tuple[str, str], ...] = ()
    r = rng.random()
    if r < 0.15:
        selector = ((POOL_LABEL, rng.choice("ab")),)
    elif r < 0.25:
        selector = (("nvidia.com/gpu.product", catalog.model(rng.choice(nodes).model).gfd_products[0]),)
    return PodSpec(
        pod.name,
        pod.priority,
        pod.kind,
        pod.vram_mib,
        pod.profile,
        pod.need_mib,
        pod.cpu_m,
        pod.memory,
        selector,
        rng.random() < 0.15,
        pod.created,
    )


def _random_demand(rng: random.Random, name: str, prio: int, created: int, models: Sequence[GpuModel]) -> PodSpec:
    cpu = rng.choice((500, 1000, 2000, 4000, 8000))
    mem = rng.choice((2, 4, 8, 16, 32)) * GIB
    if rng.random() < 0.7:
        gib = rng.choices(VRAM_GIB, VRAM_WEIGHTS)[0]
        return PodSpec(name, prio, "vram", vram_mib=gib * 1024, cpu_m=cpu, memory=mem, created=created)
    model = rng.choice(models)
    plain = model.base_profiles
    variants = [p for p in model.profiles if p.attributes]
    prof = rng.choice(variants) if variants and rng.random() < 0.05 else rng.choice(plain)
    need = int(prof.memory_mib * rng.uniform(0.2, 1.0)) if rng.random() < 0.3 else None
    return PodSpec(name, prio, "profile", profile=prof.name, need_mib=need, cpu_m=cpu, memory=mem, created=created)


def random_instance(seed: int, catalog: Catalog, max_gpus: int = 64, max_pods: int = 300) -> Instance:
    rng = random.Random(seed)
    target = rng.randint(min(4, max_gpus), max_gpus)
    nodes = _nodes(rng, catalog, target, MIXED)
    levels = rng.choice(((0, 100), (0, 100, 1000)))
    n_pods = max(1, min(max_pods, round(target * rng.uniform(0.5, 5.0))))
    models = [catalog.model(m) for m in sorted({n.model for n in nodes})]
    pods = [
        _decorate(
            rng, _random_demand(rng, f"p{i:05d}", rng.choice(levels), rng.randrange(86400), models), nodes, catalog
        )
        for i in range(n_pods)
    ]
    return Instance(f"random-{seed}", "random", seed, tuple(nodes), tuple(pods))


SMALL_GIB = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 18, 20, 24, 30, 40)
SMALL_WEIGHTS = (8, 8, 7, 9, 7, 6, 8, 9, 4, 6, 3, 3, 2, 2, 1, 1, 1)


def hard_instance(seed: int, catalog: Catalog, max_gpus: int = 64, max_pods: int = 300) -> Instance:
    """`hard`: oversubscribed demand (3-8 pods per GPU, most of them small), node CPU that binds (2-6 cores per
    GPU against pods asking 1-8 cores), busy GPUs and pools as in `random`. More small pods than instances, and
    CPU that runs out before GPU memory does: which pods go where, and on which node's CPU, decides the count."""
    rng = random.Random(10_000 + seed)
    target = rng.randint(min(8, max_gpus), min(48, max_gpus))
    nodes = [
        replace(n, cpu_m=len(n.gpus) * rng.choice((2000, 3000, 4000, 6000)))
        for n in _nodes(rng, catalog, target, MIXED)
    ]
    gpus = sum(len(n.gpus) for n in nodes)
    levels = rng.choice(((0, 100), (0, 100, 1000)))
    n_pods = max(1, min(max_pods, round(gpus * rng.uniform(3.0, 8.0))))
    models = [catalog.model(m) for m in sorted({n.model for n in nodes})]
    pods = []
    for i in range(n_pods):
        prio = rng.choice(levels)
        cpu = rng.choice((1000, 1000, 2000, 2000, 4000, 8000))
        mem = rng.choice((2, 4, 8, 16)) * GIB
        if rng.random() < 0.8:
            gib = rng.choices(SMALL_GIB, SMALL_WEIGHTS)[0]
            pod = PodSpec(f"p{i:05d}", prio, "vram", vram_mib=gib * 1024, cpu_m=cpu, memory=mem)
        else:
            model = rng.choice(models)
            small = [p for p in model.base_profiles if p.memory_mib <= 25 * 1024] or list(model.base_profiles)
            prof = rng.choice(small)
            need = int(prof.memory_mib * rng.uniform(0.3, 1.0)) if rng.random() < 0.3 else None
            pod = PodSpec(f"p{i:05d}", prio, "profile", profile=prof.name, need_mib=need, cpu_m=cpu, memory=mem)
        pods.append(_decorate(rng, replace(pod, created=rng.randrange(86400)), nodes, catalog))
    return Instance(f"hard-{seed}", "hard", seed, tuple(nodes), tuple(pods))


# -- trace-derived ----------------------------------------------------------------------------------------


@cache
def _openb_pods() -> tuple[tuple[int, int, int, str, int], ...]:
    """(gpu_milli, cpu_milli, memory MiB, qos, creation_time) of single-GPU pods of the default openb list."""
    path = data_dir() / "alibaba-gpu-v2023-openb/openb_pod_list_default.csv"
    with path.open(encoding="utf-8") as f:
        return tuple(
            (int(r["gpu_milli"]), int(r["cpu_milli"]), int(r["memory_mib"]), r["qos"], int(r["creation_time"]))
            for r in csv.DictReader(f)
            if r["num_gpu"] == "1" and 0 < int(r["gpu_milli"]) <= 1000
        )


@cache
def _openb_shapes() -> tuple[tuple[int, int, int], ...]:
    """(GPUs, CPU milli, memory bytes) of openb GPU nodes with 1-8 GPUs."""
    path = data_dir() / "alibaba-gpu-v2023-openb/openb_node_list_gpu_node.csv"
    with path.open(encoding="utf-8") as f:
        return tuple(
            (int(r["gpu"]), int(r["cpu_milli"]), int(r["memory_mib"]) * MIB)
            for r in csv.DictReader(f)
            if 1 <= int(r["gpu"]) <= 8
        )


@cache
def _genai_peaks() -> tuple[int, ...]:
    path = data_dir() / "alibaba-v2026-genai-gpumem/pod_gpu_memory_summary_derived.csv"
    with path.open(encoding="utf-8") as f:
        return tuple(math.ceil(float(r["peak_gib"]) * 1024) for r in csv.DictReader(f) if float(r["peak_gib"]) > 0.05)


@cache
def _miso_jobs() -> tuple[int, ...]:
    d = data_dir() / "miso-socc22-profiles"
    memory = json.loads((d / "memory.json").read_text(encoding="utf-8"))
    jobs = json.loads((d / "job_models.json").read_text(encoding="utf-8"))
    out = []
    for _, spec in sorted(jobs.items(), key=lambda kv: int(kv[0])):
        model, batch = spec.split("_train")
        out.append(int(memory[model][batch]))
    return tuple(out)


def trace_instance(family: str, seed: int, catalog: Catalog, max_gpus: int = 64, max_pods: int = 300) -> Instance:
    """A trace-derived instance of `family` (see the module docstring for each mapping)."""
    rng = random.Random(f"{family}/{seed}")
    target = rng.randint(min(8, max_gpus), max_gpus)
    shapes = _openb_shapes()
    if family == "openb-frac":
        models: Sequence[str] = (MIXED[seed % len(MIXED)],)
    elif family == "miso":
        models = ("a100-40gb",)
    else:
        models = MIXED
    nodes = _nodes(rng, catalog, target, models, shapes=shapes, prefix=family)
    n_pods = max(1, min(max_pods, round(target * rng.uniform(1.0, 4.0))))
    pods: list[PodSpec] = []
    for i in range(n_pods):
        name = f"{family}-{i:05d}"
        if family in ("openb-frac", "openb-abs"):
            milli, cpu, mem, qos, created = rng.choice(_openb_pods())
            card = catalog.model(models[0]).full_profile.memory_mib if family == "openb-frac" else 16 * 1024
            vram = math.ceil(milli * card / 1000)
            pod = PodSpec(
                name,
                QOS_PRIORITY.get(qos, 0),
                "vram",
                vram_mib=vram,
                cpu_m=cpu,
                memory=mem * MIB,
                created=created % (86400 * 300),
            )
        else:
            vram = rng.choice(_genai_peaks() if family == "genai-peak" else _miso_jobs())
            pod = PodSpec(
                name,
                rng.choice((0, 100)),
                "vram",
                vram_mib=vram,
                cpu_m=rng.choice((2000, 4000, 8000)),
                memory=rng.choice((8, 16, 32)) * GIB,
                created=rng.randrange(86400),
            )
        pods.append(_decorate(rng, pod, nodes, catalog) if rng.random() < 0.3 else pod)
    return Instance(f"{family}-{seed}", family, seed, tuple(nodes), tuple(pods))


def scale_instance(
    catalog: Catalog, nodes: int = 1000, gpus_per_node: int = 8, pods: int = 10_000, seed: int = 2026
) -> Instance:
    """The scale case: `nodes` × `gpus_per_node` GPUs of the four models, `pods` pending pods.

    Per-GPU usage is as the adapter sees it from Kubernetes objects alone (no node agent): a busy node of
    several GPUs is a pool of its free instances; 40% of nodes are busy."""
    rng = random.Random(seed)
    out = []
    for i in range(nodes):
        model = catalog.model(MIXED[i % len(MIXED)])
        busy = 0.5 if rng.random() < 0.4 else 0.0
        out.append(
            NodeSpec(
                name=f"gpu-{i:05d}",
                model=model.id,
                gpus=tuple(_gpu(rng, model, busy) for _ in range(gpus_per_node)),
                cpu_m=rng.choice((96_000, 128_000)),
                memory=rng.choice((512, 1024)) * GIB,
                pool=rng.choice("ab"),
                tainted=rng.random() < 0.1,
                agent=False,
                frozen=rng.random() < 0.02,
            )
        )
    models = [catalog.model(m) for m in MIXED]
    specs = [
        _decorate(
            rng,
            _random_demand(rng, f"p{i:05d}", rng.choice((0, 100, 1000)), rng.randrange(86400), models),
            out,
            catalog,
        )
        for i in range(pods)
    ]
    return Instance(f"scale-{nodes}x{gpus_per_node}-{pods}", "scale", seed, tuple(out), tuple(specs))


def subset(instance: Instance, nodes: int, pods: int) -> Instance:
    """The first `nodes` nodes and `pods` pods of an instance (for the exact-solver size ladder)."""
    return Instance(
        f"{instance.name}[:{nodes}n,{pods}p]",
        instance.family,
        instance.seed,
        instance.nodes[:nodes],
        instance.pods[:pods],
    )
