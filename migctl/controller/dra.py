"""The static-MIG DRA path's executor: fence the GPUs a change re-cuts (DeviceTaintRules, never a node taint), let
claims that landed on them go, hand the target to the node agent, wait for the node's ResourceSlices to list the
new MIG devices, lift the fences. Resumable from the node's phase annotations, like the in-place path (inplace.py).

Why this shape (shared/reference/dra.md §8.1): NVIDIA's kubelet plugin does not rescan, so the agent re-cuts the
free instances through NVML and restarts the plugin's pod on its node; the node's other GPUs keep serving, so the
fences cover only the devices of the GPUs that change. Fences are advisory (KEP-5055): a claim can be allocated
before the scheduler sees one, so before the target is written migctl waits `dra_fence_settle_s` and until no claim
holds a fenced device that the plan did not count (a claim of a pod in `Target.keep`), within `dra_drain_timeout_s`.
The re-advertise is read from the slices' devices, not the pool generation (NVIDIA's driver does not raise it).

Phases (annotation `migctl.io/phase`; the other phase annotations as on the other paths):
  dra-fencing      phase annotations written (no taint); one reshape fence per device of each changed GPU
  dra-draining     fences on: waiting for the settle time, and for claims that landed on fenced devices to go
  dra-applying     `migctl.io/in-place-target` written: waiting for the agent's `in-place-status` for this plan
  dra-advertising  the agent said applied: waiting for the slices to list the target's MIG devices
Every end lifts the fences first, then makes ONE conditional node write (phase annotations cleared,
`migctl.io/layout` recorded, on failure the target removed, `last-error` set, the failure backoff doubled): a crash
between the two resumes and lifts again (a delete that finds nothing is done). Reshape fences a crash or a hand
edit orphans are lifted by the fence reconcile (fences.py).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections import Counter
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path
from typing import Any

from migctl.adapters.dra.slices import read_slices
from migctl.adapters.kube.interface import Obj
from migctl.adapters.views import as_mapping
from migctl.controller import events as ev
from migctl.controller.actuator_base import ActuatorBase, annotations_of, taints_of
from migctl.controller.fences import RESHAPE, RESHAPE_FENCE, node_label, owned_rules, rule_body
from migctl.controller.inplace import agent_answer, agent_target, end_annotations, read_status
from migctl.core.dra.devices import NodePool
from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.model.gpu_config import GpuConfig
from migctl.reconcile.nodestate import (
    DRA_ADVERTISING,
    DRA_APPLYING,
    DRA_DRAINING,
    DRA_FENCING,
    NodeState,
    Target,
)
from migctl.wire import inplace as wire
from migctl.wire.names import (
    FENCE_NODE,
    FENCE_PURPOSE,
    IN_PLACE_TARGET,
    NVIDIA_DRA_DRIVER,
    PLAN_ID,
)

DRA_STEPS = (
    "dra-begun",  # phase dra-fencing written; no fence yet
    "dra-fenced",  # every device of the changed GPUs fenced; phase dra-draining not yet written
    "dra-drained",  # settle time over, no claim landed on a fenced device; target not yet written
    "dra-target-written",  # phase dra-applying + the agent's target written
    "dra-applied-seen",  # the agent said applied; phase dra-advertising not yet written
    "dra-advertised",  # the slices list the target's devices; fences not yet lifted
)


@functools.lru_cache(maxsize=4)
def _catalog(dirs: tuple[Path, ...]) -> Catalog:
    return load_catalog(dirs)


def gpu_counts(pool: NodePool, minor: int) -> Counter[str]:
    gpu = pool.gpu(minor)
    return Counter(d.profile for d in gpu.migs) if gpu is not None else Counter()


def changed_gpus(pool: NodePool, target: Target) -> list[int]:
    """The MIG GPUs whose devices in the slices are not the target's (the ones the change re-cuts)."""
    return [
        i for i, g in sorted(target.gpus.items()) if g.mig_enabled and gpu_counts(pool, i) != Counter(dict(g.layout))
    ]


