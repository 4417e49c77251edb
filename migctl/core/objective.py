"""The planner's objective and the costs it compares, in one place (docs/planning.md, "Objective").

Compared lexicographically, smaller is better:
  1. pods placed, by priority tier, highest tier first;
  2. stranded MiB: internal waste of placed pods (instance MiB they do not need) plus the unusable MiB of every GPU
     whose layout changes;
  3. disruption: evictions, then GPUs reconfigured, then nodes touched;
  4. what stays free serves the demand to come (`migctl/core/forecast/spare.py`, the objective over time);
  5. node name and GPU index (the callers' tie-breaks), so the same snapshot always gives the same plan.

`rank` compares whole plans by 1-3 with the one key of the objective, `objective_key` (in `model/plan.py`, below
this module, so that `Plan.key` and the exact solver's neighbourhood score use it too); the greedy passes cost
each option of a pod with a `Cost` (2-4, after the strategy's own terms); the local search counts stranded MiB
with `fit_cost` and `stranded_mib` and keeps moves by `stranding` and `lowers`. Changing the objective starts
here; `migctl/core/exact/model.py` states the same terms as an integer program, stage by stage in `rank`'s order.

These terms decide the placement (`planner.place`). The objective's forecast term then chooses the layouts of
the GPUs the placement reshapes, and pre-shapes idle ones, for the demand to come, the pods left where they are
(`planner.shape`; docs/planning.md, "One objective in two parts"): its greedy is `forecast/over_time.py`, its
integer program `exact/forecast_model.py`, and what a layout serves is `forecast/spare.py`'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import ObjectiveKey, Plan

# (strategy preference, scarce-kind use, stranded MiB, evictions, GPUs reconfigured, nodes touched,
#  -usefulness of what stays free: forecast demand it serves, `spare.Completions.usefulness`)
Cost = tuple[int, int, int, int, int, int, int]
NO_COST: Cost = (0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class Option:
    """The GPU-dependent parts of one way to serve one instance: what it adds to stranded MiB beyond the pod's
    waste, the GPUs and nodes it reconfigures, and the usefulness of what the GPU keeps free."""

    unusable_delta: int
    gpus: int
    nodes: int
    useful: int
    reconfigure: bool
    mig_after: bool


def cost(waste: int, scarce: int, opt: Option, reshape_last: bool) -> Cost:
    """The cost of serving a pod's unit with `opt`, whose instance wastes `waste` MiB of the pod's need.
    `scarce` is the strategy's term before stranded memory (0 for most strategies); `reshape_last` (the strategy
    `existing-first`) ranks every reshaping option after every existing instance."""
    prefer = 1 if opt.reconfigure and reshape_last else 0
    return (prefer, scarce, waste + opt.unusable_delta, 0, opt.gpus, opt.nodes, -opt.useful)


def existing_cost(waste: int, scarce: int, useful: int) -> Cost:
    """`cost` of a free instance that exists (no change: no unusable delta, no GPU, no node), without making an
    `Option` for every candidate: the greedy's inner loop makes one only for the winner."""
    return (0, scarce, waste, 0, 0, 0, -useful)


def with_scarce(c: Cost, scarce: int) -> Cost:
    """`c` with another term before stranded memory (the scarcity and balance strategies)."""
    return (c[0], scarce, *c[2:])


def added(a: Cost, b: Cost) -> Cost:
    """The cost of two choices together (the units of a multi-instance pod on one node)."""
    p, q, r, s, t, u, v = (x + y for x, y in zip(a, b, strict=True))
    return (p, q, r, s, t, u, v)


def fit_cost(unusable_mib: int, instance_mib: int) -> int:
    """What a single-GPU fit costs (the local search's `Shapes.fit`): the instance MiB handed out plus the GPU's
    unusable MiB when it is reshaped. Less the pods' need, which is fixed for a set of pods, it is stranded MiB."""
    return unusable_mib + instance_mib


def stranded_mib(fit_cost_mib: int, need_mib: int) -> int:
    """Stranded MiB of a fit: its cost (`fit_cost`) less what the pods need (objective 2)."""
    return fit_cost_mib - need_mib


# How the local search (`migctl/core/search/`) keeps a move. Its moves that place pods never place fewer of any
# priority (objective 1 by construction: insert, swap, evacuate, drop only for a higher priority, augment); the
# others compare what the GPUs they touch strand, then how many of them are reshaped (objectives 2 and 3):
Stranding = tuple[int, int]  # (stranded MiB, GPUs reshaped) of some GPUs: smaller is better


def stranding(stranded: int, reshaped: int) -> Stranding:
    """The search's key of a placement of some GPUs (reshuffle keeps a placement whose key is smaller)."""
    return (stranded, reshaped)


def lowers(delta_mib: int) -> bool:
    """Whether a move that changes stranded MiB by `delta_mib` is kept (tidy's moves, exchanges, trades)."""
    return delta_mib < 0


def rank(result: Plan, snapshot: Snapshot) -> ObjectiveKey:
    """Sort key of the objective (smaller is better): pods placed per priority tier, highest tier first, then
    stranded MiB, evictions, GPUs and nodes reconfigured (`Plan.key`, every priority of the snapshot a tier)."""
    return result.key({p.key: p.priority for p in snapshot.pods})
