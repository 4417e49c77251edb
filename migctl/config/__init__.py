"""migctl's one configuration model (YAML file, `--config`, plus `MIGCTL_*` environment overrides).

Validation errors name the file (or the environment variable) and the field path, so a bad setting fails at
start with the exact field. Environment overrides use `MIGCTL_<SECTION>__<FIELD>` (double underscore between
levels, case-insensitive), e.g. `MIGCTL_CONTROLLER__DRY_RUN=true` or
`MIGCTL_CONTROLLER__LEADER_ELECTION__LEASE_NAME=migctl-b`; values are read as YAML scalars (`true`, `5`, `1.5`),
and they win over the file. (pydantic-settings is not a dependency; this small reader does the same job.)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from migctl.config.agent import AgentSettings
from migctl.config.fallback import FallbackSettings
from migctl.config.selector import LabelSelector
from migctl.config.webhook import WebhookSettings
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.errors import InputError, from_validation_error
from migctl.wire import names

ENV_PREFIX = "MIGCTL_"


class LeaderElectionSettings(BaseModel):
    """A coordination.k8s.io/v1 Lease decides which replica acts; the others only watch and serve metrics."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(True, description="Run two replicas safely. Off only for a single replica you trust.")
    lease_name: str = Field("migctl", description="Lease object name; replicas sharing it elect one leader.")
    lease_namespace: str = Field(
        "",
        description="Namespace of the Lease. Empty: the namespace migctl runs in (in a pod: env POD_NAMESPACE, else "
        "its service account's; the chart's release namespace), so every replica, the webhook and a workstation "
        "`migctl run` meet on one Lease. Out of a cluster, `migctl run` takes the Lease of the controller whose "
        "config ConfigMap it finds, and refuses to lead without one (config/cluster.py).",
    )
    lease_duration_s: float = Field(
        15.0, gt=0, description="A follower takes over when the leader has not renewed for this long (failover time)."
    )
    renew_deadline_s: float = Field(
        10.0, gt=0, description="A leader that cannot renew for this long stops acting (must be < lease duration)."
    )
    retry_period_s: float = Field(2.0, gt=0, description="How often to try to acquire or renew the Lease.")
    identity: str = Field("", description="This replica's holder identity; empty: hostname and process id.")

    @model_validator(mode="after")
    def _ordered(self) -> LeaderElectionSettings:
        if not self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ValueError(
                "need retry_period_s < renew_deadline_s < lease_duration_s, so an old leader stops acting before "
                "a new one can take over"
            )
        return self