def slices_mismatch(pool: NodePool | None, target: Target) -> str:
    """ "" once the node's slices list the target's MIG devices on every MIG GPU of the target; else what differs."""
    if pool is None:
        return f"no ResourceSlice of {NVIDIA_DRA_DRIVER} lists the node (its plugin is restarting or gone)"
    if not pool.complete:
        return f"pool {pool.name} is incomplete (the plugin is publishing its slices)"
    out = []
    for i in changed_gpus(pool, target):
        have = dict(sorted(gpu_counts(pool, i).items()))
        out.append(f"GPU {i}: slices list {have}, target {dict(target.gpus[i].layout)}")
    return "; ".join(out)


def landed(claims: Iterable[Obj], pool: str, fenced: Collection[str], keep: Collection[str]) -> list[str]:
    """Claims holding a fenced device that the plan did not count: not held only by pods it kept (`keep`). An
    allocated claim that no pod holds yet is about to be used: it counts too."""
    out = []
    for c in claims:
        meta, status = as_mapping(c.get("metadata")), as_mapping(c.get("status"))
        results = as_mapping(as_mapping(status.get("allocation")).get("devices")).get("results")
        on = [
            r for r in (results if isinstance(results, list) else [])
            if isinstance(r, Mapping) and r.get("driver") == NVIDIA_DRA_DRIVER and r.get("pool") == pool
            and r.get("device") in fenced and not r.get("adminAccess")
        ]  # fmt: skip
        if not on:
            continue
        ns = str(meta.get("namespace") or "default")
        reserved = status.get("reservedFor")
        users = [
            f"{ns}/{u.get('name')}"
            for u in (reserved if isinstance(reserved, list) else [])
            if isinstance(u, Mapping) and u.get("resource") == "pods"
        ]
        if users and all(u in keep for u in users):
            continue
        devices = ", ".join(str(r.get("device")) for r in on)
        out.append(f"{ns}/{meta.get('name')} on {devices} ({'pod ' + ', '.join(users) if users else 'not yet used'})")
    return sorted(out)


def start_dra(actuator: ActuatorBase, name: str, target: Target, expect: Any) -> str:
    """The dra path's begin (executors.py)."""
    return DraSteps.of(actuator).start(name, target, expect)


def drive_dra(actuator: ActuatorBase, name: str, state: NodeState) -> str:
    """`Actuator.drive` for a node in a DRA phase (a resume after a restart or failover)."""
    return DraSteps.of(actuator).drive(name, state)


def release_dra(actuator: ActuatorBase, name: str, state: NodeState, why: str) -> str:
    """`Actuator.release` for a node in a DRA phase: lift the fences and end, no backoff."""
    return DraSteps.of(actuator).release(name, state, why)


def fail_dra(actuator: ActuatorBase, name: str, state: NodeState, why: str) -> str:
    """`Actuator.drive` for a node in a DRA phase whose annotations are unreadable but whose target is not (a
    `phase-since` nobody can read): lift the fences and end as failed, with the backoff."""
    return DraSteps.of(actuator).fail(name, state, why)


