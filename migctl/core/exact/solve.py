"""Solve a `Model` stage by stage with HiGHS (`highspy`), within a work budget.

Each stage minimises its term with the optimum (or, out of budget, the best value found) of every earlier stage
fixed as a row, so the result is lexicographically optimal when every stage is proven. The budget is a count of
branch-and-bound nodes per stage, not seconds: HiGHS runs single-threaded with a fixed seed, so the same model
always gives the same solution. A warm start (a feasible solution, e.g. the heuristic's plan) is handed to the
first stage; every later stage starts from the solution of the one before, so no stage ends worse than its start.
All objective coefficients are integers, so an absolute gap below 1 proves a stage optimal.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.util import find_spec
from typing import TYPE_CHECKING

from migctl.core.exact.model import Model

if TYPE_CHECKING:
    import highspy

# A runtime dependency, but the planner falls back to its heuristic alone without it. Imported by the first solve:
# HiGHS and numpy take a tenth of a second to load, which every `migctl` command paid, solving or not.
AVAILABLE = find_spec("highspy") is not None and find_spec("numpy") is not None


@dataclass(frozen=True)
class StageResult:
    name: str
    value: int
    proven: bool


@dataclass(frozen=True)
class Solution:
    x: tuple[int, ...]  # every variable, rounded
    stages: tuple[StageResult, ...]

    @property
    def proven(self) -> bool:
        return all(s.proven for s in self.stages)


def _highs(model: Model, nodes: int, time_limit: float | None, presolve: bool = True) -> highspy.Highs:
    import highspy  # loaded by `solve`
    import numpy as np

    h = highspy.Highs()  # type: ignore[no-untyped-call]
    options: tuple[tuple[str, bool | int | float | str], ...] = (
        ("output_flag", False),
        ("threads", 1),
        ("random_seed", 0),
        ("mip_rel_gap", 0.0),
        ("mip_abs_gap", 0.999),
        ("mip_max_nodes", max(1, nodes)),
        ("presolve", "on" if presolve else "off"),
    )
    for name, value in options:
        h.setOptionValue(name, value)
    if time_limit is not None:
        h.setOptionValue("time_limit", max(0.01, time_limit))
    lp = highspy.HighsLp()
    n = model.size
    lp.num_col_ = n
    lp.num_row_ = len(model.rows)
    lp.col_cost_ = np.zeros(n)
    lp.col_lower_ = np.asarray(model.lb, dtype=float)
    lp.col_upper_ = np.asarray(model.ub, dtype=float)
    lp.row_lower_ = np.asarray([lo for _, lo, _ in model.rows], dtype=float)
    lp.row_upper_ = np.asarray([hi for _, _, hi in model.rows], dtype=float)
    start, index, coef = [0], [], []
    for coefs, _, _ in model.rows:
        for j in sorted(coefs):
            index.append(j)
            coef.append(coefs[j])
        start.append(len(index))
    lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
    lp.a_matrix_.num_col_ = n
    lp.a_matrix_.num_row_ = len(model.rows)
    lp.a_matrix_.start_ = np.asarray(start, dtype=np.int32)
    lp.a_matrix_.index_ = np.asarray(index, dtype=np.int32)
    lp.a_matrix_.value_ = np.asarray(coef, dtype=float)
    lp.integrality_ = [highspy.HighsVarType.kInteger] * n
    h.passModel(lp)
    return h


def _value(coefs: dict[int, float], x: Sequence[float]) -> int:
    return round(sum(c * x[j] for j, c in coefs.items()))


def solve(
    model: Model,
    nodes: int = 1000,
    start: Sequence[int] | None = None,
    time_limit: float | None = None,
    stop_unproven: bool = False,
    presolve: bool = True,
) -> Solution | None:
    """Every stage in order with `nodes` branch-and-bound nodes each; None when no feasible solution is known.

    `time_limit` (seconds, all stages together) is for the benchmark's reference only: it makes results depend on
    the machine. `stop_unproven` stops after the first stage not proven optimal (its solution is still kept).
    `presolve` off saves a quarter of the time of a small sub-problem's solve."""
    if not AVAILABLE:
        return None
    try:
        import highspy
        import numpy as np
    except ImportError:  # pragma: no cover - installed but broken: the heuristic plans alone
        return None
    if model.size == 0:
        return Solution((), tuple(StageResult(s.name, 0, True) for s in model.stages))
    t0 = time.perf_counter()
    h = _highs(model, nodes, time_limit, presolve)
    x: list[float] | None = None if start is None else [float(v) for v in start]
    results: list[StageResult] = []
    n = model.size
    for stage in model.stages:
        if not stage.coefs:
            results.append(StageResult(stage.name, 0, True))
            continue
        if time_limit is not None:
            left = time_limit - (time.perf_counter() - t0)
            if left <= 0:
                break
            h.setOptionValue("time_limit", left)
        if x is not None and _value(stage.coefs, x) <= stage.bound:
            proven = True  # the start is as good as any solution can be
        else:
            h.setOptionValue("mip_max_nodes", max(1, round(nodes * stage.effort)))
            cost = np.zeros(n)
            for j, c in stage.coefs.items():
                cost[j] = c
            h.changeColsCost(n, np.arange(n, dtype=np.int32), cost)
            if x is not None:
                sol = highspy.HighsSolution()
                sol.col_value = list(x)
                sol.value_valid = True
                h.setSolution(sol)
            h.run()
            status = h.getModelStatus()
            got = h.getSolution()
            found = bool(got.value_valid) and len(got.col_value) == n
            if found:
                cand = [float(v) for v in got.col_value]
                if x is None or _value(stage.coefs, cand) <= _value(stage.coefs, x):
                    x = cand
            if x is None:
                return None
            proven = status == highspy.HighsModelStatus.kOptimal and found
        value = _value(stage.coefs, x)
        results.append(StageResult(stage.name, value, proven))
        cols = sorted(stage.coefs)
        h.addRow(-np.inf, value + 0.5, len(cols), np.asarray(cols, dtype=np.int32),
                 np.asarray([stage.coefs[j] for j in cols], dtype=float))  # fmt: skip
        if stop_unproven and not proven:
            break
    if x is None:
        return None
    return Solution(tuple(round(v) for v in x), tuple(results))
