"""Which NVIDIA GPU Operator model a cluster runs: `GPUCluster` (nvidia.com/v1alpha1, the DRA stack, no MIG
Manager) or `ClusterPolicy` (nvidia.com/v1, device plugin and MIG Manager), never both (GPU Operator v26.7.0:
"A cluster cannot use GPUCluster and ClusterPolicy at the same time"). A duplicate GPUCluster the operator ignores
(`status.state: ignored`) does not count. From a GPUCluster, the DRA driver's `DynamicMIG` gate
(`spec.draDriver.featureGates`) says whether partitions are made on demand; from a ClusterPolicy,
`spec.migManager.enabled` whether mig-manager runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from migctl.adapters.dra import read
from migctl.adapters.dra.read import FieldError
from migctl.core.dra.devices import ObjectProblem

GPU_CLUSTER = ("nvidia.com/v1alpha1", "GPUCluster")
CLUSTER_POLICY = ("nvidia.com/v1", "ClusterPolicy")

OperatorModel = Literal["gpu-cluster", "cluster-policy", "none", "both"]


@dataclass(frozen=True)
class OperatorReading:
    """The model, the object that decides it, and what it says (None: not said, or not that model)."""

    model: OperatorModel
    name: str = ""
    dynamic_mig: bool | None = None
    mig_manager: bool | None = None
    problems: tuple[ObjectProblem, ...] = ()


def read_operator(objects: Iterable[Mapping[str, Any]]) -> OperatorReading:
    """Read GPUCluster and ClusterPolicy objects (any other kind is ignored)."""
    clusters: list[tuple[str, bool | None]] = []
    policies: list[tuple[str, bool | None]] = []
    problems: list[ObjectProblem] = []
    for i, obj in enumerate(objects):
        ident = (obj.get("apiVersion"), obj.get("kind"))
        if ident not in (GPU_CLUSTER, CLUSTER_POLICY):
            continue
        name = read.object_name(obj, f"#{i}")
        kind = str(ident[1])
        try:
            spec = read.mapping(obj.get("spec"), "spec")
            status = read.mapping(obj.get("status"), "status")
            if read.text(status.get("state"), "status.state") == "ignored":
                continue
            if ident == GPU_CLUSTER:
                dra = read.mapping(spec.get("draDriver"), "spec.draDriver")
                gates = read.mapping(dra.get("featureGates"), "spec.draDriver.featureGates")
                gate = gates.get("DynamicMIG")
                clusters.append(
                    (name, None if gate is None else read.boolean(gate, "spec.draDriver.featureGates.DynamicMIG"))
                )
            else:
                mm = read.mapping(spec.get("migManager"), "spec.migManager")
                enabled = mm.get("enabled")
                policies.append((name, None if enabled is None else read.boolean(enabled, "spec.migManager.enabled")))
        except FieldError as e:
            problems.append(ObjectProblem(kind, name, e.path, e.message))
    if clusters and policies:
        problems.append(
            ObjectProblem(
                "GPUCluster",
                clusters[0][0],
                "",
                f"ClusterPolicy {policies[0][0]} exists too: the GPU Operator runs one model per cluster",
            )
        )
        return OperatorReading("both", problems=tuple(problems))
    if clusters:
        name, gate = sorted(clusters)[0]
        return OperatorReading("gpu-cluster", name, dynamic_mig=bool(gate), problems=tuple(problems))
    if policies:
        name, enabled = sorted(policies)[0]
        return OperatorReading("cluster-policy", name, mig_manager=enabled, problems=tuple(problems))
    return OperatorReading("none", problems=tuple(problems))
