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

from migctl.sim.names import DEFAULT_RECONFIG_S as DEFAULT_MEDIAN_S
from migctl.sim.names import DEFAULT_SIGMA

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
