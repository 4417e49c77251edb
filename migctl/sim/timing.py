"""How long a reconfiguration takes in the simulator: a distribution, because nobody has published one figure.

Public figures (docs/simulation.md §2 cites them): mig-parted's geometry apply takes about 1 s per GPU; the
mig-manager service ≈ 9 s on 8×B200; label to applied ≈ 21 s during a mode change; mig-manager waits up to 5 min
for each GPU component to stop. A relabel therefore costs tens of seconds to a few minutes end to end, with a
long tail. The default is a lognormal with median 60 s and σ 0.7 (p95 ≈ 190 s, p99 ≈ 300 s); `sigma` 0 gives a
fixed time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from migctl.sim.names import (
    DEFAULT_READVERTISE_S,  # the device plugin's in-process restart; its pod's: ~30 s
    DEFAULT_SIGMA,
)
from migctl.sim.names import DEFAULT_RECONFIG_S as DEFAULT_MEDIAN_S

NVML_CREATE_S = 2.0  # one GPU/compute instance created through NVML (HAMi-like agents): no component restart


@dataclass(frozen=True)
class ReconfigTime:
    """Lognormal reconfiguration time: `median_s`, shape `sigma` (0: always `median_s`), capped at `cap_s`."""

    median_s: float = DEFAULT_MEDIAN_S
    sigma: float = DEFAULT_SIGMA
    cap_s: float = 900.0  # ControllerSettings.mig_manager_timeout_s: past it migctl rolls back

    def __post_init__(self) -> None:
        if self.median_s < 0 or self.sigma < 0 or not math.isfinite(self.median_s + self.sigma):
            raise ValueError(f"reconfiguration time needs median_s >= 0 and sigma >= 0, got {self}")

    def draw(self, rng: np.random.Generator) -> float:
        if self.sigma == 0 or self.median_s == 0:
            return self.median_s
        return float(min(self.cap_s, self.median_s * math.exp(self.sigma * float(rng.standard_normal()))))

    def quantile(self, q: float) -> float:
        """The q-quantile (0 < q < 1), for the docs and the table header."""
        if self.sigma == 0:
            return self.median_s
        from statistics import NormalDist

        return min(self.cap_s, self.median_s * math.exp(self.sigma * NormalDist().inv_cdf(q)))

    def describe(self) -> str:
        if self.sigma == 0 or self.median_s == 0:
            return f"fixed {self.median_s:g} s"
        return (
            f"lognormal median {self.median_s:g} s, sigma {self.sigma:g} (p95 {self.quantile(0.95):.0f} s, "
            f"p99 {self.quantile(0.99):.0f} s)"
        )


NVML_OP_MIN_S = 0.05  # one GPU- or compute-instance create or destroy through NVML (A100, A30: 0.05-0.25 s)
NVML_OP_MAX_S = 0.25
READVERTISE_SIGMA = 0.5


@dataclass(frozen=True)
class InPlaceTime:
    """How long an in-place change holds its node: the agent's NVML operations, GPU after GPU, each uniform in
    [`op_min_s`, `op_max_s`] (a GPU instance and its compute instance are two operations, destroyed or created),
    then the re-advertise window (lognormal, median `readvertise_s`, shape `readvertise_sigma`): the device plugin
    restarts on the flipped config label, and no new pod lands on the node until allocatable lists the change.
    Nobody has measured that window, so it is a parameter (`migctl simulate --readvertise-s`)."""

    readvertise_s: float = DEFAULT_READVERTISE_S
    readvertise_sigma: float = READVERTISE_SIGMA
    op_min_s: float = NVML_OP_MIN_S
    op_max_s: float = NVML_OP_MAX_S

    def __post_init__(self) -> None:
        values = (self.readvertise_s, self.readvertise_sigma, self.op_min_s, self.op_max_s)
        if min(values) < 0 or not math.isfinite(sum(values)) or self.op_max_s < self.op_min_s:
            raise ValueError(f"in-place timing needs non-negative finite values and op_min_s <= op_max_s, got {self}")

    def draw(self, instances: int, rng: np.random.Generator) -> float:
        """Seconds the node is held for a change that destroys or creates `instances` GPU instances in all."""
        ops = 2 * instances
        nvml = float(rng.uniform(self.op_min_s, self.op_max_s, ops).sum()) if ops else 0.0
        window = self.readvertise_s
        if self.readvertise_sigma > 0 and window > 0:
            window *= math.exp(self.readvertise_sigma * float(rng.standard_normal()))
        return nvml + window

    def describe(self) -> str:
        return (
            f"NVML {self.op_min_s:g}-{self.op_max_s:g} s per operation, re-advertise lognormal median "
            f"{self.readvertise_s:g} s, sigma {self.readvertise_sigma:g}"
        )
