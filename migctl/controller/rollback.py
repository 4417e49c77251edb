"""The ways out of a reconfiguration that cannot finish: roll back, or release a node whose state is unreadable.

Both end the same way, in one conditional write: migctl's taint and phase annotations removed, `last-error`
set, the failure backoff doubled (`failures`, `backoff-until`), and one Event: `MigctlRolledBack`, or
`MigctlNeedsAttention` when the GPU layout is uncertain (the previous config also failed or timed out, another
actor relabelled the node, or migctl lost track of the change). An uncertain node's `migctl.io/layout` is cleared,
so the adapter reads its layout from the label and freezes it while mig-manager says `failed` or `pending`: the
Event is sent once, and nothing retries the node in a loop.
"""

from __future__ import annotations

import logging
from typing import Any

from migctl.adapters.kube.interface import Obj
from migctl.controller import events as ev
from migctl.controller.actuator_base import ActuatorBase, NodeChanged, annotations_of, labels_of, taints_of
from migctl.controller.nodechecks import mig_manager_verdict
from migctl.reconcile.guards import NodeRecord, failure_backoff
from migctl.reconcile.nodestate import (
    DRAINING,
    PHASE_ANNOTATIONS,
    ROLLING_BACK,
    NodeState,
    Rollback,
    Target,
    raw_phase_annotations,
)
from migctl.wire.names import BACKOFF_UNTIL, FAILURES, LAST_ERROR, MIG_CONFIG, MIG_CONFIG_STATE, PLAN_ID, ROLLBACK


class RollbackSteps(ActuatorBase):
    """Rollback, release and their shared final write (mixed into `Actuator`)."""

    def _rollback(self, name: str, target: Target, rb: Rollback, force: bool = False) -> str:
        self._log(target, name, "rolling back: %s", rb.reason, level=logging.WARNING)
        extra = {"annotations": {ROLLBACK: rb.to_json(), LAST_ERROR: rb.reason[:1000]}}
        self._set_phase(name, target, ROLLING_BACK, extra, force=force)
        self._step(name, "rolling-back")
        return self._rollback_continue(name, target, rb, self.clock())

    def _rollback_continue(self, name: str, target: Target, rb: Rollback, since: float) -> str:
        """Return the label to the previous config (if `rb.relabel`) and wait for mig-manager's answer to it.
        Resumable: a label that is still migctl's target (or absent: toggled) is set back; a label someone else
        set is left alone (no fight), and the outcome is uncertain."""
        previous = target.previous_config
        if rb.relabel and not previous:
            rb.uncertain = True  # nothing to return to: the adapter sees the node as unknown until fixed
        elif rb.relabel and previous:
            while True:
                node = self.kube.read_node(name)
                self._owned(node, target)
                label = labels_of(node).get(MIG_CONFIG)
                if label != previous:
                    if label not in (target.config, None):
                        rb.uncertain = True
                        rb.reason += f"; {MIG_CONFIG} is now {label!r}, set by someone else: left as is"
                        break
                    patch = {"metadata": {"labels": {MIG_CONFIG: previous, MIG_CONFIG_STATE: None}}}
                    self.kube.patch_node(name, patch, "relabel previous")
                    self._step(name, "rollback-relabelled")
                    continue
                verdict = mig_manager_verdict(
                    labels_of(node), previous, self.clock() - since, self.settings.mig_manager_timeout_s
                )
                if verdict == "success":
                    break
                if verdict in ("failed", "timeout"):
                    rb.uncertain = True
                    rb.reason += (
                        f"; the rollback to {previous} {'failed too' if verdict == 'failed' else 'timed out'} "
                        f"({MIG_CONFIG_STATE}={labels_of(node).get(MIG_CONFIG_STATE, '<none>')})"
                    )
                    break
                self._sleep()
        return self._finish_rollback(name, target, rb)

    def _unreadable(self, name: str, state: NodeState) -> str:
        """Phase annotations migctl cannot use: roll back with the target if it is still trustworthy, else
        release the node without touching its label."""
        reason = f"unreadable phase annotations: {state.problem}"
        self._log(state.target, name, "%s", reason, level=logging.ERROR)
        if state.target is not None:
            if state.phase == ROLLING_BACK and state.rollback is not None:
                return self._rollback(name, state.target, state.rollback, force=True)
            node = self.kube.read_node(name)
            relabel = state.phase != DRAINING or self._label_moved(node, state.target)
            return self._rollback(name, state.target, Rollback(reason, "unreadable", relabel), force=True)
        uncertain = state.phase != DRAINING
        return self._finish_rollback(name, None, Rollback(reason, "unreadable", False, True, uncertain), state.raw)

    def _finish_rollback(
        self, name: str, target: Target | None, rb: Rollback, expect: tuple[str | None, ...] = ()
    ) -> str:
        """The final write. With a target it must still own the node; without one (unreadable state) the phase
        annotations must still be `expect`, exactly as read, so a concurrent writer is never clobbered."""

        def mutate(node: Obj) -> Obj | None:
            ann_now = annotations_of(node)
            if target is not None:
                if not ann_now.get(PLAN_ID) and ann_now.get(LAST_ERROR) == rb.reason[:1000]:
                    return None  # done already (a retried write whose response was lost)
                self._owned(node, target)
            elif raw_phase_annotations(ann_now) != expect:
                if not any(raw_phase_annotations(ann_now)):
                    return None  # released already
                raise NodeChanged("phase annotations changed while releasing")
            record = NodeRecord.from_annotations(name, ann_now)
            ann: dict[str, Any] = dict.fromkeys(PHASE_ANNOTATIONS)
            ann[LAST_ERROR] = rb.reason[:1000]
            if rb.backoff:
                failures = record.failures + 1
                ann[FAILURES] = str(failures)
                ann[BACKOFF_UNTIL] = f"{self.clock() + failure_backoff(failures, self.settings):.3f}"
            if rb.uncertain:
                ann[self.config.gpu_operator.layout_annotation] = None
            taints = [t for t in taints_of(node) if t.get("key") != self.taint_key]
            return {"metadata": {"annotations": ann}, "spec": {"taints": taints or None}}

        self.kube.update_node(name, mutate, what="roll back")
        self.metrics.failed.labels(rb.cause).inc()
        self.outcomes.append((name, "rolled-back", rb.reason))
        plan = target.plan_id if target else "?"
        self._log(target, name, "rolled back and untainted: %s", rb.reason, level=logging.WARNING)
        self.events.emit(
            ev.node_ref(name),
            ev.NEEDS_ATTENTION if rb.uncertain else ev.ROLLED_BACK,
            f"plan {plan}: rolled back, taint removed: {rb.reason}"
            + (f"; the GPU layout is uncertain, check {MIG_CONFIG_STATE}" if rb.uncertain else ""),
            warning=True,
        )
        return "rolled-back"
