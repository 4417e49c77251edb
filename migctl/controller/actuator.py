"""The per-node state machine: taint, drain, configure, wait for mig-manager, verify, untaint. Resumable.

State lives on the node, never only in memory: before each step migctl writes the plan id, the phase, when the
phase began and the target (layout, config name, pods to evict, the config to roll back to) as annotations, in
the same conditional write as the step's own change where it can (the taint, the label). A restarted or new
leader reads them (strictly: nodestate.read_state) and continues from the phase; timeouts are measured from
`phase-since`, so no wait is ever restarted from zero and no node stays tainted forever.

Phases (annotation `migctl.io/phase`):
  draining     taint set; evicting the pods the plan evicts, waiting for them to go
  applying     ConfigMap written, `nvidia.com/mig.config` set (state label cleared): waiting for success
  verifying    mig-manager said success: waiting for allocatable and GFD counts to match the layout
  rolling-back something failed: relabel to the previous config if the GPUs may have changed, then untaint
Done: taint removed, `migctl.io/layout` records the new layout, phase annotations cleared.
Annotations that cannot be read, a config label someone else changed, a node that left migctl's scope and a
dry-run controller finding an abandoned node all end in rollback.py's rollback or release.

`hook(node, step)` runs at every step in `STEPS` (tests and failpoints stop the process there).
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from migctl.adapters.kube.interface import Obj
from migctl.controller import events as ev
from migctl.controller.actuator_base import ActuatorBase, Hook, NodeChanged, annotations_of, labels_of, taints_of
from migctl.controller.dra import DRA_STEPS
from migctl.controller.executors import owner
from migctl.controller.inplace import IN_PLACE_STEPS, InPlaceSteps
from migctl.controller.nodechecks import (
    BoundPod,
    capacity_mismatch,
    classify_pods,
    drain_status,
    expected_resources,
    mig_manager_verdict,
)
from migctl.controller.rollback import RollbackSteps
from migctl.reconcile.nodestate import (
    APPLYING,
    DRAINING,
    PHASE_ANNOTATIONS,
    PHASES,
    ROLLING_BACK,
    VERIFYING,
    LeftAlone,
    NodeState,
    Rollback,
    Target,
    abandoned,
    layout_json,
    read_state,
    wire_layouts,
)
from migctl.wire import layout as layout_codec
from migctl.wire.names import (
    BACKOFF_UNTIL,
    FAILURES,
    LAST_CHANGE,
    LAST_ERROR,
    MIG_CONFIG,
    MIG_CONFIG_STATE,
    PLAN_ID,
    ROLLBACK,
)

__all__ = [
    "APPLYING", "DRAINING", "PHASES", "PHASE_ANNOTATIONS", "ROLLBACK", "ROLLING_BACK", "STEPS", "VERIFYING",
    "Actuator", "ActuatorBase", "BoundPod", "Hook", "NodeChanged", "Rollback", "Target", "capacity_mismatch",
    "classify_pods", "drain_status", "expected_resources", "layout_json", "mig_manager_verdict",
]  # fmt: skip

PodView = BoundPod  # nodechecks' former name, still re-exported for its importers

# Hook points, in the order a reconfiguration meets them (tests and MIGCTL_FAILPOINT stop at each).
STEPS = (
    "tainted",  # taint + annotations written
    "evicted",  # after each successful eviction
    "drained",  # every pod the plan evicts is gone
    "configmap-merged",  # ConfigMapWriter: the new config file is ready, not yet written
    "configmap-written",  # the node's config is in the ConfigMap (stale configs pruned in the same write)
    "label-toggled",  # the config label was removed to re-trigger mig-manager (same name as before)
    "labelled",  # phase applying + the config label written
    "success-seen",  # mig-manager said success; `verifying` not yet written
    "mig-manager-succeeded",  # phase verifying written
    "verified",  # capacity matches; not yet untainted
    "rolling-back",  # phase rolling-back written
    "rollback-relabelled",  # the label is back on the previous config; waiting for mig-manager
    *IN_PLACE_STEPS,  # the in-place path's (controller/inplace.py)
    *DRA_STEPS,  # the static-MIG DRA path's (controller/dra.py)
)


class Actuator(RollbackSteps, InPlaceSteps):
    """Drives one node at a time through the phases (one instance may serve many nodes, one thread each)."""

    # -- entry points --------------------------------------------------------------------------------------

    def start(self, name: str, target: Target, expect: Any) -> str:
        """Begin: one conditional write sets the taint and every annotation. `expect(node)` re-checks that the
        fresh node still looks like what was planned (else NodeChanged: re-plan)."""
        self._begin(name, target, expect, DRAINING)
        self._log(target, name, "tainted %s; reconfiguring to %s", self.taint_key, target.config)
        self.events.emit(
            ev.node_ref(name),
            ev.RECONFIGURING,
            f"plan {target.plan_id}: tainted {self.taint_key}:NoSchedule; target {target.config}: "
            + ", ".join(f"GPU {i}: {g}" for i, g in sorted(target.gpus.items())),
        )
        self._step(name, "tainted")
        return self.drive(name)

    def drive(self, name: str) -> str:
        """Continue from whatever phase the node's annotations say (also used to resume after a restart).
        A migctl taint without any phase annotation (a hand-edited node) is removed."""
        node = self.kube.read_node(name)
        state = read_state(annotations_of(node), self.clock())
        if not state.in_flight:
            return self._untaint_orphan(name) if self._tainted(node) else "idle"
        if state.foreign:
            self._leave_alone(name, state)
        if state.problem or state.target is None or state.since is None:
            return self._end_unreadable(name, state)
        self._log(state.target, name, "driving from phase %s", state.phase)
        return owner(state.phase).drive(self, name, state)

    def drive_stock(self, name: str, state: NodeState) -> str:
        """The stock path's phases (its `Executor.drive`)."""
        assert state.target is not None and state.since is not None  # drive: readable
        target, since = state.target, state.since
        if state.phase == DRAINING:
            return self._drain(name, target, since)
        if state.phase == APPLYING:
            return self._wait(name, target, since)
        if state.phase == VERIFYING:
            return self._verify(name, target, since)
        assert state.rollback is not None  # read_state: phase rolling-back has a readable rollback
        return self._rollback_continue(name, target, state.rollback, since)

    def release(self, name: str, why: str, only_if_abandoned: bool = False) -> str:
        """End a change without driving it further (a dry-run controller finding an abandoned node, a node that
        left migctl's node_selector): roll back; no new eviction, no new config. `gone` if the node is deleted;
        `waiting` if `only_if_abandoned` and a live controller may still be driving it (another deployment's
        node_selector may hold it)."""
        from migctl.adapters.kube.errors import NotFoundError

        try:
            node = self.kube.read_node(name)
        except NotFoundError:
            return "gone"
        now = self.clock()
        state = read_state(annotations_of(node), now)
        if only_if_abandoned and state.in_flight and not abandoned(state, now, self.settings):
            return "waiting"
        if not state.in_flight:
            return self._untaint_orphan(name) if self._tainted(node) else "idle"
        if state.foreign:
            self._leave_alone(name, state)
        if state.problem or state.target is None:
            return self._end_unreadable(name, state)
        return owner(state.phase).release(self, name, state, why)

    def release_stock(self, name: str, state: NodeState, why: str) -> str:
        """The stock path's release (its `Executor.release`): roll back, relabelling only if the label moved."""
        assert state.target is not None  # release: readable
        if state.phase == ROLLING_BACK and state.rollback is not None:
            return self._rollback_continue(name, state.target, state.rollback, state.since or self.clock())
        relabel = state.phase != DRAINING or self._label_moved(self.kube.read_node(name), state.target)
        return self._rollback(name, state.target, Rollback(why, "released", relabel, backoff=False))

    def _end_unreadable(self, name: str, state: NodeState) -> str:
        """Phase annotations this migctl cannot use: the owning executor's own end where it has one and the
        target is readable (the DRA path lifts its fences), else the rollback (rollback.py)."""
        end = owner(state.phase).unreadable
        if end is not None and state.target is not None:
            return end(self, name, state, f"unreadable phase annotations: {state.problem or 'phase-since missing'}")
        return self._unreadable(name, state)

    def _leave_alone(self, name: str, state: NodeState) -> NoReturn:
        """Another migctl version wrote this node's phase annotations: say so and write nothing (LeftAlone; the
        loop retries after a doubling backoff, in case that migctl finishes or this one is upgraded)."""
        why = f"left alone: {state.foreign}"
        self._log(None, name, "%s", why, level=logging.WARNING)
        self.events.emit(ev.node_ref(name), ev.NEEDS_ATTENTION, why, warning=True)
        raise LeftAlone(why)

    def _untaint_orphan(self, name: str) -> str:
        def mutate(node: Obj) -> Obj | None:
            if any(annotations_of(node).get(k) for k in PHASE_ANNOTATIONS) or not self._tainted(node):
                return None  # a phase appeared (not an orphan), or already untainted
            taints = [t for t in taints_of(node) if t.get("key") != self.taint_key]
            return {"spec": {"taints": taints or None}}

        self.kube.update_node(name, mutate, what="remove orphaned taint")
        self._log(None, name, "removed %s: no phase annotation", self.taint_key, level=logging.WARNING)
        return "untainted"

    # -- phases --------------------------------------------------------------------------------------------

    def _drain(self, name: str, target: Target, since: float) -> str:
        while True:
            pods = classify_pods(
                self.kube.list_pods_on_node(name), self.config.planner.vram_resource, self.kube.read_node(name)
            )
            unexpected, to_evict, remaining = drain_status(pods, target)
            if unexpected:
                why = (f"GPU pod(s) {', '.join(unexpected)} started on the node after planning; not evicting pods "
                       "the plan does not allow")  # fmt: skip
                return self._drain_rollback(name, target, Rollback(why, "unexpected-pod", False, backoff=False))
            blocked = []
            for pod in to_evict:
                result = self.kube.evict(*pod.key.split("/", 1))
                if result == "evicted":
                    self.metrics.evictions.inc()
                    self.ledger.record(self.clock())
                    self._log(target, name, "evicted %s", pod.key)
                    self.events.emit(ev.pod_ref(pod.key, pod.uid), ev.EVICTED,
                                     f"evicted by migctl plan {target.plan_id} to reconfigure node {name}")  # fmt: skip
                    self._step(name, "evicted")
                elif result == "blocked":
                    blocked.append(pod.key)
            if not remaining:
                break
            timeout = self.settings.eviction_timeout_s
            if self.clock() - since >= timeout:
                why = (
                    f"eviction of {', '.join(blocked)} refused (429: PodDisruptionBudget) for {timeout:.0f} s"
                    if blocked
                    else f"pod(s) {', '.join(remaining)} still present after {timeout:.0f} s"
                )
                return self._drain_rollback(name, target, Rollback(why, "eviction", relabel=False))
            self._sleep()
        self._step(name, "drained")
        return self._apply(name, target)

    def _drain_rollback(self, name: str, target: Target, rb: Rollback) -> str:
        """A drain that fails has not changed the GPUs, unless a crash came after the label toggle."""
        rb.relabel = self._label_moved(self.kube.read_node(name), target)
        return self._rollback(name, target, rb)

    def _apply(self, name: str, target: Target) -> str:
        self.configmaps.ensure(target.config, target.gpus)
        self._step(name, "configmap-written")
        node = self.kube.read_node(name)
        self._owned(node, target)
        if labels_of(node).get(MIG_CONFIG) == target.config:
            # Same name already set (an earlier failed attempt): mig-manager only reacts to a *change*.
            self._log(target, name, "toggling %s to re-trigger mig-manager", MIG_CONFIG)
            self.kube.patch_node(name, {"metadata": {"labels": {MIG_CONFIG: None}}}, "toggle label")
            self._step(name, "label-toggled")
        self._set_phase(name, target, APPLYING, {"labels": {MIG_CONFIG: target.config, MIG_CONFIG_STATE: None}})
        self._step(name, "labelled")
        return self._wait(name, target, self.clock())

    def _relabelled(self, name: str, target: Target, node: Obj, phase: str) -> str:
        """Someone else changed the config label mid-phase: migctl does not fight over it."""
        label = labels_of(node).get(MIG_CONFIG)
        why = f"{MIG_CONFIG} changed to {label!r} by someone else during phase {phase}; left as is"
        return self._rollback(name, target, Rollback(why, "relabelled", relabel=False, uncertain=True))

    def _wait(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            timeout = self.settings.mig_manager_timeout_s
            verdict = mig_manager_verdict(labels_of(node), target.config, self.clock() - since, timeout)
            if verdict == "success":
                self._step(name, "success-seen")
                self._set_phase(name, target, VERIFYING)
                self._step(name, "mig-manager-succeeded")
                return self._verify(name, target, self.clock())
            if verdict == "relabel":
                return self._relabelled(name, target, node, APPLYING)
            if verdict == "failed":
                why = f"mig-manager reported {MIG_CONFIG_STATE}=failed"
                return self._rollback(name, target, Rollback(why, "mig-manager-failed", relabel=True))
            if verdict == "timeout":
                state = labels_of(node).get(MIG_CONFIG_STATE, "<none>")
                why = f"no success from mig-manager within {timeout:.0f} s (state {state})"
                return self._rollback(name, target, Rollback(why, "mig-manager-timeout", relabel=True))
            self._sleep()

    def _verify(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            if labels_of(node).get(MIG_CONFIG) != target.config:
                return self._relabelled(name, target, node, VERIFYING)
            problem = capacity_mismatch(node, target.gpus)
            if not problem:
                break
            if self.clock() - since >= self.settings.verify_timeout_s:
                why = f"capacity never matched the layout: {problem}"
                return self._rollback(name, target, Rollback(why, "verify", relabel=False, uncertain=True))
            self._sleep()
        self._step(name, "verified")
        return self._finish(name, target)

    def _finish(self, name: str, target: Target) -> str:
        layout = layout_codec.encode(wire_layouts(target.gpus), target.config)

        def mutate(node: Obj) -> Obj | None:
            current = annotations_of(node)
            if not current.get(PLAN_ID) and current.get(self.config.gpu_operator.layout_annotation) == layout:
                return None  # done already (a retried write whose response was lost)
            self._owned(node, target)
            ann: dict[str, Any] = dict.fromkeys(PHASE_ANNOTATIONS)
            ann.update({self.config.gpu_operator.layout_annotation: layout, LAST_CHANGE: f"{self.clock():.3f}",
                        FAILURES: None, BACKOFF_UNTIL: None, LAST_ERROR: None})  # fmt: skip
            taints = [t for t in taints_of(node) if t.get("key") != self.taint_key]
            return {"metadata": {"annotations": ann}, "spec": {"taints": taints or None}}

        self.kube.update_node(name, mutate, what="untaint")
        took = self.clock() - target.started if target.started else 0.0
        self.metrics.succeeded.inc()
        if took > 0:
            self.metrics.duration.observe(took)
        self.outcomes.append((name, "succeeded", ""))
        self._log(target, name, "reconfigured to %s in %.1f s; untainted", target.config, took)
        msg = f"plan {target.plan_id}: now {target.config}; taint removed"
        self.events.emit(ev.node_ref(name), ev.RECONFIGURED, msg)
        for pod in target.pods:
            self.events.emit(ev.pod_ref(pod), ev.RECONFIGURED, f"node {name} reconfigured for this pod")
        return "succeeded"
