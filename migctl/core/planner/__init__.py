"""The planner: `plan(snapshot, settings) -> Plan`, from pending pods' GPU demand to per-GPU MIG layouts.

Its files follow its data (docs/architecture.md, "Where to change what"); the objective and the cost of every
option it compares are not here but one layer below, in `migctl/core/objective.py` (`rank`, `Cost`, `cost`; the
key itself is `model/plan.py`'s `objective_key`), since the local search and the exact solver compare them too:
  - `strategy.py`: the greedy's strategies as records;
  - `state.py`: one pass's state (GPUs as `Slot`s, nodes as `NodeState`s), then one layer per concern on top:
    `index.py` (signatures, heaps, views, options), `greedy.py` (placing pods), `evictions.py`, `explain.py`
    (why a pod is left out), `result.py` (the `Plan`), `improve.py` (the local search of `migctl/core/search/`);
  - `passes.py`: `Planner` (one pass) and `plan()` (the portfolio of passes, the polish, the exact solver).

Method: pods are taken highest priority first, larger demands first within a priority. Each pod goes to the
option with the lowest cost tuple among: a free instance that already exists; one more instance on a GPU this
plan already reconfigures; or reconfiguring an idle GPU. The layout of a reconfigured GPU is the *best
completion* of the instances assigned to it (`spare.Completions.best`: the valid layout containing them whose
spare instances serve the most forecast demand, then the least unusable memory). GPUs in the same state are
interchangeable, so options are costed once per state, not once per GPU; that keeps 10,000 pods on 8,000 GPUs
within about a second.
"""

from migctl.core.objective import Cost, rank
from migctl.core.planner.passes import Planner, place, plan, shape
from migctl.core.planner.strategy import STRATEGIES, Strategy

__all__ = ["STRATEGIES", "Cost", "Planner", "Strategy", "place", "plan", "rank", "shape"]