class DraSteps(ActuatorBase):
    """The DRA phases, on the state of the actuator that runs them (one per call; `outcomes` is shared)."""

    @staticmethod
    def of(a: ActuatorBase) -> DraSteps:
        return DraSteps(**{f.name: getattr(a, f.name) for f in dataclasses.fields(ActuatorBase)})

    def start(self, name: str, target: Target, expect: Any) -> str:
        self._begin(name, target, expect, DRA_FENCING, taint=False)
        gpus = ", ".join(f"GPU {i}: {g}" for i, g in sorted(target.gpus.items()))
        self._log(target, name, "changing in place on DRA (fences, no node taint) to %s", target.config)
        fence = f"DeviceTaintRules {RESHAPE_FENCE.key}:NoSchedule; no node taint"
        msg = f"plan {target.plan_id}: fencing the changed GPUs' devices ({fence}); in place (node agent): {gpus}"
        self.events.emit(ev.node_ref(name), ev.RECONFIGURING, msg)
        self._step(name, "dra-begun")
        return self._fence(name, target)

    def drive(self, name: str, state: NodeState) -> str:
        assert state.target is not None and state.since is not None  # Actuator.drive: readable
        if state.phase == DRA_FENCING:
            return self._fence(name, state.target)
        if state.phase == DRA_DRAINING:  # fenced again first: a crash while lifting may have left only some
            return self._fence(name, state.target, state.since)
        if state.phase == DRA_APPLYING:
            return self._await_agent(name, state.target, state.since)
        return self._await_slices(name, state.target, state.since)

    def release(self, name: str, state: NodeState, why: str) -> str:
        return self._halt(name, state, why, "released", backoff=False)

    def fail(self, name: str, state: NodeState, why: str) -> str:
        return self._halt(name, state, why, "failed", backoff=True)

    def _halt(self, name: str, state: NodeState, why: str, result: str, backoff: bool) -> str:
        """End a change from wherever it is without driving it further: what the agent said decides the record."""
        assert state.target is not None
        status, _ = read_status(annotations_of(self.kube.read_node(name)), state.target.plan_id)
        layout = dict(state.target.gpus) if status is not None and status.state == "applied" else None
        return self._end(name, state.target, result, why, status, layout=layout, uncertain=status is None,
                         backoff=backoff)  # fmt: skip

    # -- phases --------------------------------------------------------------------------------------------

    def _pool(self, name: str) -> NodePool | None:
        reading = read_slices(self.kube.list_node_resource_slices(name, NVIDIA_DRA_DRIVER), self._catalog)
        return reading.pool(name)

    @property
    def _catalog(self) -> Catalog:
        return _catalog(tuple(self.config.profiles_dirs))

    def _fence(self, name: str, target: Target, draining_since: float | None = None) -> str:
        """Fence every device of each GPU the slices show differing from the target (idempotent: a resume fences
        again what is there already), then drain (`draining_since`: a resume of the drain, timed from then)."""
        self._owned(self.kube.read_node(name), target)
        pool = self._pool(name)
        if pool is None or not pool.complete:
            return self._end(name, target, "failed", slices_mismatch(pool, target) + "; nothing changed", None)
        gpus = changed_gpus(pool, target)
        for d in (d for d in pool.devices if d.minor in gpus):
            self.kube.create_device_taint_rule(rule_body(name, pool.name, d.name, RESHAPE, RESHAPE_FENCE))
        self._log(target, name, "fenced GPU(s) %s", ", ".join(map(str, gpus)) or "none")
        self._step(name, "dra-fenced")
        if draining_since is not None:
            return self._drain(name, target, draining_since)
        self._set_phase(name, target, DRA_DRAINING)
        return self._drain(name, target, self.clock())

    def _fences(self, name: str) -> list[tuple[str, str, str]]:
        """(rule name, uid, device) of this node's reshape fences, fresh from the API."""
        selector = f"{FENCE_NODE}={node_label(name)},{FENCE_PURPOSE}={RESHAPE}"
        rules = owned_rules(self.kube.list_device_taint_rules(selector))
        return [(r.name, r.uid, r.device) for r in rules if r.node == name and r.purpose == RESHAPE]

    def _drain(self, name: str, target: Target, since: float) -> str:
        fenced = {device for _, _, device in self._fences(name)}
        while True:
            self._owned(self.kube.read_node(name), target)
            waiting = landed(self.kube.list_resource_claims(), name, fenced, target.keep)
            elapsed = self.clock() - since
            if not waiting and elapsed >= self.settings.dra_fence_settle_s:
                break
            if waiting and elapsed >= self.settings.dra_drain_timeout_s:
                why = (f"claim(s) allocated on fenced devices after planning still there after "
                       f"{self.settings.dra_drain_timeout_s:.0f} s: {'; '.join(waiting)}")  # fmt: skip
                return self._end(name, target, "drain-timeout", why, None)
            self._sleep()
        self._step(name, "dra-drained")
        extra = {"annotations": {IN_PLACE_TARGET: wire.encode_target(agent_target(target))}}
        self._set_phase(name, target, DRA_APPLYING, extra)
        self._step(name, "dra-target-written")
        return self._await_agent(name, target, self.clock())

    def _await_agent(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            answer = agent_answer(annotations_of(node), target.plan_id, self.clock() - since,
                                  self.settings.dra_agent_timeout_s)  # fmt: skip
            if answer is not None and answer.result == "applied":
                break
            if answer is not None:
                return self._end(name, target, answer.result, answer.why, answer.status, uncertain=answer.uncertain)
            self._sleep()
        self._step(name, "dra-applied-seen")
        self._set_phase(name, target, DRA_ADVERTISING)
        return self._await_slices(name, target, self.clock())

    def _await_slices(self, name: str, target: Target, since: float) -> str:
        timeout = self.settings.dra_advertise_timeout_s
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            problem = slices_mismatch(self._pool(name), target)
            if not problem:
                break
            if self.clock() - since >= timeout:
                why = f"the DRA plugin did not list the new MIG devices within {timeout:.0f} s: {problem}"
                status, _ = read_status(annotations_of(node), target.plan_id)
                if status is not None and status.gpus:  # what the agent says the GPUs hold: the truth about them
                    return self._end(name, target, "timeout", why, status)
                return self._end(name, target, "timeout", why, None, layout=dict(target.gpus))
            self._sleep()
        self._step(name, "dra-advertised")
        return self._end(name, target, "applied", "", None, layout=dict(target.gpus))

    # -- the way out -----------------------------------------------------------------------------------------

    def _lift(self, name: str) -> int:
        """Delete this node's reshape fences; how many this call deleted."""
        return sum(1 for rule, uid, _ in self._fences(name) if self.kube.delete_device_taint_rule(rule, uid))

    def _end(
        self, name: str, target: Target, result: str, reason: str, status: wire.Status | None, *,
        layout: Mapping[int, GpuConfig] | None = None, uncertain: bool = False, backoff: bool = True,
    ) -> str:  # fmt: skip
        """Lift the fences, then record in one conditional write. `result`: applied, drain-timeout, blocked,
        failed, timeout, released."""
        self._lift(name)
        ok = result == "applied"

        def mutate(node: Obj) -> Obj | None:
            current = annotations_of(node)
            if not current.get(PLAN_ID):
                return None  # done already (a retried write whose response was lost)
            self._owned(node, target)
            ann = end_annotations(name, current, self.settings, self.config.gpu_operator.layout_annotation,
                                  self.clock(), ok=ok, reason=reason, layout=layout, status=status,
                                  backoff=backoff)  # fmt: skip
            if not self._tainted(node):
                return {"metadata": {"annotations": ann}}
            # never set on this path, but one left by hand or an older change must not outlive the phase
            taints = [t for t in taints_of(node) if t.get("key") != self.taint_key]
            return {"metadata": {"annotations": ann}, "spec": {"taints": taints}}

        self.kube.update_node(name, mutate, what="end (dra)")
        window = self.clock() - target.started if target.started else 0.0
        if window > 0:
            self.metrics.dra_window.observe(window)
        self.metrics.dra_changes.labels(result).inc()
        if ok:
            self.metrics.succeeded.inc()
            self.metrics.duration.observe(max(window, 0.0))
            self.outcomes.append((name, "succeeded", ""))
            self._log(target, name, "changed in place on DRA in %.1f s; fences lifted", window)
            msg = f"plan {target.plan_id}: changed in place, the changed GPUs fenced {window:.1f} s; fences lifted"
            self.events.emit(ev.node_ref(name), ev.RECONFIGURED, msg)
            for pod in target.pods:
                self.events.emit(ev.pod_ref(pod), ev.RECONFIGURED, f"node {name} changed in place for this pod")
            return "succeeded"
        self.metrics.failed.labels(f"dra-{result}").inc()
        self.outcomes.append((name, "rolled-back", reason))
        self._log(target, name, "DRA change ended (%s), fences lifted: %s", result, reason, level=logging.WARNING)
        self.events.emit(
            ev.node_ref(name),
            ev.NEEDS_ATTENTION if uncertain else ev.ROLLED_BACK,
            f"plan {target.plan_id}: DRA change {result}, fences lifted: {reason}"
            + ("; the GPUs may differ from migctl.io/layout until the agent reports them" if uncertain else ""),
            warning=True,
        )
        return "rolled-back"
