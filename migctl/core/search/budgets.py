"""Every work cap of the local search, in one place: counts of fit checks (and of GPUs, nodes or pairs looked
at), never seconds, so the same snapshot gives the same plan on any machine.

The planner's passes have their own budget (`migctl/core/budget.py`, `planner.work_budget`), and so does the exact
solver (`ExactSettings` in `migctl/core/model/settings.py`). The figures below were chosen on the benchmark instances
(docs/benchmarks.md); code reads them through this module (`budgets.X`), so a test can lower one.
"""

from __future__ import annotations

# -- the whole search of one planner pass -------------------------------------------------------------------
IMPROVE_BUDGET = 20_000  # fit checks the local search may spend: this base ...
IMPROVE_BUDGET_PER_POD = 500  # ... plus this per pending pod
IMPROVE_MAX = 400_000  # ... at most
TIDY_PROBES = 50_000  # of that budget, at most this much for a round that only lowers stranded memory
# A pass that left out no pod the search could place runs it for tidy alone (objective 2) only up to this many
# MIG GPUs. Above, TIDY_PROBES reach a few dozen of the pods' kinds (34 at 1,000 nodes x 8 GPUs, where it moved
# nothing) while modelling every GPU and writing it back costs a sixth of `plan()` (docs/planning.md).
TIDY_MAX_GPUS = 4096
CHAIN_PROBES = 2_500  # per tidy round of every pass, for exchanges
PASS_REPACK = 20_000  # `LocalSearch.repacks` after tidy in every pass (fit checks, pairs and partners looked at)
PASS_AUGMENT = 50_000  # `LocalSearch.augment_all`'s work at the end of every pass (fit checks)

# -- the polish and augment of the plan `plan()` keeps ---------------------------------------------------------
POLISH_REPACK = 100_000  # repack's share in the polish
POLISH_CHAIN_PROBES = 10_000  # per round of the polish, for exchanges and for trades
POLISH_RESHUFFLE = 100_000  # `LocalSearch.reshuffle`'s work in the polish (fit checks, nodes looked at)
AUGMENT_WORK = 200_000  # `LocalSearch.augment_all`'s work on the plan `plan()` keeps

# -- per move --------------------------------------------------------------------------------------------------
REPACK_PROBES = 300  # fit checks per node or node pair that `_repack` tries
RESHUFFLE_PROBES = 10_000  # fit checks per node or node pair that `_best_fill` tries
RESHUFFLE_PARTNERS = 8  # nodes paired with each node `reshuffle` takes, most surplus first
AUGMENT_PROBES = 10_000  # fit checks and GPUs looked at per left-out pod that `augment` tries
TWO_FOR_ONE_TRIES = 4  # pods of the placed pod's priority that `augment` tries to leave out (`_two_for_one`)
