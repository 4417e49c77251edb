"""Policy and workload names, importable without numpy (the CLI builds its options from them)."""

from __future__ import annotations

MIG_POLICIES = ("migctl", "migctl-inplace", "static-all-1g", "static-balanced", "static-best-mix", "nos", "hami",
                "first-fit", "best-fit", "fgd-mig")  # fmt: skip
CONTINUOUS = ("cont-bestfit", "cont-fgd")
# What-if variants for analysis, never in the default comparison: `migctl-oracle-start` is migctl started from
# static-best-mix's layouts at no cost (the cold start solved by an oracle), docs/simulation.md section 4.1;
# `nos-stock` is nos's partitioner re-cutting only idle GPUs, the stock mig-manager's rule (section 4.3).
ANALYSIS = ("migctl-oracle-start", "nos-stock")
# DRA clusters (docs/simulation.md, "DRA clusters"): NVIDIA's DynamicMIG alone, migctl's fences on it, and migctl's
# DRA path on static-MIG nodes. Not in the default comparison: they model other nodes than the rest.
DRA_POLICIES = ("dra-dynamicmig", "migctl-dra", "migctl-dra-static")
DEFAULT_POLICIES = (*MIG_POLICIES, *CONTINUOUS)
ALL_POLICIES = (*DEFAULT_POLICIES, *ANALYSIS, *DRA_POLICIES)
WORKLOADS = ("openb-slice", "openb", "miso", "genai")
DEFAULT_RECONFIG_S = 60.0  # median of the reconfiguration time
DEFAULT_SIGMA = 0.7  # its lognormal shape (migctl.sim.timing)
DEFAULT_READVERTISE_S = 5.0  # median of the in-place path's re-advertise window (migctl.sim.timing.InPlaceTime)
DEFAULT_DRA_RESTART_S = 5.0  # median of the static-MIG DRA kubelet plugin's restart (migctl.sim.dra.DraTime)
DEFAULT_DRA_FENCE_S = 1.0  # a DeviceTaintRule written until the scheduler honours it
