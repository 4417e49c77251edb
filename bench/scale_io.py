"""What the scale run measures around the plan (`bench.scale`): the dry run as a whole process against a
`json.load` process, the adapter's conversion after one event against a full one, and the fallback's per-GPU fit
of the instance without MIG. Each is a ratio against a baseline timed in the same run (`best_of`)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypeVar

from migctl.adapters.memo import ConversionMemo
from migctl.adapters.objects import snapshot_from_objects
from migctl.config.fallback import FallbackSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.fit import report
from migctl.fallback.capacity import fallback_view
from migctl.wire.names import VRAM as VRAM_RESOURCE

T = TypeVar("T")


def best_of(fn: Callable[[], T], repeats: int, cheap_s: float = 5.0) -> tuple[float, T]:
    """Best time of `repeats` calls; a call slower than `cheap_s` is not repeated."""
    best, out = float("inf"), None
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        if best > cheap_s:
            break
    assert out is not None
    return best, out


def without_mig(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The instance's objects as a cluster without MIG: every node an 8-GPU L4 node as GFD labels it, every
    pending pod a `schedulerName: migctl` pod of the fallback asking for its VRAM in `migctl.io/vram` (6 GiB where
    it asked for a MIG profile); the running pods are dropped (their MIG instances are gone)."""
    out: list[dict[str, Any]] = []
    for o in json.loads(json.dumps(objects)):
        if o.get("kind") == "Node":
            labels = o["metadata"]["labels"]
            for k in [k for k in labels if k.startswith("nvidia.com/mig")]:
                del labels[k]
            labels.update({"nvidia.com/gpu.product": "NVIDIA-L4", "nvidia.com/gpu.memory": "23034"})
            for part in ("capacity", "allocatable"):
                res = o["status"][part]
                for k in [k for k in res if k.startswith("nvidia.com/")]:
                    del res[k]
                res["nvidia.com/gpu"] = labels["nvidia.com/gpu.count"]
        elif o.get("kind") == "Pod":
            if o["spec"].get("nodeName"):
                continue
            o["spec"]["schedulerName"] = "migctl"
            for c in o["spec"]["containers"]:
                limits = c["resources"].setdefault("limits", {})
                vram = limits.get(VRAM_RESOURCE, "6Gi")
                c["resources"]["limits"] = {k: v for k, v in limits.items() if not k.startswith("nvidia.com/")}
                c["resources"]["limits"][VRAM_RESOURCE] = c["resources"].setdefault("requests", {})[VRAM_RESOURCE] = (
                    vram
                )
        out.append(o)
    return out


def fallback(objects: list[dict[str, Any]], catalog: Catalog) -> dict[str, Any]:
    """The fallback's best fit on the instance without MIG (`without_mig`): the view and the per-GPU fit with
    its report, as `migctl plan` shows it, against `json.loads` of those objects' text, in the same run. The fit
    reads a few GPUs per pod from lists sorted per placement signature (`core/vram/board.py`), not every GPU."""
    objs = without_mig(objects)
    text = json.dumps({"apiVersion": "v1", "kind": "List", "items": objs})
    parse_s, _ = best_of(lambda: json.loads(text), 3)
    settings = FallbackSettings()
    view_s, view = best_of(lambda: fallback_view(objs, catalog, settings, PlannerSettings()), 1)
    fit_s, rep = best_of(lambda: report(view.nodes, view.pods, settings.resource, settings.unit_bytes), 1)
    return {
        "nodes": len(rep["nodes"]),
        "pending_pods": rep["pending_pods"],
        "pods_placed": rep["pods_placed"],
        "parse_s": parse_s,
        "view_s": view_s,
        "fit_s": fit_s,
        "fit_over_parse": fit_s / parse_s,
    }


def _process_s(argv: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one whole process: on a shared machine the CPU time is
    the steadier of the two."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def dry_run(text: str, repeats: int) -> dict[str, Any]:
    """`migctl plan --snapshot FILE -o json` and `json.load` of FILE, each as a whole process, best of `repeats`
    (alternating, so a busy machine slows both alike)."""
    fd, path = tempfile.mkstemp(prefix="migctl-scale-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        load = [sys.executable, "-c", f"import json; json.load(open({path!r}))"]
        plan_cmd = [sys.executable, "-c", "from migctl.cli import main; main()", "plan", "--snapshot", path, "-o",
                    "json"]  # fmt: skip
        load_s = plan_s = load_cpu = plan_cpu = float("inf")
        for _ in range(max(1, repeats)):
            wall, cpu = _process_s(load)
            load_s, load_cpu = min(load_s, wall), min(load_cpu, cpu)
            wall, cpu = _process_s(plan_cmd)
            plan_s, plan_cpu = min(plan_s, wall), min(plan_cpu, cpu)
    finally:
        os.unlink(path)
    return {
        "load_process_s": load_s,
        "dry_run_process_s": plan_s,
        "dry_run_over_load": plan_s / load_s,
        "load_process_cpu_s": load_cpu,
        "dry_run_process_cpu_s": plan_cpu,
        "dry_run_cpu_over_load": plan_cpu / load_cpu,
    }


def incremental(objects: list[dict[str, Any]], catalog: Catalog, repeats: int) -> dict[str, Any]:
    """The adapter converting everything (a fresh memo) against converting after one pod event (one pending pod
    written again), each best of `repeats`; `one_event_same`: that snapshot equals a fresh conversion."""
    versioned = [
        {**o, "metadata": {**(o.get("metadata") or {}), "uid": f"uid-{i}", "resourceVersion": "1"}}
        for i, o in enumerate(objects)
    ]
    snapshot_from_objects(versioned, catalog)  # the mig-parted parse cached, as in a controller's later cycles
    full_s, _ = best_of(lambda: snapshot_from_objects(versioned, catalog, memo=ConversionMemo()), repeats)
    memo = ConversionMemo()
    snapshot_from_objects(versioned, catalog, memo=memo)
    pending = next(i for i, o in enumerate(versioned) if o.get("kind") == "Pod" and not o["spec"].get("nodeName"))
    one_s = float("inf")
    for n in range(max(1, repeats)):
        pod = versioned[pending]
        meta = {**pod["metadata"], "resourceVersion": str(n + 2), "annotations": {"bench/event": str(n)}}
        versioned[pending] = {**pod, "metadata": meta}
        t0 = time.perf_counter()
        snap = snapshot_from_objects(versioned, catalog, memo=memo)
        one_s = min(one_s, time.perf_counter() - t0)
    converted = dict(memo.converted)
    same = snap == snapshot_from_objects(versioned, catalog)
    return {
        "adapter_full_s": full_s,
        "adapter_one_event_s": one_s,
        "adapter_one_event_over_full": one_s / full_s,
        "adapter_one_event_converted": converted,
        "adapter_one_event_same": same,
    }
