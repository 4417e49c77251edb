"""Planner settings: the part of migctl's configuration the pure planner reads (validated, with defaults)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


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
            }
        )


class PlannerSettings(BaseModel):
    """How the planner trades placement against disruption. Defaults are the safe ones."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    vram_resource: str = Field("migctl.io/vram", description="Extended resource pods use to ask for VRAM bytes.")
    vram_annotation: str = Field("migctl.io/vram", description="Pod annotation stating a profile pod's real need.")
    evictions: Literal["none", "lower-priority"] = Field(
        "none", description="`lower-priority` lets the plan evict GPU pods of strictly lower priority."
    )
    max_evictions: int = Field(10, ge=0, description="Upper bound on evictions in one plan (with lower-priority).")
    allow_mig_mode_change: bool = Field(
        False,
        description="Allow switching MIG on/off (resets every GPU of the node: only on nodes with no GPU pods).",
    )
    exclude_label: str = Field("migctl.io/exclude", description="Nodes with this label set to `true` are left alone.")
    reconfigure_taint: str = Field("migctl.io/reconfiguring", description="Taint key migctl sets while it acts.")
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
    layout_annotation: str = Field("migctl.io/layout", description="migctl's record of a node's per-GPU layout.")
