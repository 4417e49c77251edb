"""The per-node state machine: taint, drain, configure, wait for mig-manager, verify, untaint. Resumable.

State lives on the node, never only in memory: before each step migctl writes the plan id, the phase, when the
phase began and the target (layout, config name, pods to evict, the config to roll back to) as annotations, in
the same conditional write as the step's own change where it can (the taint, the label). A restarted or new
leader reads them and continues from the phase; timeouts are measured from `phase-since`, so no wait is ever
restarted from zero and no node stays tainted forever.

Phases (annotation `migctl.io/phase`):
  draining     taint set; evicting the pods the plan evicts, waiting for them to go
  applying     ConfigMap written, `nvidia.com/mig.config` set (state label cleared): waiting for success
  verifying    mig-manager said success: waiting for allocatable and GFD counts to match the layout
  rolling-back something failed: relabel to the previous config if the GPUs may have changed, then untaint
Done: taint removed, `migctl.io/layout` records the new layout, phase annotations cleared.

The pure parts (`mig_manager_verdict`, `capacity_mismatch`, `classify_pods`, `Target`) are unit-tested; the
`Actuator` drives them against the API. `hook(node, step)` runs at every step boundary (tests use it to
"kill" the controller there).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migctl.config import Config
from migctl.controller import events as ev
from migctl.controller.configmap import MIG_CONFIG, ConfigMapWriter
from migctl.controller.events import EventSink
from migctl.controller.guards import (
    BACKOFF_UNTIL,
    FAILURES,
    LAST_CHANGE,
    LAST_ERROR,
    PHASE,
    PHASE_SINCE,
    PLAN_ID,
    TARGET,
    EvictionLedger,
    NodeRecord,
    failure_backoff,
)
from migctl.controller.kubeapi import KubeApi, Obj, Stopped
from migctl.controller.metrics import Metrics
from migctl.core.label_values import MAX_INSTANCES_PER_POD
from migctl.core.migparted import GpuConfig
from migctl.core.naming import WHOLE_GPU_RESOURCE, profile_from_resource, resource_name
from migctl.core.quantity import parse_quantity, to_count

log = logging.getLogger(__name__)

MIG_STATE = "nvidia.com/mig.config.state"
ROLLBACK = "migctl.io/rollback"
DRAINING, APPLYING, VERIFYING, ROLLING_BACK = "draining", "applying", "verifying", "rolling-back"
PHASES = (DRAINING, APPLYING, VERIFYING, ROLLING_BACK)
# Hook points, in order (tests raise at each to simulate a crash there)
STEPS = ("tainted", "drained", "configmap-written", "labelled", "mig-manager-succeeded", "verified")
Hook = Callable[[str, str], None]
PHASE_ANNOTATIONS = (PLAN_ID, PHASE, PHASE_SINCE, TARGET, ROLLBACK)


class NodeChanged(Exception):  # noqa: N818 - a signal
    """The node no longer looks like the plan assumed (or another actor holds it): do not start."""


# ---------------------------------------------------------------------------------------------------------
# Pure parts


def layout_json(gpus: Mapping[int, GpuConfig]) -> dict[str, Any]:
    """The `migctl.io/layout` format the adapter reads: {"0": {"mig": true, "layout": {"1g.10gb": 7}}, ...}."""
    return {str(i): {"mig": g.mig_enabled, "layout": dict(g.layout)} for i, g in sorted(gpus.items())}


@dataclass(frozen=True)
class Target:
    """What one node is being changed to, and what the change may touch (persisted as `migctl.io/target`)."""

    plan_id: str
    config: str
    gpus: Mapping[int, GpuConfig]
    evict: tuple[str, ...] = ()  # pods (ns/name) the plan evicts
    keep: tuple[str, ...] = ()  # GPU pods on the node at plan time that stay (their GPU is unchanged)
    pods: tuple[str, ...] = ()  # pending pods this change is for
    previous_config: str | None = None  # the label before: what a rollback returns to
    started: float = 0.0

    def to_json(self) -> str:
        return json.dumps(
            {
                "plan": self.plan_id,
                "config": self.config,
                "gpus": layout_json(self.gpus),
                "evict": list(self.evict),
                "keep": list(self.keep),
                "pods": list(self.pods),
                "previous_config": self.previous_config,
                "started": self.started,
            },
            sort_keys=True,
            separators=(",", ":"),
        )

    @staticmethod
    def from_json(text: str) -> Target:
        d = json.loads(text)
        gpus = {
            int(i): GpuConfig.mig(g.get("layout") or {}) if g.get("mig", True) else GpuConfig.disabled()
            for i, g in (d.get("gpus") or {}).items()
        }
        return Target(
            plan_id=str(d["plan"]),
            config=str(d["config"]),
            gpus=gpus,
            evict=tuple(d.get("evict") or ()),
            keep=tuple(d.get("keep") or ()),
            pods=tuple(d.get("pods") or ()),
            previous_config=d.get("previous_config"),
            started=float(d.get("started") or 0.0),
        )


def mig_manager_verdict(labels: Mapping[str, str], config: str, elapsed: float, timeout: float) -> str:
    """While waiting for mig-manager: `success`, `failed`, `timeout`, `relabel` (label is not ours) or `wait`.

    migctl clears the state label in the same write that sets the config label, so a `success` seen
    afterwards is mig-manager's answer to *this* config, not a leftover from the previous one."""
    if labels.get(MIG_CONFIG) != config:
        return "relabel"
    state = labels.get(MIG_STATE, "")
    if state == "success":
        return "success"
    if state == "failed":
        return "failed"
    if elapsed >= timeout:
        return "timeout"
    return "wait"


