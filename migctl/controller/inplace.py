"""The in-place path's executor: taint, let bound pods be admitted, hand the target to the node agent, wait for its
answer and for allocatable, untaint. Resumable from the node's annotations, like the stock path (actuator.py).

Why this order (shared/reference/in-place.md §3): the device plugin re-registers after the agent changes the GPUs,
and a pod that reaches the kubelet meanwhile fails admission for good (`UnexpectedAdmissionError`). The NoSchedule
taint stops new bindings; pods already bound but not yet admitted are waited for before the target is written; the
taint comes off only once allocatable lists the new instances. So the node pauses for seconds, not minutes, and
only for new pods: nothing running is touched (the agent destroys only free instances).

Phases (annotation `migctl.io/phase`, the other phase annotations as on the stock path):
  in-place-admitting   taint set; waiting (at most `in_place_admission_timeout_s`) for bound, unadmitted pods
  in-place-applying    `migctl.io/in-place-target` written: waiting for the agent's `in-place-status` for this plan
  in-place-advertising the agent said applied: waiting for allocatable to list the target's instances
Each end is ONE conditional write (no rolling-back phase: nothing to undo on the controller's side): the taint and
phase annotations removed, `migctl.io/layout` recorded, and on failure the target removed (so a restarting agent
does not apply a change nobody waits for), `last-error` set and the failure backoff doubled.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migctl.adapters.kube.interface import Obj
from migctl.controller import events as ev
from migctl.controller.actuator_base import ActuatorBase, annotations_of, taints_of
from migctl.controller.nodechecks import allocatable_mismatch, classify_pods
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.guards import NodeRecord, failure_backoff
from migctl.reconcile.nodestate import (
    ADMITTING,
    ADVERTISING,
    AGENT_APPLYING,
    PHASE_ANNOTATIONS,
    NodeState,
    Target,
    wire_layouts,
)
from migctl.wire import inplace as wire
from migctl.wire import layout as layout_codec
from migctl.wire.names import (
    BACKOFF_UNTIL,
    FAILURES,
    IN_PLACE_STATUS,
    IN_PLACE_TARGET,
    LAST_CHANGE,
    LAST_ERROR,
    PLAN_ID,
)

IN_PLACE_STEPS = (
    "in-place-tainted",  # taint + phase in-place-admitting written
    "in-place-admitted",  # no bound pod waits for admission (or the wait timed out); target not yet written
    "in-place-target-written",  # phase in-place-applying + the agent's target written
    "in-place-applied-seen",  # the agent said applied; phase in-place-advertising not yet written
    "in-place-advertising",  # phase in-place-advertising written
    "in-place-advertised",  # allocatable lists the new instances; not yet untainted
)


def agent_target(target: Target) -> wire.Target:
    """The agent's target: per MIG-enabled GPU, profile counts (the agent never changes MIG mode)."""
    return wire.Target(target.plan_id, {i: dict(g.layout) for i, g in target.gpus.items() if g.mig_enabled})


def unadmitted(pods: Iterable[Obj], vram_resource: str, node: Obj | None = None) -> list[str]:
    """GPU pods bound to the node that the kubelet has not admitted yet: phase Pending and no container status (the
    kubelet allocates devices at admission, before it reports any container). These would fail admission while the
    device plugin re-registers. With `node`, only resources it offers count (an absurd one holds nothing)."""
    pods = list(pods)
    gpu = {p.key for p in classify_pods(pods, vram_resource, node) if p.gpu and not p.terminating}
    out = []
    for p in pods:
        meta, status = p.get("metadata") or {}, p.get("status") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if key in gpu and status.get("phase", "Pending") == "Pending" and not status.get("containerStatuses"):
            out.append(key)
    return sorted(out)


def read_status(annotations: Mapping[str, Any], plan: str) -> tuple[wire.Status | None, str]:
    """(the agent's answer to `plan`, "") ; (None, "") while there is none yet; (None, why) if unreadable."""
    raw = annotations.get(IN_PLACE_STATUS)
    if not raw:
        return None, ""
    try:
        status = wire.decode_status(str(raw))
    except wire.UnknownVersionError as e:
        return None, f"the node agent speaks another version: {e}"
    except (ValueError, TypeError) as e:
        return None, f"{IN_PLACE_STATUS} unreadable: {e}"
    if status.plan != plan or status.state == "applying":
        return None, ""
    return status, ""


def layout_after(recorded: str | None, status: wire.Status | None) -> dict[int, GpuConfig] | None:
    """The layout to record after a change that did not apply: the previous record with each GPU the agent
    reported replaced by what it now holds; None when the previous record is unreadable and nothing was reported."""
    gpus: dict[int, GpuConfig] = {}
    if recorded:
        try:
            gpus = {i: GpuConfig.mig(g.layout) if g.mig else GpuConfig.disabled()
                    for i, g in layout_codec.decode(recorded).items()}  # fmt: skip
        except (ValueError, TypeError):
            gpus = {}
    for i, held in (status.gpus if status else {}).items():
        counts: dict[str, int] = {}
        for h in held:
            counts[h.profile] = counts.get(h.profile, 0) + 1
        gpus[i] = GpuConfig.mig(counts)
    return gpus or None


