"""The planning budget: how much work one `plan()` may spend, counted in work units, never in wall-clock time.

Counting work instead of seconds keeps planning deterministic: the same snapshot and settings give the same plan
on any machine and under any load. A unit is one pending pod or one GPU that a planner pass goes over, so a
pass costs (pending pods + GPUs) units; the local search inside a pass keeps its own fit-check caps
(`migctl/core/search/budgets.py`). The first pass always runs, so there is always a plan; later passes (other
strategies, the "squeaky wheel" rounds, polish, augment) run only while the budget covers them. A plan that
stopped early says so (`Plan.budget_exhausted`, a warning) and is the best plan found so far.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from migctl.core.model.cluster import Snapshot
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings


@dataclass
class WorkBudget:
    limit: int
    per_pass: int
    used: int = 0
    exhausted: bool = False

    @staticmethod
    def for_snapshot(snapshot: Snapshot, settings: PlannerSettings | None) -> WorkBudget:
        limit = (settings or PlannerSettings()).work_budget
        return WorkBudget(limit, max(1, len(snapshot.pending) + sum(len(n.gpus) for n in snapshot.nodes)))

    def take(self) -> bool:
        """Charge one pass; False (and exhausted) when it would go over the limit. The first pass always runs."""
        if self.used and self.used + self.per_pass > self.limit:
            self.exhausted = True
            return False
        self.used += self.per_pass
        return True

    def stamp(self, plan: Plan) -> Plan:
        """The plan with the work it took, and a warning when the budget cut planning short."""
        warnings = plan.warnings
        if self.exhausted:
            warnings = (
                *warnings,
                f"planning stopped at planner.work_budget={self.limit} work units ({self.used} spent, "
                f"{self.per_pass} per pass): this is the best plan found so far",
            )
        return dataclasses.replace(plan, work_units=self.used, budget_exhausted=self.exhausted, warnings=warnings)
