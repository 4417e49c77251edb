"""The simulator's policies, one file per competitor, and the one registry that names them (`REGISTRY`).

Each entry builds the cluster a policy starts from (MIG on, no instances, unless static: static layouts are set
before the first pod) and the policy. Adding a policy is one file here and one entry below (and its name in
`migctl/sim/names.py`, which the CLI reads without importing numpy).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import GpuModel
from migctl.core.model.settings import PlannerSettings
from migctl.sim.controller import Controller, InPlaceController
from migctl.sim.dra import DraTime
from migctl.sim.mig import Policy
from migctl.sim.named import static_layout
from migctl.sim.names import ALL_POLICIES
from migctl.sim.policies.dra import DraController, DraStaticController, DynamicMig
from migctl.sim.policies.fgd_mig import FgdMig
from migctl.sim.policies.greedy import Greedy
from migctl.sim.policies.hami import Hami
from migctl.sim.policies.nos import Nos
from migctl.sim.shapes import Shapes, best_static_mix, trace_mix
from migctl.sim.state import Cluster
from migctl.sim.timing import InPlaceTime
from migctl.sim.workloads import Job


@dataclass(frozen=True)
class Setup:
    """What a policy is built from: the trace (oracles read it), the cluster, the model, migctl's settings."""

    jobs: Sequence[Job]
    node_gpus: Sequence[int]
    model: GpuModel
    planner: PlannerSettings | None
    controller: ControllerSettings | None
    seed: int
    in_place: InPlaceTime | None
    dra: DraTime | None = None  # the DRA policies' fence latency and plugin restart

    @property
    def shapes(self) -> Shapes:
        return Shapes(self.model)

    def cluster(self, track: bool = False) -> Cluster:
        return Cluster(self.node_gpus, self.model, track=track)

    def static(self, name: str) -> Cluster:
        """Every GPU with the named config NVIDIA gives the model for `name` (`migctl/sim/named.py`)."""
        return Cluster(self.node_gpus, self.model, static_layout(self.model, name)[0])

    def best_mix(self, cl: Cluster) -> Cluster:
        """`cl` with static-best-mix's layouts (an oracle: it reads the whole trace)."""
        for g, lay in zip(cl.gpus, best_static_mix(self.shapes, self.jobs, len(cl.gpus)), strict=True):
            g.layout = Counter(dict(lay))
            if g.spots is not None:
                g.spots = dict.fromkeys(self.shapes.geo.place(lay))
        return cl


Maker = Callable[[Setup], tuple[Cluster, Policy]]

REGISTRY: dict[str, Maker] = {
    "migctl": lambda s: (s.cluster(), Controller(s.planner, s.controller)),
    "migctl-inplace": lambda s: (s.cluster(track=True), InPlaceController(s.planner, s.controller, s.in_place)),
    "static-all-1g": lambda s: (s.static("static-all-1g"), Greedy("static-all-1g")),
    "static-balanced": lambda s: (s.static("static-balanced"), Greedy("static-balanced")),
    "static-best-mix": lambda s: (s.best_mix(s.cluster()), Greedy("static-best-mix")),
    "nos": lambda s: (s.cluster(track=True), Nos(s.seed)),
    "hami": lambda s: (cl := s.cluster(), Hami(cl)),
    "first-fit": lambda s: (s.cluster(track=True), Greedy("first-fit")),
    "best-fit": lambda s: (s.cluster(track=True), Greedy("best-fit")),
    "fgd-mig": lambda s: (s.cluster(track=True), FgdMig(trace_mix(s.shapes, s.jobs))),
    "migctl-oracle-start": lambda s: (s.best_mix(s.cluster()), Controller(s.planner, s.controller)),
    "nos-stock": lambda s: (s.cluster(track=True), Nos(s.seed, busy=False)),
    "dra-dynamicmig": lambda s: (s.cluster(track=True), DynamicMig()),
    "migctl-dra": lambda s: (s.cluster(track=True), DraController(s.planner, s.controller, s.dra)),
    "migctl-dra-static": lambda s: (
        s.cluster(track=True),
        DraStaticController(s.planner, s.controller, s.in_place, s.dra),
    ),
}


def make_policy(
    name: str,
    jobs: Sequence[Job],
    node_gpus: Sequence[int],
    model: GpuModel,
    planner: PlannerSettings | None = None,
    controller: ControllerSettings | None = None,
    seed: int = 0,
    in_place: InPlaceTime | None = None,
    dra: DraTime | None = None,
) -> tuple[Cluster, Policy]:
    """The cluster a policy starts from and the policy, by name (`REGISTRY`)."""
    maker = REGISTRY.get(name)
    if maker is None:
        known = [p for p in ALL_POLICIES if p in REGISTRY]
        raise ValueError(f"unknown policy {name!r}; choose from {', '.join(known)}")
    return maker(Setup(jobs, node_gpus, model, planner, controller, seed, in_place, dra))
