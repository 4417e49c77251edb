"""The agent's in-place loop, on nodes opted into the in-place path (`agent.in_place: true`).

Each tick reads the agent's own Node. When `migctl.io/in-place-target` carries a plan id that the status does not
answer yet, the target is applied with the same engine as `migctl agent apply`; if any instance was created or
destroyed, the device plugin is made to re-enumerate by flipping the node's `nvidia.com/device-plugin.config`
label between two named configs of identical content (the plugin's config-manager SIGHUPs the plugin only when
the value changes); then `migctl.io/in-place-status` answers the plan: applied, blocked or failed, with what each
GPU of the target now holds. An answered plan id is never applied again.

On start the loop first undoes a change an earlier run left half done (the journal), then rebuilds the last
applied layout on GPUs that came back empty (a reboot or driver reload); if either changed anything, the first tick
re-advertises, once, together with the change it applies (if any). Two flips in a row (a -> b -> a) can reach the
config-manager as no change at all, and the plugin would then advertise neither. Every write is a merge patch of the
agent's own Node.

On a node whose GPUs NVIDIA's DRA driver serves (`dra`, agent.dra.enabled; `agent/dra.py`) the same loop answers the
same targets, with three differences: the re-advertise deletes the node's own DRA kubelet-plugin pod instead of the
label flip (the plugin does not rescan NVML; its DaemonSet's next pod does); instances allocated to ResourceClaims
count as in use; and a node whose slices show DynamicMIG is answered `failed` with why, nothing changed, and no
layout is rebuilt there at start (that driver destroys partitions it did not create).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import AgentApi
from migctl.agent.apply import BLOCKED, OK, Applier, Result
from migctl.agent.dra import DYNAMIC_REFUSAL, DraAwareKubelet, DraError, DraNode
from migctl.errors import MigctlError
from migctl.wire.inplace import Held, State, Status, Target, UnknownVersionError, decode_status, decode_target
from migctl.wire.inplace import encode_status as encode
from migctl.wire.names import DEPLOY_MIG_MANAGER, DEVICE_PLUGIN_CONFIG, IN_PLACE_STATUS, IN_PLACE_TARGET

log = logging.getLogger(__name__)


class InPlaceLoop:
    def __init__(
        self, kube: AgentApi, node: str, applier: Applier, configs: tuple[str, str], dra: DraNode | None = None
    ) -> None:
        """With `dra`, the applier's view of what is in use also reads the node's claims (on DRA nodes)."""
        self.kube, self.node, self.applier, self.configs, self.dra = kube, node, applier, configs, dra
        self.answered: set[str] = set()
        self.pending = False  # a re-advertise owed since start (a recovery or rebuild changed the instances)
        self.usage: DraAwareKubelet | None = None
        if dra is not None:
            self.usage = applier.kubelet = DraAwareKubelet(applier.kubelet, dra)

    def start(self) -> list[str]:
        """Undo a half-done change, rebuild after a reboot (not on a DynamicMIG node), re-advertise if either did
        something."""
        notes = self.applier.recover()
        if self._may_rebuild():
            notes += self.applier.rebuild()
        for note in notes:
            log.warning("%s", note)
        self.pending = self.pending or bool(notes)  # the first tick flips, once, with whatever it applies
        return notes

    def _may_rebuild(self) -> bool:
        if self.dra is None:
            return True
        try:
            view = self.dra.view()
        except KubeError as e:  # unknown: creating instances the driver might destroy is worse than waiting
            log.error("node %s: DRA objects unreadable (%s); not rebuilding the last applied layout", self.node, e)
            return False
        if view.dynamic or view.unreadable:
            why = "DynamicMIG" if view.dynamic else f"ResourceSlices unreadable ({view.unreadable})"
            log.warning("node %s: %s; not rebuilding the last applied layout", self.node, why)
            return False
        return True

    def tick(self) -> Status | None:
        """Apply the node's target once; the status written, or None when there was nothing to answer."""
        node = self.kube.read_node(self.node)
        status = self._answer(node)
        if self.pending:  # owed since start, and not paid by an apply above
            try:
                self.readvertise(self.kube.read_node(self.node))
                self.pending = False
            except (KubeError, DraError) as e:
                log.error("node %s: re-advertise after start failed (tried again next tick): %s", self.node, e)
        return status

    def _answer(self, node: Mapping[str, Any]) -> Status | None:
        annotations: Mapping[str, str] = (node.get("metadata") or {}).get("annotations") or {}
        raw = annotations.get(IN_PLACE_TARGET)
        if not raw:
            return None
        try:
            target = decode_target(raw)
        except UnknownVersionError as e:
            log.error("node %s: %s; leaving the GPUs alone", self.node, e)
            return None
        except (ValueError, TypeError) as e:
            log.error("node %s: unreadable %s (%s); leaving the GPUs alone", self.node, IN_PLACE_TARGET, e)
            return None
        if target.plan in self.answered or self._answered(annotations.get(IN_PLACE_STATUS), target.plan):
            self.answered.add(target.plan)
            return None
        labels: Mapping[str, str] = (node.get("metadata") or {}).get("labels") or {}
        if labels.get(DEPLOY_MIG_MANAGER) == "true":  # both would change the same GPUs; mig-manager re-applies its own
            message = f"mig-manager runs on this node: set {DEPLOY_MIG_MANAGER}=false to act in place"
            status = Status(target.plan, "failed", message)
        else:
            status = self._dra_refusal(target.plan) or self._apply(target)
        self.kube.patch_node(self.node, {"metadata": {"annotations": {IN_PLACE_STATUS: encode(status)}}}, "answer")
        self.answered.add(target.plan)
        log.info("node %s: plan %s %s %s", self.node, target.plan, status.state, status.message)
        return status

    @staticmethod
    def _answered(raw: str | None, plan: str) -> bool:
        if not raw:
            return False
        try:
            status = decode_status(raw)
        except (ValueError, TypeError):
            return False  # damaged or another version's: answer again
        return status.plan == plan and status.state != "applying"

    def _dra_refusal(self, plan: str) -> Status | None:
        """On a DRA node: a `failed` answer where the agent must not act (DynamicMIG, or its objects unreadable);
        else None, with the claims counted as in use from now on if the node is a DRA node."""
        if self.dra is None or self.usage is None:
            return None
        try:
            view = self.dra.view()
        except KubeError as e:
            return Status(plan, "failed", f"cannot read this node's DRA objects ({e}); nothing was changed")
        if view.dynamic:
            return Status(plan, "failed", DYNAMIC_REFUSAL)
        if view.unreadable:
            return Status(
                plan, "failed", f"cannot read this node's ResourceSlices ({view.unreadable}); nothing was changed"
            )
        self.usage.active = view.served
        return None

    def _apply(self, target: Target) -> Status:
        try:
            result = self.applier.apply(target.gpus)
        except MigctlError as e:  # bad target, kubelet or NVML unreadable, an undo that failed: nothing changed
            return Status(target.plan, "failed", str(e))
        if result.changed or self.pending:
            try:
                self.readvertise(self.kube.read_node(self.node))
                self.pending = False
            except (KubeError, DraError) as e:  # owed still: the next tick tries again, whatever it answers
                self.pending = True
                return self._status(target.plan, result, "failed", f"re-advertise failed: {e}")
        states: dict[int, State] = {OK: "applied", BLOCKED: "blocked"}
        state = states.get(result.exit_code, "failed")
        message = "; ".join([*result.notes, *(g.message for g in result.gpus if g.message), result.caps_error])
        return self._status(target.plan, result, state, message.strip("; "))

    @staticmethod
    def _status(plan: str, result: Result, state: State, message: str) -> Status:
        gpus = {g.index: tuple(Held(f.profile, f.start, f.size, f.in_use) for f in g.instances) for g in result.gpus}
        return Status(plan, state, message, gpus)

    def readvertise(self, node: Mapping[str, Any]) -> str:
        """Make the node's plugin list the instances that exist: on a DRA node restart NVIDIA's kubelet plugin (the
        pods deleted, comma-separated), else flip the device plugin's config label (the value written)."""
        if self.dra is not None and self.dra.view().served:
            return ", ".join(self.dra.restart_plugin())
        labels = (node.get("metadata") or {}).get("labels") or {}
        a, b = self.configs
        value = b if labels.get(DEVICE_PLUGIN_CONFIG) == a else a
        self.kube.patch_node(self.node, {"metadata": {"labels": {DEVICE_PLUGIN_CONFIG: value}}}, "re-advertise on")
        log.info("node %s: %s=%s (the device plugin re-enumerates)", self.node, DEVICE_PLUGIN_CONFIG, value)
        return value
