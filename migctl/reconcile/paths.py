"""The actuation paths, as records: what each path is called, which guard rails bind it, when it must refuse a
node, how it fences the GPUs it changes, and what it can carry out of a planned change.

A node takes one path (`path_of`): the stock path through the GPU Operator's mig-manager by default, or the
in-place path where the node opts in (`migctl.io/actuation=in-place`, or `controller.in_place_node_selector`).
A node whose GPUs NVIDIA's DRA driver serves takes a DRA path whatever its labels: `dra` (static MIG: migctl's
agent re-cuts free instances, one GPU fenced by DeviceTaintRules, the driver's plugin restarted) or `dynamic-mig`
(the driver makes partitions itself: migctl only fences first-fit's bad choices and never actuates). A new path
is one more record here and its executor; the reconcile reads only these fields.

Why the in-place path refuses (frozen for the planner, one Event): something else would also change the node's
MIG instances: the GPU Operator's mig-manager (it re-applies its label's layout whenever its pod starts, and
pauses the node to do so) unless `nvidia.com/gpu.deploy.mig-manager=false`, and the components
`in_place_conflicts` names (HAMi's device plugin by default): they destroy instances they did not create.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from migctl.config import ControllerSettings
from migctl.config.selector import LabelSelector
from migctl.core.model.plan import NodePlan
from migctl.reconcile.reasons import Code, Reason
from migctl.wire.names import ACTUATION, DEPLOY_MIG_MANAGER, DRA, DYNAMIC, IN_PLACE, MIG_MANAGER, opts_in_place


class Fence(StrEnum):
    """How a path keeps new pods off what it changes while it changes it."""

    NODE_TAINT = "node-taint"  # migctl's NoSchedule taint on the whole node (planner.reconfigure_taint)
    DEVICE_TAINT = "device-taint"  # DeviceTaintRules on the changed GPUs' devices only (DRA)


@dataclass(frozen=True)
class Rails:
    """One path's guard rails, with the settings' names they come from (`prefix`), for the messages."""

    prefix: str
    cooldown_s: float
    min_dwell_s: float
    max_concurrent_nodes: int
    batch_stable_s: float
    batch_max_s: float

    def setting(self, name: str) -> str:
        return self.prefix + name


def stock_rails(s: ControllerSettings) -> Rails:
    return Rails("", s.cooldown_s, s.min_dwell_s, s.max_concurrent_nodes, s.batch_stable_s, s.batch_max_s)


def in_place_rails(s: ControllerSettings) -> Rails:
    """An in-place change moves no running pod and holds its node for seconds: the stock path's minutes (against
    flapping between relabels that pause a node) are not its rails."""
    return Rails(
        "in_place_",
        s.in_place_cooldown_s,
        s.in_place_min_dwell_s,
        s.in_place_max_concurrent_nodes,
        s.in_place_batch_stable_s,
        s.in_place_batch_max_s,
    )


def no_refusal(labels: Mapping[str, str], annotations: Mapping[str, str], s: ControllerSettings) -> Reason | None:
    return None


def conflict(labels: Mapping[str, str], annotations: Mapping[str, str], s: ControllerSettings) -> Reason | None:
    """A component `in_place_conflicts` names manages the node's MIG instances (None: none does)."""
    for term in s.in_place_conflicts:
        key, has_value, value = term.partition("=")
        for where, found in (("label", labels), ("annotation", annotations)):
            if key in found and (not has_value or found[key] == value):
                return Reason(
                    Code.REFUSED,
                    f"refusing the in-place path: node {where} {term} (controller.in_place_conflicts) says another "
                    "component manages this node's MIG instances (HAMi's device plugin, a DRA driver); it would "
                    f"destroy instances it did not create. Take the node off that component or remove {ACTUATION}",
                )
    return None


def in_place_refusal(labels: Mapping[str, str], annotations: Mapping[str, str], s: ControllerSettings) -> Reason | None:
    """Why migctl must not act in place on this node (None when it may); the text says what to set."""
    deploy = labels.get(DEPLOY_MIG_MANAGER)
    if deploy != "false":
        return Reason(
            Code.REFUSED,
            f"refusing the in-place path: {DEPLOY_MIG_MANAGER}={deploy or '<unset>'}: the GPU Operator's mig-manager "
            "would re-apply its own layout when its pod starts; set the node label "
            f"{DEPLOY_MIG_MANAGER}=false (or remove {ACTUATION}={IN_PLACE} to use the mig-manager path)",
        )
    return conflict(labels, annotations, s)


