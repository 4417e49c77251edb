"""migctl's DeviceTaintRules on DRA devices ("fences"): their names and bodies, which ones migctl owns, and the
reconcile that makes the cluster hold what `Outcome.fences` says on DynamicMIG nodes.

Ownership: a rule is migctl's when it carries the labels `FENCE_NODE` and `FENCE_PURPOSE` (`placement`: DynamicMIG
steering, made here; `reshape`: a static-MIG change, made by controller/dra.py) and selects a device of NVIDIA's
driver. No other rule is ever created, changed or deleted. A rule fences one device (driver, pool, device: the only
selector KEP-5055 allows), NoSchedule only (never NoExecute: nothing running is evicted). Its name is deterministic
(`rule_name`), so every write is idempotent: a create that finds the rule answers `exists`, a delete that finds
none answers gone, and a cache that lags a write costs one such no-op, never a duplicate.

Each reconcile (leader only), `FenceKeeper.reconcile`:
* DynamicMIG nodes: create the fences `FencePlan.fenced` lists and are missing, delete the placement fences not
  listed. A node that no longer steers (not DynamicMIG, no plan) keeps none. A migctl that does not act keeps none
  either: paused, the leader lifts them all; in dry run the controller lifts them only while no live leader holds
  the Lease (it takes none itself, and must not undo a live leader's fences);
* reshape fences whose node has no change in flight (no phase annotation, no worker) are orphans: lifted;
* only this controller's nodes (`node_selector`); with no selector, also the rules of nodes that no longer exist.
An API error is logged and counted, and the next reconcile tries again. Events on the node: fences made and
lifted (one per node and reconcile that wrote), the cap reached and a claim that tolerates a fence (once per
change of the message).

Leadership: writes go through the term's API, which refuses writes once the term ends. A fence set half written
when leadership is lost stays as it is: each rule is one create or delete, and the next leader's first reconcile
completes or lifts it. Fences are not lifted on shutdown (a follower takes over in seconds and adopts them by
name); after an uninstall, `kubectl delete devicetaintrules -l migctl.io/fence-node` removes them.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Collection, Mapping, Sequence

from migctl.adapters.dra.taintrules import PLACEMENT, RESHAPE, OwnedRule, owned_rules
from migctl.adapters.kube.calls import Stopped
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import ControllerApi, Obj
from migctl.adapters.lease import lease_view
from migctl.config import ControllerSettings, LeaderElectionSettings
from migctl.controller import events as ev
from migctl.controller.events import EventSink
from migctl.controller.metrics import Metrics
from migctl.core.dra.fences import FENCE, FencePlan
from migctl.core.model.cluster import Taint
from migctl.reconcile.facts import NodeFacts
from migctl.wire.names import FENCE_NODE, FENCE_PURPOSE, MANAGED_BY, MIGCTL, NVIDIA_DRA_DRIVER, RESHAPE_TAINT

log = logging.getLogger("migctl.controller.fences")
API_VERSION = "resource.k8s.io/v1"
__all__ = [  # the rule reader's names are re-exported: controller/dra.py reads its reshape fences through them
    "FENCED", "FENCES_LIFTED", "FENCE_BYPASSED", "FENCE_CAPPED", "PLACEMENT", "RESHAPE", "RESHAPE_FENCE",
    "FenceKeeper", "OwnedRule", "lease_is_live", "node_label", "owned_rules", "rule_body", "rule_name",
]  # fmt: skip
RESHAPE_FENCE = Taint(RESHAPE_TAINT, "reshaping", "NoSchedule")
# Events (docs/operations.md lists them)
FENCED = "MigctlFenced"
FENCES_LIFTED = "MigctlFencesLifted"
FENCE_CAPPED = "MigctlFenceCapped"
FENCE_BYPASSED = "MigctlFenceBypassed"
_NOT_DNS = re.compile(r"[^a-z0-9.-]+")
_MAX_NAME = 253  # a DNS-1123 subdomain
_MAX_LABEL = 63
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?)?")
LEASE_SLACK = 1.5  # a Lease renewed within its duration times this is a live leader's


def _digest(*parts: str) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:10]


def rule_name(node: str, device: str, purpose: str) -> str:
    """`migctl-<purpose>-<node>-<device>`, a DNS-1123 name; lower-cased and cut with a digest of the whole where
    the plain form is not one (too long, or characters a name may not hold), so it is the same on every replica."""
    plain = f"migctl-{purpose}-{node}-{device}"
    clean = _NOT_DNS.sub("-", plain.lower()).strip("-.")
    if clean == plain and len(plain) <= _MAX_NAME:
        return plain
    return f"{clean[: _MAX_NAME - 11].rstrip('-.')}-{_digest(purpose, node, device)}"


def node_label(node: str) -> str:
    """The node's name as a label value (at most 63 characters), a digest when it does not fit: the annotation
    `FENCE_NODE` always holds the whole name."""
    if len(node) <= _MAX_LABEL and _LABEL_VALUE.fullmatch(node):
        return node
    return f"h-{_digest(node)}"


def rule_body(node: str, pool: str, device: str, purpose: str, taint: Taint) -> Obj:
    labels = {FENCE_NODE: node_label(node), FENCE_PURPOSE: purpose, MANAGED_BY: MIGCTL}
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceTaintRule",
        "metadata": {"name": rule_name(node, device, purpose), "labels": labels, "annotations": {FENCE_NODE: node}},
        "spec": {
            "deviceSelector": {"driver": NVIDIA_DRA_DRIVER, "pool": pool, "device": device},
            "taint": {"key": taint.key, "value": taint.value, "effect": taint.effect},
        },
    }


def lease_is_live(kube: ControllerApi, le: LeaderElectionSettings, now: float) -> bool:
    """A leader holds the Lease and renewed it within its duration (times `LEASE_SLACK`; the webhook's reading,
    `LeaseView.fresh`). Unreadable: assume it does (a dry-run controller then leaves fences alone rather than
    undo a live leader's)."""
    if not le.enabled or not le.lease_namespace:
        return False
    try:
        lease = kube.read_lease(le.lease_namespace, le.lease_name)
    except KubeError as e:
        log.warning("cannot read Lease %s/%s (%s): fences left as they are", le.lease_namespace, le.lease_name, e)
        return True
    return lease is not None and lease_view(lease).fresh(now, LEASE_SLACK) == ""


class FenceKeeper:
    """Carries out `Outcome.fences` and lifts orphaned reshape fences (module docstring); remembers the Events it
    sent so a repeated cap or bypass is said once."""

    def __init__(self, events: EventSink, metrics: Metrics) -> None:
        self.events, self.metrics = events, metrics
        self._notes: dict[tuple[str, str], str] = {}

    def after_step(
        self,
        kube: ControllerApi,
        fences: Mapping[str, FencePlan],
        rules: Sequence[OwnedRule],
        pools: Mapping[str, str],
        facts: Mapping[str, NodeFacts],
        busy: Collection[str],
        settings: ControllerSettings,
        paused: bool,
        now: float,
    ) -> None:
        """One reconcile's fences (`fences`: the step's `Outcome.fences`; `facts`: this controller's nodes;
        `busy`: nodes a worker changes now). Not acting (paused, dry run), the step makes no fence, so the ones
        held are lifted: by the leader when paused; in dry run only while no live leader holds the Lease."""
        if not (rules or fences):
            return
        dry = settings.dry_run
        if dry and (not rules or lease_is_live(kube, settings.leader_election, now)):
            return
        why = "migctl is paused" if paused else ""
        if dry:
            why = "migctl runs in dry run and no live leader holds the Lease"
        self.reconcile(
            kube,
            fences,
            rules,
            pools,
            facts.keys(),
            every_node=not settings.node_selector,
            changing={*busy, *(n for n, f in facts.items() if f.in_flight)},
            lift_only=dry,
            why_none=why,
        )

    def reconcile(
        self,
        kube: ControllerApi,
        plans: Mapping[str, FencePlan],
        rules: Sequence[OwnedRule],
        pools: Mapping[str, str],
        managed: Collection[str],
        *,
        every_node: bool,
        changing: Collection[str],
        lift_only: bool = False,
        why_none: str = "",
    ) -> None:
        """`plans`: the step's fences per DynamicMIG node; `rules`: migctl's rules now; `pools`: node -> its pool;
        `managed`: this controller's nodes (`every_node`: it manages every node, so a rule of a node that does not
        exist is its own); `changing`: nodes with a static-MIG change in flight (their reshape fences are the
        executor's); `lift_only`: create nothing, and leave reshape fences to the leader (dry run); `why_none`:
        why the nodes without a plan keep no fence (for the Event)."""
        mine = [r for r in rules if every_node or r.node in managed]
        lifted: dict[str, list[str]] = {}
        made: dict[str, list[str]] = {}
        try:
            for r in mine:
                if r.purpose == RESHAPE:
                    orphan = r.node not in changing and not lift_only
                    if orphan and self._delete(kube, r):
                        lifted.setdefault(r.node, []).append(r.device)
                    continue
                plan = plans.get(r.node)
                if (plan is None or r.device not in plan.fenced) and self._delete(kube, r):
                    lifted.setdefault(r.node, []).append(r.device)
            if not lift_only:
                held = {(r.node, r.device) for r in mine if r.purpose == PLACEMENT}
                made = self._create(kube, plans, held, pools)
        except Stopped:
            log.info("stopped acting: fences left as they are for the next leader")
            return
        for node, devices in sorted(lifted.items()):
            why = (
                "their reservation is served or no longer planned"
                if node in plans
                else (why_none or "the node has no change or plan that needs them")
            )
            self.events.emit(ev.node_ref(node), FENCES_LIFTED, f"lifted fence(s) on {', '.join(devices)}: {why}")
        gone = {(n, d) for n, devices in lifted.items() for d in devices}
        held_now = [(r.node, r.purpose) for r in mine if (r.node, r.device) not in gone]
        held_now += [(n, PLACEMENT) for n, devices in made.items() for _ in devices]
        self._report(plans, held_now)

    def _create(
        self, kube: ControllerApi, plans: Mapping[str, FencePlan], held: set[tuple[str, str]], pools: Mapping[str, str]
    ) -> dict[str, list[str]]:
        """Create the missing fences; the devices this call fenced, by node (`exists`: the cache lagged a write of
        ours, nothing to say)."""
        out: dict[str, list[str]] = {}
        for node, plan in sorted(plans.items()):
            made = out.setdefault(node, [])
            for device in plan.fenced:
                if (node, device) in held:
                    continue
                body = rule_body(node, pools.get(node, node), device, PLACEMENT, FENCE)
                try:
                    if kube.create_device_taint_rule(body) == "created":
                        made.append(device)
                    self.metrics.dra_fence_writes.labels("create", "ok").inc()
                except KubeError as e:
                    self.metrics.dra_fence_writes.labels("create", "error").inc()
                    log.warning("node %s: could not fence %s (retried next reconcile): %s", node, device, e,
                                extra={"node": node})  # fmt: skip
            if made:
                self.events.emit(
                    ev.node_ref(node),
                    FENCED,
                    f"fenced {', '.join(made)} ({FENCE.key}:{FENCE.effect}): the scheduler's first fit would take "
                    "them and strand memory the plan keeps for other pending claims",
                )
        return out

    def _delete(self, kube: ControllerApi, rule: OwnedRule) -> bool:
        """True when this call deleted it (False: gone already, or an error, logged and retried next time)."""
        try:
            deleted = kube.delete_device_taint_rule(rule.name, rule.uid)
        except KubeError as e:
            self.metrics.dra_fence_writes.labels("delete", "error").inc()
            log.warning("node %s: could not lift fence %s (retried next reconcile): %s", rule.node, rule.name, e,
                        extra={"node": rule.node})  # fmt: skip
            return False
        self.metrics.dra_fence_writes.labels("delete", "ok").inc()
        return deleted

    def _report(self, plans: Mapping[str, FencePlan], held: Sequence[tuple[str, str]]) -> None:
        """Metrics per node (`held`: (node, purpose) of each rule after this reconcile's writes), and the cap and
        bypass Events once per change of their message."""
        m = self.metrics
        m.dra_fences.clear()
        m.dra_bypasses.clear()
        m.dra_capped.clear()
        counts: dict[tuple[str, str], int] = {(node, PLACEMENT): 0 for node in plans}
        for key in held:
            counts[key] = counts.get(key, 0) + 1
        for (node, purpose), n in counts.items():
            m.dra_fences.labels(node, purpose).set(n)
        notes: dict[tuple[str, str], str] = {}
        for node, plan in sorted(plans.items()):
            bypass = [(c, d) for c, d in plan.bad if d in plan.fenced]
            m.dra_bypasses.labels(node).set(len(bypass))
            m.dra_capped.labels(node).set(1 if plan.capped else 0)
            if bypass:
                notes[(node, FENCE_BYPASSED)] = "claim(s) tolerating the fences take a fenced device anyway: " + (
                    ", ".join(f"{c} -> {d}" for c, d in bypass)
                    + f" (a toleration of {FENCE.key} bypasses migctl's steering; KEP-5055)"
                )
            if plan.capped:
                left = [(c, d) for c, d in plan.bad if d not in plan.fenced]
                notes[(node, FENCE_CAPPED)] = (
                    f"controller.dra_max_fences_per_node reached ({len(plan.fenced)} fences): first fit still "
                    "strands planned memory with " + ", ".join(f"{c} -> {d}" for c, d in left)
                )
        for (node, reason), message in notes.items():
            if self._notes.get((node, reason)) != message:
                self.events.emit(ev.node_ref(node), reason, message, warning=True)
        self._notes = notes