class ControllerSettings(BaseModel):
    """How `migctl run` behaves on a live cluster. Every default is the safe one (docs/operations.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- where migctl writes -------------------------------------------------------------------------------
    configmap_name: str = Field(
        "migctl-mig-parted-config",
        description="migctl's own mig-parted ConfigMap (point the GPU Operator's migManager.config.name at it). "
        "Created on first use with the configs of gpu_operator.configmap_name, so existing labels still resolve.",
    )
    configmap_namespace: str = Field("gpu-operator", description="Namespace of migctl's ConfigMap.")
    node_selector: str = Field(
        "", description="Label selector limiting the nodes migctl manages (e.g. a GPU pool); empty: every node."
    )

    # -- loop ----------------------------------------------------------------------------------------------
    resync_interval_s: float = Field(
        30.0, gt=0, description="Full reconcile at least this often, even without watch events (nothing is missed)."
    )
    debounce_s: float = Field(
        2.0, ge=0, description="Delay after a relevant watch event, so a burst of events gives one reconcile."
    )
    batch_stable_s: float = Field(
        10.0, ge=0, description="Act once pending demand has been unchanged this long: a burst is planned together."
    )
    batch_max_s: float = Field(
        60.0, ge=0, description="...or at the latest this long after demand first appeared, even if it keeps moving."
    )
    poll_interval_s: float = Field(
        2.0, gt=0, description="How often a reconfiguring node is re-read while waiting (evictions, mig-manager)."
    )
    watch_timeout_s: float = Field(
        300.0, gt=0, description="Server-side watch timeout; watches restart from the last resourceVersion."
    )
    settle_s: float = Field(
        120.0,
        ge=0,
        description="Pods a reconfiguration was for stay out of planning this long after it ends, so they are not "
        "planned again elsewhere while kube-scheduler binds them.",
    )

    queue_gate: bool = Field(
        False,
        description="The webhook adds the scheduling gate migctl.io/queue to pods that ask for MIG profiles, and "
        "the controller lifts it at each reconcile, in kube-scheduler's queue order, once free instances serve "
        "the pod (pinned to their node) or its node's change starts: nothing binds before the plan has seen an "
        "instance free (docs/queue-gate.md). Off: pods are never gated (the controller still lifts any gate it "
        "finds). Recommended with the in-place path; on the stock path it measured worse.",
    )
    queue_gate_max_hold_s: float = Field(
        900.0,
        gt=0,
        description="A gated pod is released after this long (from its creation) whatever the plan says, so no "
        "plan holds a pod for longer.",
    )

    # -- guard rails ---------------------------------------------------------------------------------------
    max_concurrent_nodes: int = Field(
        4,
        ge=1,
        description="Nodes reconfiguring at once: a bad layout or a bug reaches at most this many. 1 left GPUs idle "
        "for minutes while nodes waited their turn (docs/simulation.md §4.3); set 1 where 4 nodes are most of the "
        "cluster's GPUs.",
    )
    cooldown_s: float = Field(
        60.0,
        ge=0,
        description="Minimum gap between the end of one attempt on a node and the start of the next (a failed "
        "attempt also backs off, failure_backoff_s).",
    )
    min_dwell_s: float = Field(
        300.0,
        ge=0,
        description="A layout migctl applied is kept at least this long (no flapping): with relabels of about a "
        "minute, migctl pauses a node for at most about a sixth of its time.",
    )
    failure_backoff_s: float = Field(
        600.0, ge=0, description="After a failed attempt the node is left alone this long, doubling per failure."
    )
    failure_backoff_max_s: float = Field(21600.0, ge=0, description="Cap of the doubling failure backoff (6 h).")
    max_evictions_per_hour: int = Field(
        10, ge=0, description="Evictions migctl may start in any rolling hour (only with planner.evictions set)."
    )
    eviction_timeout_s: float = Field(
        300.0, gt=0, description="Evictions refused (429, PDB) or pods not gone after this long: roll the node back."
    )
    mig_manager_timeout_s: float = Field(
        900.0,
        gt=0,
        description="Wait this long for nvidia.com/mig.config.state=success (mig-manager's own waits are 5 min "
        "each); then roll back. Also bounds the rollback's own wait.",
    )
    verify_timeout_s: float = Field(
        300.0, gt=0, description="After success, wait this long for allocatable and GFD counts to match the layout."
    )
    paused: bool = Field(False, description="Start no new reconfiguration (in-flight ones still finish safely).")
    pause_annotation: str = Field(
        names.PAUSED,
        description="Runtime pause switch: this annotation set to `true` on migctl's ConfigMap pauses like `paused`.",
    )
    dry_run: bool = Field(False, description="Plan, log and emit Events saying what would happen; no other writes.")
    opt_out_label: str = Field(
        names.EXCLUDE,
        description="Namespaces labelled (or pods annotated) with this key = `true`: their pods are neither planned "
        "for nor evicted. Nodes use planner.exclude_label.",
    )

    # -- the in-place path (docs/operations.md "Two actuation paths") -------------------------------------
    in_place_node_selector: str = Field(
        "",
        description="Label selector of nodes that use the in-place path besides those labelled "
        "migctl.io/actuation=in-place (empty: only the label). Their node agent changes MIG instances itself.",
    )
    in_place_max_concurrent_nodes: int = Field(
        2,
        ge=1,
        description="In-place nodes changing at once (their own limit: their window is seconds). Fewer than the "
        "stock path's while the agent is unconfirmed on real GPUs (docs/in-place.md); 4 simulates the same.",
    )
    in_place_cooldown_s: float = Field(
        30.0,
        ge=0,
        description="cooldown_s of in-place nodes: an in-place change moves no running pod and holds its node for "
        "seconds, so the stock path's minutes do not apply; this gap only keeps a node that keeps failing from "
        "being retried in a loop.",
    )
    in_place_min_dwell_s: float = Field(
        30.0,
        ge=0,
        description="min_dwell_s of in-place nodes: a layout the agent applied is kept at least this long, so the "
        "node does not flap between layouts on every arrival and departure.",
    )
    in_place_batch_stable_s: float = Field(
        10.0,
        ge=0,
        description="batch_stable_s for plans that change in-place nodes. The stock window's default: in the simulator "
        "a plan that waits for a burst to settle serves it better (GenAI 4x8 H100 +3 pt) at seconds of pending "
        "where every pod fits at once (docs/simulation.md).",
    )
    in_place_batch_max_s: float = Field(
        60.0, ge=0, description="batch_max_s for plans that change in-place nodes (>= in_place_batch_stable_s)."
    )
    in_place_admission_timeout_s: float = Field(
        30.0,
        ge=0,
        description="After tainting, wait at most this long for pods bound to the node but not yet admitted by the "
        "kubelet (they would fail admission while the device plugin re-registers); then go on.",
    )
    in_place_agent_timeout_s: float = Field(
        120.0, gt=0, description="Wait this long for the node agent's status for the plan; then untaint, back off."
    )
    in_place_advertise_timeout_s: float = Field(
        120.0,
        gt=0,
        description="After the agent applied the target, wait this long for allocatable to list the new instances "
        "(the device plugin re-registering); then untaint, back off.",
    )
    in_place_conflicts: list[str] = Field(
        ["hami.io/node-nvidia-register", "gpu=on"],
        description="Node labels or annotations (`key` or `key=value`) that mean another component creates and "
        "destroys MIG instances on the node (HAMi's device plugin by default; add your DRA driver's node label): "
        "migctl refuses the in-place path there, with an Event.",
    )

    # -- DRA nodes (docs/operations.md "DRA nodes") --------------------------------------------------------
    dra_max_fences_per_node: int = Field(
        32,
        ge=0,
        le=1024,
        description="DynamicMIG nodes: the most placement fences (DeviceTaintRules) migctl keeps on one node to steer "
        "the scheduler's first fit; past it, a MigctlFenceCapped Event. 0 turns steering off (no fence is made).",
    )
    dra_fence_settle_s: float = Field(
        2.0,
        ge=0,
        description="Static-MIG DRA nodes: after fencing the GPUs a change re-cuts, wait at least this long (the "
        "scheduler's informer seeing the DeviceTaintRules) before trusting that no new claim lands on them.",
    )
    dra_drain_timeout_s: float = Field(
        120.0,
        gt=0,
        description="Static-MIG DRA nodes: wait this long for claims that landed on a fenced device after planning "
        "to go; then lift the fences, back off, and let the next plan see them.",
    )
    dra_agent_timeout_s: float = Field(
        180.0,
        gt=0,
        description="Static-MIG DRA nodes: wait this long for the node agent's in-place-status (it re-cuts through "
        "NVML, then restarts the node's DRA kubelet-plugin pod); then lift the fences, back off.",
    )
    dra_advertise_timeout_s: float = Field(
        180.0,
        gt=0,
        description="Static-MIG DRA nodes: after the agent applied the target, wait this long for the node's "
        "ResourceSlices to list the new MIG devices (the plugin restarting and republishing); then lift the "
        "fences, back off.",
    )

    # -- API access ----------------------------------------------------------------------------------------
    api_retry_attempts: int = Field(6, ge=1, description="Attempts for one API call on transient errors.")
    api_retry_max_wait_s: float = Field(8.0, gt=0, description="Cap of the jittered exponential retry backoff.")
    api_timeout_s: float = Field(30.0, gt=0, description="Client-side timeout of one API request.")

    # -- observability -------------------------------------------------------------------------------------
    metrics_port: int | None = Field(
        8080, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz (0: any free port; null: off)."
    )
    metrics_address: str = Field("0.0.0.0", description="Address the metrics server binds.")
    unready_after_failed_reconciles: int = Field(
        3,
        ge=1,
        description="/readyz answers 503 once this many reconciles in a row have failed (the controller cannot "
        "plan); the next successful one makes it ready again.",
    )
    log_format: Literal["text", "json"] = Field(
        "text", description="`json`: one JSON object per line. Every component (agents, webhook, fallback) follows it."
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Root log level, of every component."
    )

    leader_election: LeaderElectionSettings = Field(default_factory=LeaderElectionSettings)

    @model_validator(mode="after")
    def _windows(self) -> ControllerSettings:
        if self.batch_max_s < self.batch_stable_s:
            raise ValueError("batch_max_s must be >= batch_stable_s")
        if self.in_place_batch_max_s < self.in_place_batch_stable_s:
            raise ValueError("in_place_batch_max_s must be >= in_place_batch_stable_s")
        if self.failure_backoff_max_s < self.failure_backoff_s:
            raise ValueError("failure_backoff_max_s must be >= failure_backoff_s")
        LabelSelector.parse(self.in_place_node_selector)  # ValueError naming the term
        for term in self.in_place_conflicts:
            if len(LabelSelector.parse(term).requirements) != 1 or term.strip().startswith("!") or "!=" in term:
                raise ValueError(f"in_place_conflicts: {term!r}: expected one `key` or `key=value`")
        return self

    @property
    def in_place_selector(self) -> LabelSelector:
        return LabelSelector.parse(self.in_place_node_selector)


class Config(BaseModel):
    """Everything an operator can set. Unknown keys are errors, so a typo never silently does nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: Literal["v1"] = Field(
        "v1",
        description="The config file's format version. Absent means v1; a file of another version is refused "
        "(written for a migctl that reads it differently).",
    )
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    gpu_operator: GpuOperatorSettings = Field(default_factory=GpuOperatorSettings)
    controller: ControllerSettings = Field(default_factory=ControllerSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    fallback: FallbackSettings = Field(default_factory=FallbackSettings)
    webhook: WebhookSettings = Field(default_factory=WebhookSettings)
    profiles_dirs: list[Path] = Field(default_factory=list, description="Extra catalog directories.")


def env_overrides(environ: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Nested settings from `MIGCTL_<SECTION>__<FIELD>` variables, and the variable names used."""
    out: dict[str, Any] = {}
    used: list[str] = []
    for key in sorted(environ):
        if not key.upper().startswith(ENV_PREFIX) or "__" not in key:
            continue
        parts = [p.lower() for p in key[len(ENV_PREFIX) :].split("__")]
        if not all(parts):
            continue
        raw = environ[key]
        try:
            value = yaml.safe_load(raw) if raw.strip() else raw
        except yaml.YAMLError:
            value = raw
        if isinstance(value, dict | list):
            value = raw  # only scalars: a value is one field, never a structure
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = value
            used.append(key)
    return out, used


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for k, v in extra.items():
        if isinstance(v, Mapping) and isinstance(merged.get(k), dict):
            merged[k] = _merge(merged[k], v)
        else:
            merged[k] = v
    return merged


def load_config(path: Path | None, environ: Mapping[str, str] | None = None) -> Config:
    """The config at `path` (defaults when None) with `MIGCTL_*` environment overrides applied."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except OSError as e:
            raise InputError(str(path), f"cannot read the config: {e.strerror}") from e
        except yaml.YAMLError as e:
            raise InputError(str(path), f"broken YAML: {e}") from e
        if not isinstance(loaded, dict):
            raise InputError(
                str(path),
                "expected a mapping of settings (planner:, gpu_operator:, controller:, agent:, fallback:, ...)",
            )
        data = loaded
    overrides, used = env_overrides(os.environ if environ is None else environ)
    source = str(path) if path is not None else "configuration"
    if used:
        source += f" (with environment overrides {', '.join(used)})"
    try:
        return Config.model_validate(_merge(data, overrides))
    except ValidationError as e:
        raise from_validation_error(source, e) from e
