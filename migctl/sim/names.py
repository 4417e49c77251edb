"""Policy and workload names, importable without numpy (the CLI builds its options from them)."""

from __future__ import annotations

MIG_POLICIES = ("migctl", "static-all-1g", "static-balanced", "static-best-mix", "nos", "hami", "first-fit", "best-fit",
                "fgd-mig")  # fmt: skip
CONTINUOUS = ("cont-bestfit", "cont-fgd")
ALL_POLICIES = (*MIG_POLICIES, *CONTINUOUS)
WORKLOADS = ("openb-slice", "openb", "miso", "genai")
DEFAULT_RECONFIG_S = 60.0  # median of the reconfiguration time
DEFAULT_SIGMA = 0.7  # its lognormal shape (migctl.sim.timing)
