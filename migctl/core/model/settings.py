"""Planner settings: the part of migctl's configuration the pure planner reads (validated, with defaults)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from migctl.core.text.migparted_rules import NEWEST, Version, format_version, parse_version
from migctl.wire import names


class PriorClass(BaseModel):
    """One request class of a forecast prior: an exact MIG profile or an amount of VRAM, and its share."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field("", description="An exact MIG profile (`1g.10gb`), as `nvidia.com/mig-<p>` asks.")
    vram: str = Field("", description="An amount of VRAM (`7Gi`), as the VRAM resource asks.")
    weight: float = Field(1.0, gt=0, description="Relative share of this class in the mix.")

    @model_validator(mode="after")
    def _one_kind(self) -> PriorClass:
        if bool(self.profile) == bool(self.vram):
            raise ValueError("give exactly one of `profile` or `vram`")
        return self


class ForecastPrior(BaseModel):
    """A named mix of requests the forecast starts from before the cluster has shown its own (docs/planning.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(..., min_length=1, description="Shown by `migctl plan --explain`.")
    classes: tuple[PriorClass, ...] = Field(..., min_length=1, description="The request classes of the mix.")
    pods: float = Field(8.0, gt=0, description="How many recent pods' worth of evidence the prior counts as.")


class ExactSettings(BaseModel):
    """Work budget of the exact solver inside the planner (docs/planning.md, "Exact solves"). Counted in solver
    work, not seconds, so the same snapshot always gives the same plan."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Use the exact solver (HiGHS); off: the heuristic alone.")
    whole_max_gpus: int = Field(64, ge=0, description="Solve the whole instance exactly up to this many MIG GPUs.")
    whole_max_pods: int = Field(300, ge=0, description="... and when it has at most this many pending pods.")
    whole_nodes: int = Field(
        5000, ge=1, description="Branch-and-bound nodes per objective stage of the whole-instance solve."
    )
    neighbourhoods: int = Field(4, ge=0, description="Sub-problems solved exactly per plan (large neighbourhoods).")
    group_nodes: int = Field(2, ge=1, le=16, description="Cluster nodes per sub-problem.")
    neighbourhood_nodes: int = Field(200, ge=1, description="Branch-and-bound nodes per stage of a sub-problem.")
    left_per_part: int = Field(16, ge=0, description="Left-out pods added to a sub-problem (highest priority first).")
    reach_classes: int = Field(
        64, ge=0, description="Kinds of left-out pod whose reachable nodes seed sub-problems (highest priority first)."
    )
    refine_max_gpus: int = Field(
        4096,
        ge=0,
        description="Refine the plan kept with exact sub-problems up to this many MIG GPUs. Above it the "
        "`neighbourhoods` reach under 1% of the nodes, and reading the whole plan for them took a sixth of the "
        'plan\'s time at 8,000 GPUs for 0.004% less stranded memory (docs/planning.md, "Exact solves").',
    )
    forecast_max_gpus: int = Field(
        256, ge=0, description="Choose the layouts for the demand forecast exactly up to this many MIG GPUs."
    )
    forecast_nodes: int = Field(
        1000, ge=1, description="Branch-and-bound nodes per stage of that choice (the forecast term's model)."
    )

    def thorough(self) -> ExactSettings:
        """A larger budget for `migctl plan --thorough`: bigger whole instances, more and larger sub-problems."""
        return self.model_copy(
            update={
                "whole_max_gpus": max(self.whole_max_gpus, 256),
                "whole_max_pods": max(self.whole_max_pods, 2000),
                "whole_nodes": max(self.whole_nodes, 50_000),
                "neighbourhoods": max(self.neighbourhoods, 400),
                "group_nodes": max(self.group_nodes, 3),
                "neighbourhood_nodes": max(self.neighbourhood_nodes, 2000),
                "reach_classes": max(self.reach_classes, 1000),
                "left_per_part": max(self.left_per_part, 64),
                "refine_max_gpus": max(self.refine_max_gpus, 1 << 20),
                "forecast_max_gpus": max(self.forecast_max_gpus, 4096),
                "forecast_nodes": max(self.forecast_nodes, 10_000),
            }
        )