def expected_resources(gpus: Mapping[int, GpuConfig]) -> Counter[str]:
    out: Counter[str] = Counter()
    for g in gpus.values():
        if not g.mig_enabled:
            out[WHOLE_GPU_RESOURCE] += 1
        for profile, n in g.layout if g.mig_enabled else ():
            out[resource_name(profile)] += n
    return out


def _count(value: object) -> int | None:
    """A resource or GFD count through the one strict parser; None when unreadable (then it cannot match)."""
    try:
        return to_count(parse_quantity(value), MAX_INSTANCES_PER_POD)
    except ValueError:
        return None


def capacity_mismatch(node: Obj, gpus: Mapping[int, GpuConfig]) -> str:
    """ "" when allocatable and GFD's count labels match the layout (stale zero-valued resources ignored)."""
    want = expected_resources(gpus)
    alloc = ((node.get("status") or {}).get("allocatable")) or {}
    have: dict[str, int] = {}
    for k, v in alloc.items():
        if profile_from_resource(k) or k == WHOLE_GPU_RESOURCE:
            n = _count(v)
            if n is not None and n > 0:
                have[k] = n
    problems = []
    if dict(want) != have:
        problems.append(f"allocatable {dict(sorted(have.items()))} != expected {dict(sorted(want.items()))}")
    labels = ((node.get("metadata") or {}).get("labels")) or {}
    gfd = {
        k[: -len(".count")]: _count(v)
        for k, v in labels.items()
        if profile_from_resource(k[: -len(".count")] if k.endswith(".count") else "")
    }
    gfd = {k: v for k, v in gfd.items() if v is not None and v > 0}
    want_mig = {k: v for k, v in want.items() if k != WHOLE_GPU_RESOURCE}
    if gfd != want_mig:
        problems.append(f"GFD counts {dict(sorted(gfd.items()))} != expected {dict(sorted(want_mig.items()))}")
    return "; ".join(problems)


@dataclass(frozen=True)
class PodView:
    key: str
    uid: str
    terminating: bool
    gpu: bool


