"""`python -m bench.compare REV`: the planner at another git revision against this checkout, back to back.

For speed work that must not change plans. Each side runs in its own process from its own tree (a temporary
`git worktree` of REV, and this checkout), and plans the same benchmark instances, built by each side's own
`bench.instances`: the quality run's instances and prefixes of the scale instance. The instances alternate
between the two sides, so load on a shared machine hits both alike. It prints, per instance, whether the two
plans are identical (a digest of assignments, layouts, reasons and summary) and the time ratio, then the
total time ratio: this checkout / REV.

.venv/bin/python -m bench.compare 121b0fc                # 100 random + 40 trace instances, 4 scale prefixes
.venv/bin/python -m bench.compare HEAD~3 --random 20 --trace 0 --no-scale
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
# (nodes, pods) prefixes of the scale instance: (1000, 10000) is the full one, (200, 4000) the overloaded one
SCALE = ((8, 80), (32, 320), (200, 2000), (1000, 10_000), (200, 4000))

# Runs inside each tree: reads "q INDEX RANDOM TRACE" (a quality instance) or "s NODES PODS" (a scale prefix)
# lines, answers one JSON line per instance.
WORKER = """
import hashlib, json, sys, time
from bench.instances import scale_instance, subset
from bench.quality import instances
try:
    from migctl.core.hardware.catalog import load_catalog
except ImportError:  # a revision before the core was grouped by domain (issue 33)
    from migctl.core.catalog import load_catalog
from migctl.core.planner import plan
catalog = load_catalog()
quality, full = None, None
for line in sys.stdin:
    kind, *args = line.split()
    if kind == "q":
        quality = quality or instances(catalog, int(args[1]), int(args[2]))
        inst = quality[int(args[0])]
    else:
        full = full or scale_instance(catalog, nodes=1000, pods=10000)
        inst = subset(full, int(args[0]), int(args[1]))
    snap = inst.snapshot(catalog)
    t0 = time.perf_counter()
    res = plan(snap)
    dt = time.perf_counter() - t0
    h = hashlib.sha256()
    for part in (res.assignments, res.nodes, res.unplaced, res.summary, res.evictions):
        h.update(repr(part).encode())
    out = {"name": inst.name, "digest": h.hexdigest()[:16], "s": dt, "objective": list(res.objective())}
    print(json.dumps(out), flush=True)
"""


def _start(tree: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER],
        cwd=tree,
        env={"PYTHONPATH": str(tree), "PATH": "/usr/bin:/bin", "MIGCTL_BENCH_DATA": str(_data_dir())},
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _data_dir() -> Path:
    from bench.instances import data_dir

    return data_dir().resolve()


def _ask(proc: subprocess.Popen[str], job: str) -> dict[str, Any]:
    stdin: IO[str] | None = proc.stdin
    stdout: IO[str] | None = proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(job + "\n")
    stdin.flush()
    line = stdout.readline()
    if not line:
        raise RuntimeError(f"the worker for {job!r} died (exit {proc.wait()})")
    out: dict[str, Any] = json.loads(line)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.compare", description=__doc__.splitlines()[0] if __doc__ else "")
    ap.add_argument("rev", help="git revision to compare this checkout against")
    ap.add_argument("--random", type=int, default=100, help="random quality instances (default 100)")
    ap.add_argument("--trace", type=int, default=40, help="trace-derived instances (default 40)")
    ap.add_argument("--no-scale", action="store_true", help="skip the scale prefixes")
    a = ap.parse_args(argv)
    # a stopped comparison must still remove its worktree: SIGTERM unwinds like an exception, through `finally`
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        return _compare(a)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _compare(a: argparse.Namespace) -> int:
    jobs = [f"q {i} {a.random} {a.trace}" for i in range(a.random + a.trace)]
    jobs += [] if a.no_scale else [f"s {n} {p}" for n, p in SCALE]
    with tempfile.TemporaryDirectory(prefix="migctl-compare-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(base), a.rev], cwd=ROOT, check=True)
        procs: list[subprocess.Popen[str]] = []
        try:
            old, new = _start(base), _start(ROOT)
            procs = [old, new]
            same = 0
            total = {"old": 0.0, "new": 0.0}
            differ: list[str] = []
            for i, job in enumerate(jobs):
                if i % 2 == 0:  # alternate which side goes first
                    o, n = _ask(old, job), _ask(new, job)
                else:
                    n, o = _ask(new, job), _ask(old, job)
                if o["name"] != n["name"]:
                    raise SystemExit(f"the two sides built different instances: {o['name']} vs {n['name']}")
                same += o["digest"] == n["digest"]
                if o["digest"] != n["digest"]:
                    differ.append(o["name"])
                total["old"] += o["s"]
                total["new"] += n["s"]
                flag = "same" if o["digest"] == n["digest"] else "DIFFERENT"
                print(
                    f"  {o['name']:<32} {flag:<9} {o['s']:8.3f} s -> {n['s']:8.3f} s  ({n['s'] / o['s']:.2f}x)"
                    f"  (placed, stranded MiB) {tuple(o['objective'])} -> {tuple(n['objective'])}",
                    flush=True,
                )
            for proc in (old, new):
                assert proc.stdin is not None
                proc.stdin.close()
                proc.wait()
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            subprocess.run(["git", "worktree", "remove", "--force", str(base)], cwd=ROOT, check=False)
    print(f"\n{same}/{len(jobs)} plans identical" + (f"; different: {', '.join(differ)}" if differ else ""))
    ratio = total["new"] / total["old"]
    print(f"total: {a.rev} {total['old']:.1f} s, this checkout {total['new']:.1f} s: {ratio:.2f}x")
    return 0 if same == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