class PlannerSettings(BaseModel):
    """How the planner trades placement against disruption. Defaults are the safe ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vram_resource: str = Field(names.VRAM, description="Extended resource pods use to ask for VRAM bytes.")
    vram_annotation: str = Field(names.VRAM, description="Pod annotation stating a profile pod's real need.")
    evictions: Literal["none", "lower-priority"] = Field(
        "none", description="`lower-priority` lets the plan evict GPU pods of strictly lower priority."
    )
    max_evictions: int = Field(10, ge=0, description="Upper bound on evictions in one plan (with lower-priority).")
    allow_mig_mode_change: bool = Field(
        False,
        description="Allow switching MIG on/off (resets every GPU of the node: only on nodes with no GPU pods).",
    )
    exclude_label: str = Field(names.EXCLUDE, description="Nodes with this label set to `true` are left alone.")
    reconfigure_taint: str = Field(names.RECONFIGURING, description="Taint key migctl sets while it acts.")
    work_budget: int = Field(
        50_000_000,
        ge=1,
        description="Work units one plan may spend (a pass over the pending pods and GPUs costs one unit per pod "
        "and per GPU; not wall-clock time, so the same input gives the same plan). Past it, the best plan so far "
        "is returned and says so.",
    )
    forecast: bool = Field(
        True,
        description="Plan for the demand still to come as well (docs/planning.md, objective over time); off: for the "
        "snapshot's pods alone, the objective the exact reference proves (docs/benchmarks.md).",
    )
    forecast_half_life_pods: float = Field(
        32.0,
        gt=0,
        description="Demand forecast window: a GPU pod counts half as much as one created this many pods later.",
    )
    forecast_prior: ForecastPrior | None = Field(None, description="Optional named mix the forecast starts from.")
    preshape: bool = Field(True, description="Reshape idle GPUs nothing waits for toward the demand forecast.")
    preshape_quiet_nodes: bool = Field(
        False,
        description=(
            "Also pause a node the plan leaves alone to pre-shape its idle GPUs (else only in relabels the plan "
            "makes anyway)."
        ),
    )
    preshape_min_gain: float = Field(
        0.125,
        ge=0,
        le=1,
        description=(
            "Pre-shape a GPU only when the forecast demand its free instances serve grows by this share of its "
            "memory (a relabel pauses the whole node; docs/planning.md)."
        ),
    )
    exact: ExactSettings = Field(default_factory=ExactSettings, description="The exact solver's work budget.")


class GpuOperatorSettings(BaseModel):
    """Where the GPU Operator's mig-manager reads its config and how layouts are recorded on nodes."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    configmap_namespace: str = Field(
        "gpu-operator", description="Namespace of the GPU Operator's mig-parted ConfigMap."
    )
    configmap_name: str = Field(
        "default-mig-parted-config",
        description="The ConfigMap the current `nvidia.com/mig.config` labels are resolved in (read-only for migctl).",
    )
    configmap_key: str = Field(
        "config.yaml", description="Key holding the mig-parted config (mig-manager requires it)."
    )
    layout_annotation: str = Field(names.LAYOUT, description="migctl's record of a node's per-GPU layout.")
    mig_manager_version: str = Field(
        format_version(NEWEST),
        description=(
            "Release of the GPU Operator's mig-manager (its image tag, e.g. v0.12.2). migctl reads configs by that "
            "release's rules and never writes a profile name it cannot parse: up to v0.12.2 (GPU Operator "
            "v25.3.2 and older) that excludes the `+me.all` and `-me` profiles (docs/install.md). Releases newer "
            "than v0.15.0 are read by v0.15.0's rules."
        ),
    )

    @field_validator("mig_manager_version")
    @classmethod
    def _known_version(cls, v: str) -> str:
        return format_version(parse_version(v))  # ValueError: "... is not a release version like v0.15.0"

    @property
    def mig_parted_version(self) -> Version:
        """The rules to read and write by (mig-manager and mig-parted share releases): a release newer than
        the newest migctl knows is read by the newest known rules."""
        return min(parse_version(self.mig_manager_version), NEWEST)