def classify_pods(pods: Iterable[Obj], vram_resource: str) -> list[PodView]:
    """Pods bound to a node, with whether they hold a GPU resource (finished pods are left out)."""
    out = []
    for p in pods:
        meta, spec, status = p.get("metadata") or {}, p.get("spec") or {}, p.get("status") or {}
        if status.get("phase") in ("Succeeded", "Failed"):
            continue
        gpu = False
        for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
            res = c.get("resources") or {}
            for part in (res.get("limits") or {}, res.get("requests") or {}):
                for k, v in part.items():
                    if (k.startswith("nvidia.com/") or k == vram_resource) and str(v) not in ("0", ""):
                        gpu = True
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        out.append(PodView(key, str(meta.get("uid") or ""), bool(meta.get("deletionTimestamp")), gpu))
    return out


def drain_status(pods: Iterable[PodView], target: Target) -> tuple[list[str], list[PodView], list[str]]:
    """(unexpected GPU pods, pods still to evict, GPU pods still present that must go before configuring)."""
    allowed = set(target.keep) | set(target.evict)
    gpu = [p for p in pods if p.gpu]
    unexpected = sorted(p.key for p in gpu if not p.terminating and p.key not in allowed)
    to_evict = [p for p in gpu if p.key in target.evict and not p.terminating]
    remaining = sorted(p.key for p in gpu if p.key not in target.keep)
    return unexpected, to_evict, remaining


def _annotations(node: Obj) -> dict[str, str]:
    return dict(((node.get("metadata") or {}).get("annotations")) or {})


def _labels(node: Obj) -> dict[str, str]:
    return dict(((node.get("metadata") or {}).get("labels")) or {})


def _taints(node: Obj) -> list[Obj]:
    return list(((node.get("spec") or {}).get("taints")) or [])


# ---------------------------------------------------------------------------------------------------------
# The driver


@dataclass
class Rollback:
    reason: str
    cause: str  # metric label: eviction, unexpected-pod, mig-manager-failed, mig-manager-timeout, verify, error
    relabel: bool  # the GPUs may have changed: return the label to the previous config
    backoff: bool = True
    uncertain: bool = False

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)

    @staticmethod
    def from_json(text: str) -> Rollback:
        d = json.loads(text)
        return Rollback(str(d["reason"]), str(d.get("cause", "error")), bool(d.get("relabel")),
                        bool(d.get("backoff", True)), bool(d.get("uncertain")))  # fmt: skip