def dra_refusal(labels: Mapping[str, str], annotations: Mapping[str, str], s: ControllerSettings) -> Reason | None:
    """A static-MIG DRA node: refused where mig-manager runs (ClusterPolicy beside a standalone DRA driver) or
    another component manages its MIG instances."""
    if labels.get(DEPLOY_MIG_MANAGER) == "true":
        return Reason(
            Code.REFUSED,
            f"refusing the dra path: {DEPLOY_MIG_MANAGER}=true: the GPU Operator's mig-manager would re-apply its own "
            f"layout; set {DEPLOY_MIG_MANAGER}=false, or remove {ACTUATION}={IN_PLACE} to leave the node's MIG "
            "devices as they are",
        )
    return conflict(labels, annotations, s)


def dynamic_refusal(labels: Mapping[str, str], annotations: Mapping[str, str], s: ControllerSettings) -> Reason | None:
    """A DynamicMIG node opted into migctl's agent: refused, since the driver destroys the partitions it did not
    create (migctl still steers it where the node is not opted in)."""
    if opts_in_place(labels):
        return Reason(
            Code.REFUSED,
            f"refusing {ACTUATION}={IN_PLACE}: this node's DRA driver runs DynamicMIG, which destroys MIG partitions "
            f"it did not create; remove the {ACTUATION} label (migctl then steers its first-fit allocator with "
            "DeviceTaintRules) or turn DynamicMIG off in the driver's feature gates",
        )
    return None


Refusal = Callable[[Mapping[str, str], Mapping[str, str], ControllerSettings], Reason | None]


@dataclass(frozen=True)
class Path:
    """One actuation path. `re_cuts_busy`: the planner may re-cut the free part of a busy GPU (placements exact:
    the node's agent reports every instance where it sits); `evicts`, `flips_mig_mode`: what of a planned change
    the path can carry out; `actuates`: False where the plan's changes happen without migctl (DynamicMIG makes
    each partition at allocation), so a changed node there is neither started nor held."""

    name: str
    fence: Fence
    evicts: bool
    flips_mig_mode: bool
    re_cuts_busy: bool
    rails: Callable[[ControllerSettings], Rails]
    refusal: Refusal
    actuates: bool = True

    @property
    def steers(self) -> bool:
        """Its GPUs' changes happen at allocation, steered by fences (DynamicMIG)."""
        return not self.actuates and self.fence is Fence.DEVICE_TAINT

    def cannot(self, node_plan: NodePlan, evictions: tuple[str, ...]) -> Reason | None:
        """What this path cannot carry out of a planned node change (None: it can)."""
        if evictions and not self.evicts:
            return Reason(
                Code.PATH_CANNOT,
                f"the {self.name} path does not evict: the plan's evictions wait for a plan without them",
            )
        modes = [g.index for g in node_plan.gpus if g.changed and g.current.mig_enabled != g.target.mig_enabled]
        if modes and not self.flips_mig_mode:
            return Reason(
                Code.PATH_CANNOT, f"the {self.name} path never changes MIG mode (GPU {', '.join(map(str, modes))})"
            )
        return None


STOCK = Path(MIG_MANAGER, Fence.NODE_TAINT, True, True, False, stock_rails, no_refusal)
IN_PLACE_PATH = Path(IN_PLACE, Fence.NODE_TAINT, False, False, True, in_place_rails, in_place_refusal)
DRA_STATIC = Path(DRA, Fence.DEVICE_TAINT, False, False, True, in_place_rails, dra_refusal)
DYNAMIC_MIG = Path(DYNAMIC, Fence.DEVICE_TAINT, False, False, True, in_place_rails, dynamic_refusal, actuates=False)
PATHS: Mapping[str, Path] = {p.name: p for p in (STOCK, IN_PLACE_PATH, DRA_STATIC, DYNAMIC_MIG)}


def path_of(labels: Mapping[str, str], selector: LabelSelector, dra: str = "") -> Path:
    """The path of a node: a DRA path where NVIDIA's DRA driver serves its GPUs (`dra`: the snapshot's
    `Node.dra`), else in place where its label or the config's selector opts it in, else the stock path. The one
    reading of the opt-in (the snapshot's `Node.in_place` is `path_of(...).re_cuts_busy`)."""
    if dra == "dynamic":
        return DYNAMIC_MIG
    if dra == "static":
        return DRA_STATIC
    return IN_PLACE_PATH if opts_in_place(labels) or selector.matches(labels) else STOCK


def opted_in(labels: Mapping[str, str], selector: LabelSelector) -> bool:
    """Whether a node opts into migctl's agent: the label or the config's selector (the snapshot's reading of
    `Node.in_place` on device-plugin nodes, and of the opt-in on static-MIG DRA nodes)."""
    return path_of(labels, selector).re_cuts_busy