@dataclass(frozen=True)
class AgentAnswer:
    """What the wait for the agent's answer to a plan saw: `applied`, or how the change ends (blocked or failed as
    the agent said, `failed` when its status is unreadable, `timeout`); `uncertain`: the GPUs may differ from the
    record until the agent reports them."""

    result: str
    why: str
    status: wire.Status | None
    uncertain: bool = False


def agent_answer(annotations: Mapping[str, Any], plan: str, waited: float, timeout: float) -> AgentAnswer | None:
    """The agent's answer to `plan` after `waited` seconds of a wait bounded by `timeout` (None: keep waiting).
    Shared by every path whose node agent applies (in place, static-MIG DRA): the same protocol."""
    status, problem = read_status(annotations, plan)
    if problem:
        return AgentAnswer("failed", problem, None, uncertain=True)
    if status is not None and status.state == "applied":
        return AgentAnswer("applied", "", status)
    if status is not None:  # blocked or failed: the agent left those GPUs as they were (all or nothing)
        return AgentAnswer(status.state, f"the node agent answered {status.state}: {status.message or 'no message'}",
                           status)  # fmt: skip
    if waited >= timeout:
        why = f"no answer from the node agent within {timeout:.0f} s (is migctl's agent running there?)"
        return AgentAnswer("timeout", why, None, uncertain=True)
    return None


def end_annotations(
    name: str, current: Mapping[str, str], settings: Any, layout_key: str, now: float, *, ok: bool, reason: str,
    layout: Mapping[int, GpuConfig] | None, status: wire.Status | None, backoff: bool,
) -> dict[str, Any]:  # fmt: skip
    """The annotations the one final write of an agent-applied change sets (in place or DRA): the phase
    annotations cleared and the layout recorded (`layout`, else the previous record with what the agent reported,
    `layout_after`); on success the failure record cleared; on failure the agent's target removed (nobody waits
    for it any more: a restarting agent must not apply it), `last-error` set and, with `backoff`, the failure
    backoff doubled."""
    gpus = layout if layout is not None else layout_after(current.get(layout_key), status)
    ann: dict[str, Any] = dict.fromkeys(PHASE_ANNOTATIONS)
    if gpus:
        ann[layout_key] = layout_codec.encode(wire_layouts(gpus), config_name(gpus))
    if ok:
        ann.update({LAST_CHANGE: f"{now:.3f}", FAILURES: None, BACKOFF_UNTIL: None, LAST_ERROR: None})
        return ann
    ann[IN_PLACE_TARGET] = None
    ann[LAST_ERROR] = reason[:1000]
    if backoff:
        failures = NodeRecord.from_annotations(name, current).failures + 1
        ann[FAILURES] = str(failures)
        ann[BACKOFF_UNTIL] = f"{now + failure_backoff(failures, settings):.3f}"
    return ann