@dataclass
class Actuator:
    """Drives one node at a time through the phases (one instance may serve many nodes, one thread each)."""

    kube: KubeApi
    config: Config
    configmaps: ConfigMapWriter
    events: EventSink
    metrics: Metrics
    ledger: EvictionLedger
    stop: threading.Event
    hook: Hook | None = None
    clock: Callable[[], float] = time.time
    outcomes: list[tuple[str, str, str]] = field(default_factory=list)  # (node, outcome, reason)

    @property
    def taint_key(self) -> str:
        return self.config.planner.reconfigure_taint

    @property
    def settings(self) -> Any:
        return self.config.controller

    # -- helpers -------------------------------------------------------------------------------------------

    def _step(self, node: str, step: str) -> None:
        if self.stop.is_set():
            raise Stopped(f"stopping before {step} on {node}")
        if self.hook is not None:
            self.hook(node, step)

    def _sleep(self) -> None:
        if self.stop.wait(self.settings.poll_interval_s):
            raise Stopped("stopping while waiting")

    def _log(self, target: Target | None, node: str, msg: str, *args: object, level: int = logging.INFO) -> None:
        log.log(level, msg, *args, extra={"plan_id": target.plan_id if target else "", "node": node})

    def _owned(self, node: Obj, target: Target) -> None:
        ann = _annotations(node)
        if ann.get(PLAN_ID) != target.plan_id:
            raise NodeChanged(f"node is held by plan {ann.get(PLAN_ID)!r}, not {target.plan_id}")

    def _set_phase(self, name: str, target: Target, phase: str, extra: Obj | None = None) -> Obj:
        def mutate(node: Obj) -> Obj | None:
            self._owned(node, target)
            if _annotations(node).get(PHASE) == phase:
                return None  # already there (a retried write whose response was lost)
            patch: Obj = {"metadata": {"annotations": {PHASE: phase, PHASE_SINCE: f"{self.clock():.3f}"}}}
            for k, v in (extra or {}).items():
                patch["metadata"].setdefault(k, {}).update(v)
            return patch

        node = self.kube.update_node(name, mutate, what=f"phase {phase}")
        self.events.emit(ev.node_ref(name), ev.PHASE, f"plan {target.plan_id}: phase {phase}")
        self._log(target, name, "phase %s", phase)
        return node

    # -- entry points --------------------------------------------------------------------------------------

    def start(self, name: str, target: Target, expect: Callable[[Obj], bool]) -> str:
        """Begin: one conditional write sets the taint and every annotation. `expect(node)` re-checks that the
        fresh node still looks like what was planned (else NodeChanged: re-plan)."""

        def mutate(node: Obj) -> Obj | None:
            ann = _annotations(node)
            if ann.get(PLAN_ID) == target.plan_id:
                return None  # our own earlier write went through (its response was lost)
            if ann.get(PHASE) or any(t.get("key") == self.taint_key for t in _taints(node)):
                raise NodeChanged("already being reconfigured")
            if not expect(node):
                raise NodeChanged("changed since planning")
            taints = [*_taints(node), {"key": self.taint_key, "value": "true", "effect": "NoSchedule"}]
            now = f"{self.clock():.3f}"
            return {
                "metadata": {
                    "annotations": {
                        PLAN_ID: target.plan_id,
                        PHASE: DRAINING,
                        PHASE_SINCE: now,
                        TARGET: target.to_json(),
                        "migctl.io/last-attempt": now,
                    }
                },
                "spec": {"taints": taints},
            }

        self.kube.update_node(name, mutate, what="taint")
        self.metrics.started.inc()
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
        """Continue from whatever phase the node's annotations say (also used to resume after a restart)."""
        node = self.kube.read_node(name)
        ann = _annotations(node)
        phase = ann.get(PHASE, "")
        if not phase:
            return "idle"
        try:
            target = Target.from_json(ann[TARGET])
        except (KeyError, ValueError, TypeError) as e:
            self._log(None, name, "unreadable target annotation (%s): untainting", e, level=logging.ERROR)
            return self._finish_rollback(name, None, Rollback(f"unreadable {TARGET}: {e}", "error", False, True, True))
        since = float(ann.get(PHASE_SINCE) or self.clock())
        self._log(target, name, "driving from phase %s", phase)
        if phase == DRAINING:
            return self._drain(name, target, since)
        if phase == APPLYING:
            return self._wait(name, target, since)
        if phase == VERIFYING:
            return self._verify(name, target, since)
        if phase == ROLLING_BACK:
            try:
                rb = Rollback.from_json(ann.get(ROLLBACK) or "")
            except (ValueError, KeyError, TypeError):
                rb = Rollback("rollback resumed", "error", True)
            return self._rollback_continue(name, target, rb, since)
        return self._rollback(name, target, Rollback(f"unknown phase {phase!r}", "error", True))

    # -- phases --------------------------------------------------------------------------------------------

    def _drain(self, name: str, target: Target, since: float) -> str:
        blocked: list[str] = []
        while True:
            pods = classify_pods(self.kube.list_pods_on_node(name), self.config.planner.vram_resource)
            unexpected, to_evict, remaining = drain_status(pods, target)
            if unexpected:
                return self._rollback(
                    name,
                    target,
                    Rollback(
                        f"GPU pod(s) {', '.join(unexpected)} started on the node after planning; not evicting "
                        "pods the plan does not allow",
                        "unexpected-pod",
                        relabel=False,
                        backoff=False,
                    ),
                )
            blocked = []
            for pod in to_evict:
                result = self.kube.evict(*pod.key.split("/", 1))
                if result == "evicted":
                    self.metrics.evictions.inc()
                    self.ledger.record(self.clock())
                    self._log(target, name, "evicted %s", pod.key)
                    self.events.emit(
                        ev.pod_ref(pod.key, pod.uid),
                        ev.EVICTED,
                        f"evicted by migctl plan {target.plan_id} to reconfigure node {name}",
                    )
                elif result == "blocked":
                    blocked.append(pod.key)
            if not remaining:
                break
            if self.clock() - since >= self.settings.eviction_timeout_s:
                why = (
                    f"eviction of {', '.join(blocked)} refused (429: PodDisruptionBudget) for "
                    f"{self.settings.eviction_timeout_s:.0f} s"
                    if blocked
                    else f"pod(s) {', '.join(remaining)} still present after {self.settings.eviction_timeout_s:.0f} s"
                )
                return self._rollback(name, target, Rollback(why, "eviction", relabel=False))
            self._sleep()
        self._step(name, "drained")
        return self._apply(name, target)

    def _apply(self, name: str, target: Target) -> str:
        self.configmaps.ensure(target.config, target.gpus)
        self._step(name, "configmap-written")
        node = self.kube.read_node(name)
        self._owned(node, target)
        if _labels(node).get(MIG_CONFIG) == target.config:
            # Same name already set (an earlier failed attempt): mig-manager only reacts to a *change*.
            self._log(target, name, "toggling %s to re-trigger mig-manager", MIG_CONFIG)
            self.kube.patch_node(name, {"metadata": {"labels": {MIG_CONFIG: None}}}, "toggle label")
        self._set_phase(name, target, APPLYING, {"labels": {MIG_CONFIG: target.config, MIG_STATE: None}})
        self._step(name, "labelled")
        return self._wait(name, target, self.clock())

    def _wait(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            verdict = mig_manager_verdict(
                _labels(node), target.config, self.clock() - since, self.settings.mig_manager_timeout_s
            )
            if verdict == "success":
                self._set_phase(name, target, VERIFYING)
                self._step(name, "mig-manager-succeeded")
                return self._verify(name, target, self.clock())
            if verdict == "failed":
                return self._rollback(
                    name,
                    target,
                    Rollback(
                        "mig-manager reported nvidia.com/mig.config.state=failed", "mig-manager-failed", relabel=True
                    ),
                )
            if verdict == "timeout":
                state = _labels(node).get(MIG_STATE, "<none>")
                return self._rollback(
                    name,
                    target,
                    Rollback(
                        f"no success from mig-manager within {self.settings.mig_manager_timeout_s:.0f} s "
                        f"(state {state})",
                        "mig-manager-timeout",
                        relabel=True,
                    ),
                )
            if verdict == "relabel":
                self._log(target, name, "%s is not %s: setting it again", MIG_CONFIG, target.config)
                self.kube.patch_node(
                    name, {"metadata": {"labels": {MIG_CONFIG: target.config, MIG_STATE: None}}}, "relabel"
                )
            self._sleep()

    def _verify(self, name: str, target: Target, since: float) -> str:
        while True:
            node = self.kube.read_node(name)
            self._owned(node, target)
            problem = capacity_mismatch(node, target.gpus)
            if not problem:
                break
            if self.clock() - since >= self.settings.verify_timeout_s:
                return self._rollback(
                    name,
                    target,
                    Rollback(f"capacity never matched the layout: {problem}", "verify", relabel=False, uncertain=True),
                )
            self._sleep()
        self._step(name, "verified")
        return self._finish(name, target)

    def _finish(self, name: str, target: Target) -> str:
        layout = json.dumps({"gpus": layout_json(target.gpus), "config": target.config}, sort_keys=True)

        def mutate(node: Obj) -> Obj | None:
            current = _annotations(node)
            if not current.get(PLAN_ID) and current.get(self.config.gpu_operator.layout_annotation) == layout:
                return None  # done already (a retried write whose response was lost)
            self._owned(node, target)
            ann: dict[str, Any] = dict.fromkeys(PHASE_ANNOTATIONS)
            ann.update({
                self.config.gpu_operator.layout_annotation: layout,
                LAST_CHANGE: f"{self.clock():.3f}",
                FAILURES: None,
                BACKOFF_UNTIL: None,
                LAST_ERROR: None,
            })  # fmt: skip
            taints = [t for t in _taints(node) if t.get("key") != self.taint_key]
            return {"metadata": {"annotations": ann}, "spec": {"taints": taints or None}}

        self.kube.update_node(name, mutate, what="untaint")
        took = self.clock() - target.started if target.started else 0.0
        self.metrics.succeeded.inc()
        if took > 0:
            self.metrics.duration.observe(took)
        self.outcomes.append((name, "succeeded", ""))
        self._log(target, name, "reconfigured to %s in %.1f s; untainted", target.config, took)
        self.events.emit(
            ev.node_ref(name), ev.RECONFIGURED, f"plan {target.plan_id}: now {target.config}; taint removed"
        )
        for pod in target.pods:
            self.events.emit(ev.pod_ref(pod), ev.RECONFIGURED, f"node {name} reconfigured for this pod")
        return "succeeded"

    # -- rollback ------------------------------------------------------------------------------------------

    def _rollback(self, name: str, target: Target, rb: Rollback) -> str:
        self._log(target, name, "rolling back: %s", rb.reason, level=logging.WARNING)
        self._set_phase(name, target, ROLLING_BACK, {"annotations": {ROLLBACK: rb.to_json(), LAST_ERROR: rb.reason}})
        return self._rollback_continue(name, target, rb, self.clock(), relabelled=False)

    def _rollback_continue(self, name: str, target: Target, rb: Rollback, since: float, relabelled: bool = True) -> str:
        if rb.relabel:
            previous = target.previous_config
            if not previous:
                rb.uncertain = True  # nothing to return to: the adapter sees the node as unknown until fixed
            else:
                node = self.kube.read_node(name)
                self._owned(node, target)
                if _labels(node).get(MIG_CONFIG) != previous and not relabelled:
                    self.kube.patch_node(
                        name, {"metadata": {"labels": {MIG_CONFIG: previous, MIG_STATE: None}}}, "relabel previous"
                    )
                    since = self.clock()
                while True:
                    node = self.kube.read_node(name)
                    self._owned(node, target)
                    verdict = mig_manager_verdict(
                        _labels(node), previous, self.clock() - since, self.settings.mig_manager_timeout_s
                    )
                    if verdict == "success":
                        break
                    if verdict == "relabel":
                        self.kube.patch_node(
                            name, {"metadata": {"labels": {MIG_CONFIG: previous, MIG_STATE: None}}}, "relabel"
                        )
                    elif verdict in ("failed", "timeout"):
                        rb.uncertain = True
                        break
                    self._sleep()
        return self._finish_rollback(name, target, rb)

    def _finish_rollback(self, name: str, target: Target | None, rb: Rollback) -> str:
        def mutate(node: Obj) -> Obj | None:
            ann_now = _annotations(node)
            if target is not None:
                if not ann_now.get(PLAN_ID) and ann_now.get(LAST_ERROR) == rb.reason[:1000]:
                    return None  # done already (a retried write whose response was lost)
                self._owned(node, target)
            record = NodeRecord.from_annotations(name, ann_now)
            ann: dict[str, Any] = dict.fromkeys(PHASE_ANNOTATIONS)
            ann[LAST_ERROR] = rb.reason[:1000]
            if rb.backoff:
                failures = record.failures + 1
                ann[FAILURES] = str(failures)
                ann[BACKOFF_UNTIL] = f"{self.clock() + failure_backoff(failures, self.settings):.3f}"
            if rb.uncertain:
                ann[self.config.gpu_operator.layout_annotation] = None
            taints = [t for t in _taints(node) if t.get("key") != self.taint_key]
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
            + ("; the GPU layout is uncertain, check nvidia.com/mig.config.state" if rb.uncertain else ""),
            warning=True,
        )
        return "rolled-back"