class InPlaceSteps(ActuatorBase):
    """The in-place phases (mixed into `Actuator`, whose `drive` hands them the nodes in an in-place phase)."""

    def start_in_place(self, name: str, target: Target, expect: Any) -> str:
        """Begin: one conditional write sets the taint and the phase annotations (as `Actuator.start`)."""
        self._begin(name, target, expect, ADMITTING)
        self._log(target, name, "tainted %s; changing in place to %s", self.taint_key, target.config)
        self.events.emit(
            ev.node_ref(name),
            ev.RECONFIGURING,
            f"plan {target.plan_id}: tainted {self.taint_key}:NoSchedule; in place (node agent): "
            + ", ".join(f"GPU {i}: {g}" for i, g in sorted(target.gpus.items())),
        )
        self._step(name, "in-place-tainted")
        return self._admit(name, target, self.clock())

    def drive_in_place(self, name: str, state: NodeState) -> str:
        assert state.target is not None and state.since is not None  # read_state: readable
        if state.phase == ADMITTING:
            return self._admit(name, state.target, state.since)
        if state.phase == AGENT_APPLYING:
            return self._await_agent(name, state.target, state.since)
        return self._await_advertised(name, state.target, state.since)

    def release_in_place(self, name: str, state: NodeState, why: str) -> str:
        """End a change no live controller drives (dry run, out of scope): untaint, drop the target, no backoff."""
        assert state.target is not None
        node = self.kube.read_node(name)
        status, _ = read_status(annotations_of(node), state.target.plan_id)
        layout = dict(state.target.gpus) if status is not None and status.state == "applied" else None
        return self._end(name, state.target, "released", why, status, layout=layout, uncertain=status is None,
                         backoff=False)  # fmt: skip

    # -- phases --------------------------------------------------------------------------------------------

    def _admit(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            waiting = unadmitted(self.kube.list_pods_on_node(name), self.config.planner.vram_resource, node)
            if not waiting:
                break
            if self.clock() - since >= self.settings.in_place_admission_timeout_s:
                self._log(target, name, "pod(s) %s still not admitted after %.0f s; going on", ", ".join(waiting),
                          self.settings.in_place_admission_timeout_s, level=logging.WARNING)  # fmt: skip
                break
            self._sleep()
        self._step(name, "in-place-admitted")
        extra = {"annotations": {IN_PLACE_TARGET: wire.encode_target(agent_target(target))}}
        self._set_phase(name, target, AGENT_APPLYING, extra)
        self._step(name, "in-place-target-written")
        return self._await_agent(name, target, self.clock())

    def _await_agent(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            answer = agent_answer(annotations_of(node), target.plan_id, self.clock() - since,
                                  self.settings.in_place_agent_timeout_s)  # fmt: skip
            if answer is not None and answer.result == "applied":
                break
            if answer is not None:
                return self._end(name, target, answer.result, answer.why, answer.status, uncertain=answer.uncertain)
            self._sleep()
        self._step(name, "in-place-applied-seen")
        self._set_phase(name, target, ADVERTISING)
        self._step(name, "in-place-advertising")
        return self._await_advertised(name, target, self.clock())

    def _await_advertised(self, name: str, target: Target, since: float) -> str:
        timeout = self.settings.in_place_advertise_timeout_s
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            problem = allocatable_mismatch(node, target.gpus)
            if not problem:
                break
            if self.clock() - since >= timeout:
                why = f"the device plugin did not advertise the new instances within {timeout:.0f} s: {problem}"
                status, _ = read_status(annotations_of(node), target.plan_id)
                if status is not None and status.gpus:  # what the agent says the GPUs hold: the truth about them
                    return self._end(name, target, "timeout", why, status)
                return self._end(name, target, "timeout", why, None, layout=dict(target.gpus))
            self._sleep()
        self._step(name, "in-place-advertised")
        return self._end(name, target, "applied", "", None, layout=dict(target.gpus))

    # -- the one final write ---------------------------------------------------------------------------------

    def _end(
        self, name: str, target: Target, result: str, reason: str, status: wire.Status | None, *,
        layout: Mapping[int, GpuConfig] | None = None, uncertain: bool = False, backoff: bool = True,
    ) -> str:  # fmt: skip
        """Untaint and record, in one conditional write. `result`: applied, blocked, failed, timeout, released."""
        ok = result == "applied"
        layout_key = self.config.gpu_operator.layout_annotation

        def mutate(node: Obj) -> Obj | None:
            current = annotations_of(node)
            if not current.get(PLAN_ID) and not self._tainted(node):
                return None  # done already (a retried write whose response was lost)
            self._owned(node, target)
            ann = end_annotations(name, current, self.settings, layout_key, self.clock(), ok=ok, reason=reason,
                                  layout=layout, status=status, backoff=backoff)  # fmt: skip
            taints = [t for t in taints_of(node) if t.get("key") != self.taint_key]
            return {"metadata": {"annotations": ann}, "spec": {"taints": taints or None}}

        self.kube.update_node(name, mutate, what="untaint")
        window = self.clock() - target.started if target.started else 0.0
        if window > 0:
            self.metrics.in_place_window.observe(window)
        self.metrics.in_place_changes.labels(result if result != "released" else "failed").inc()
        if ok:
            self.metrics.succeeded.inc()
            self.metrics.duration.observe(max(window, 0.0))
            self.outcomes.append((name, "succeeded", ""))
            self._log(target, name, "changed in place in %.1f s; untainted", window)
            msg = f"plan {target.plan_id}: changed in place, {window:.1f} s tainted; taint removed"
            self.events.emit(ev.node_ref(name), ev.RECONFIGURED, msg)
            for pod in target.pods:
                self.events.emit(ev.pod_ref(pod), ev.RECONFIGURED, f"node {name} changed in place for this pod")
            return "succeeded"
        self.metrics.failed.labels(f"in-place-{result}").inc()
        self.outcomes.append((name, "rolled-back", reason))
        self._log(target, name, "in-place change ended (%s), untainted: %s", result, reason, level=logging.WARNING)
        self.events.emit(
            ev.node_ref(name),
            ev.NEEDS_ATTENTION if uncertain else ev.ROLLED_BACK,
            f"plan {target.plan_id}: in-place change {result}, taint removed: {reason}"
            + ("; the GPUs may differ from migctl.io/layout until the agent reports them" if uncertain else ""),
            warning=True,
        )
        return "rolled-back"
