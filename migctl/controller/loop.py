"""The controller: cache + leader election + an apscheduler loop that plans and executes what reconcile.py decides.

Triggers: a periodic full reconcile (`resync_interval_s`), a throttled reconcile `debounce_s` after a watch event
that can change a plan, and a wake-up when the batching window closes. One reconcile at a time (a trigger that
arrives meanwhile runs once more afterwards). A reconcile, on the leader only:
  1. resumes every node with a `migctl.io/phase` annotation that no worker drives (restarts, failover) and
     removes a migctl taint left without a phase (hand-edited nodes);
  2. builds the snapshot (snapshots.py) and freezes the nodes guard rails hold (each path's own cooldown and
     dwell) and the in-place nodes it must refuse (reconcile.refusals); leaves out the wasteful pods of a burst
     still arriving (reconcile.hold_burst) and looks again when it lands;
  3. plans; once demand has settled (batching window, one per path), `reconcile.decide` says which node changes
     start, on which path (mig-manager or in-place); each starts on its own worker thread (dry run: only Events);
  4. on DRA clusters, makes migctl's DeviceTaintRules what the step's fences say (fences.py): every reconcile,
     whether or not a batching window closed, since first fit allocates the pending claims meanwhile;
  5. publishes metrics and Events (reporting.py).
The decisions are pure (reconcile.py); this module only watches, leads and executes. Leadership loss sets the
term's stop flag: every worker stops before its next write.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from migctl.adapters.dra.taintrules import owned_rules
from migctl.adapters.kube import ApiClient, KubeApi, Obj, Stopped
from migctl.adapters.kube.cache import ClusterCache, fingerprint
from migctl.adapters.kube.errors import KubeError
from migctl.adapters.kube.interface import ControllerApi, ObjectCache
from migctl.adapters.memo import ConversionMemo
from migctl.adapters.views import is_pod, node_view, pod_view
from migctl.config import Config
from migctl.controller import events as ev
from migctl.controller.actuator import Actuator, Hook
from migctl.controller.configmap import ConfigMapWriter, referenced_configs
from migctl.controller.events import EventSink
from migctl.controller.executors import BEGIN  # how each path's change starts (one record per path)
from migctl.controller.fences import FenceKeeper
from migctl.controller.gates import TAINTED_STEPS, Gates, unplanned
from migctl.controller.leader import LeaderElector, default_identity
from migctl.controller.metrics import Metrics, MetricsServer
from migctl.controller.reporting import Reporter
from migctl.controller.scheduling import make_scheduler
from migctl.controller.snapshots import build_snapshot, dra_facts
from migctl.controller.workers import Workers
from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.model.plan import Plan
from migctl.core.planner import plan as make_plan
from migctl.reconcile.decide import Start, Windows
from migctl.reconcile.facts import NodeFacts, reserved_pods
from migctl.reconcile.guards import EvictionLedger
from migctl.reconcile.paths import opted_in
from migctl.reconcile.reasons import Code
from migctl.reconcile.step import Clock, Facts, Outcome, step
from migctl.wire.names import HOSTNAME

log = logging.getLogger(__name__)


class Controller(Workers):
    """`migctl run` in one object: `start()`, `stop()`; tests run several in one process."""

    def __init__(
        self,
        config: Config,
        api_client: ApiClient | None,
        *,
        catalog: Catalog | None = None,
        identity: str | None = None,
        hook: Hook | None = None,
        clock: Callable[[], float] = time.time,
        connect: Callable[[threading.Event], ControllerApi] | None = None,
        cache: ObjectCache | None = None,
    ) -> None:
        """`connect(stop)` gives the API calls that stop when `stop` is set, and `cache` the watched objects
        (both default to the real adapter on `api_client`; unit tests pass fakes of adapters/kube/interface.py)."""
        self.config, self.settings = config, config.controller
        self.api_client = api_client
        self.catalog = catalog or load_catalog(config.profiles_dirs)
        self.identity = identity or self.settings.leader_election.identity or default_identity()
        self.hook, self.clock = hook, clock
        self.metrics = Metrics()
        self._stop = threading.Event()
        self._connect = connect or self._kube_api
        self.kube = self._connect(self._stop)  # reads and Events
        self.pod_uids: dict[str, str] = {}  # pod key -> uid, of the last reconcile's watched pods (pod Events)
        self.events = EventSink(self.kube, self.identity, self.pod_uids.get)
        self.reporter = Reporter(self.metrics, self.events, self.settings)
        self.gates = Gates(self.metrics, self.events)
        self.fences = FenceKeeper(self.events, self.metrics)
        self.term_kube: ControllerApi | None = None  # the leader term's API: its writes stop when the term ends
        selector = self.settings.in_place_selector
        self.in_place = lambda labels: opted_in(labels, selector)  # one object: the memo's key
        self.ledger = EvictionLedger()
        self.cache: ObjectCache = cache or ClusterCache(
            self._client(),
            node_selector=self.settings.node_selector,
            configmaps=[
                (self.settings.configmap_namespace, self.settings.configmap_name),
                (config.gpu_operator.configmap_namespace, config.gpu_operator.configmap_name),
            ],
            on_change=self._on_change,
            watch_timeout_s=self.settings.watch_timeout_s,
            stop=self._stop,
        )
        self.conversions = ConversionMemo()  # objects converted by the last reconcile, by uid + resourceVersion
        self.windows = Windows(self.settings)
        self.scheduler = make_scheduler()  # jobs on daemon threads: SIGTERM never waits for a plan
        self.term_stop = threading.Event()
        self.term_stop.set()  # not leading yet
        self.actuator: Actuator | None = None
        self.workers: dict[str, threading.Thread] = {}
        self.settled: dict[str, float] = {}  # pod -> until when it stays out of planning
        self.last_plan: Plan | None = None
        self.last_plan_id = ""
        self.last_decisions: list[tuple[str, bool, Code]] = []
        self.last_outcome: Outcome | None = None
        self.failed_in_a_row = 0  # reconciles that raised since the last one that did not (readiness)
        self._lock = threading.Lock()  # workers, settled
        self._reconcile_lock = threading.Lock()
        self._again = threading.Event()
        self._leading = False
        self.elector: LeaderElector | None = None
        self.server: MetricsServer | None = None
        self.reconciles = 0
        self.strays: set[str] = set()  # in-flight nodes that left node_selector (or were never in the cache)
        self.resume_after: dict[str, tuple[float, int]] = {}  # node -> (not before, failed resumes in a row)

    def _client(self) -> ApiClient:
        if self.api_client is None:
            raise ValueError("no API client: pass one, or both connect= and cache=")
        return self.api_client

    def _kube_api(self, stop: threading.Event) -> KubeApi:
        s = self.settings
        return KubeApi(self._client(), attempts=s.api_retry_attempts, max_wait_s=s.api_retry_max_wait_s,
                       timeout_s=s.api_timeout_s, stop=stop)  # fmt: skip

    # -- lifecycle -----------------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        return self._leading

    @property
    def metrics_port(self) -> int | None:
        return self.server.port if self.server else None

    def start(self, sync_timeout: float = 60.0) -> None:
        if self.settings.metrics_port is not None:
            self.server = MetricsServer(
                self.metrics,
                self.settings.metrics_address,
                self.settings.metrics_port,
                self._healthy,
                self._ready,
            )
            self.server.start()
        self.cache.start()
        if not self.cache.wait_synced(sync_timeout):
            log.warning("caches not synced after %.0f s; continuing (readyz stays 503 until they are)", sync_timeout)
        self.scheduler.add_job(
            self._tick, "interval", seconds=self.settings.resync_interval_s, id="resync", max_instances=1
        )
        self.scheduler.start()
        le = self.settings.leader_election
        if le.enabled and not self.settings.dry_run:
            self.elector = LeaderElector(
                self._kube_api(self._stop), le, self.identity, self._started_leading, self._stopped_leading
            )
            self.elector.start()
        else:
            self._started_leading()  # dry run takes no Lease: it writes nothing but Events

    def stop(self, release: bool = True, join: float = 15.0) -> None:
        """Stop acting at once, then shut everything down (`release=False` acts like a crash: Lease kept)."""
        self.halt()
        if self.elector is not None:
            self.elector.stop(release=release)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if self.server is not None:
            self.server.stop()
        deadline = time.monotonic() + join
        for t in list(self.workers.values()):
            t.join(timeout=max(0.1, deadline - time.monotonic()))

    def halt(self) -> None:
        """Stop every write now (safe to call from a worker thread or a test hook)."""
        self._stop.set()
        self._stopped_leading()

    def _healthy(self) -> bool:
        return not self._stop.is_set() and self.scheduler.running

    def _ready(self) -> bool:
        """Synced, and able to plan: not `unready_after_failed_reconciles` failures in a row."""
        return self.cache.synced() and self.failed_in_a_row < self.settings.unready_after_failed_reconciles

    def _started_leading(self) -> None:
        if self._stop.is_set():
            return
        self.term_stop = threading.Event()
        kube = self._connect(self.term_stop)
        self.actuator = Actuator(
            kube=kube,
            config=self.config,
            configmaps=ConfigMapWriter(
                kube,
                self.settings.configmap_namespace,
                self.settings.configmap_name,
                self.config.gpu_operator,
                lambda: referenced_configs(kube.list_nodes()),  # fresh: the cache may lag a moment
                hook=self.hook,
            ),
            events=EventSink(kube, self.identity, self.pod_uids.get),
            metrics=self.metrics,
            ledger=self.ledger,
            stop=self.term_stop,
            hook=self._step,
            clock=self.clock,
        )
        self.gates.kube = self.term_kube = kube
        if not self.settings.dry_run:
            try:
                self.actuator.configmaps.ensure_exists()
            except (KubeError, Stopped) as e:
                log.error("could not create migctl's ConfigMap (retried on the next reconcile): %s", e)
        try:  # nodes in flight outside node_selector (relabelled mid-phase while no replica was running)
            self.strays |= {node_view(n).name for n in kube.list_nodes() if self._in_flight(n)}
        except (KubeError, Stopped) as e:
            log.error("could not list nodes for in-flight changes outside node_selector: %s", e)
        self._leading = True
        self.metrics.leader.set(1)
        log.info("acting as leader (%s)%s", self.identity, " in dry run" if self.settings.dry_run else "")
        self.trigger(0)

    def _step(self, node: str, step: str) -> None:
        """The actuator's hook: the queue gate's lifts that wait for a node's taint, then the caller's hook."""
        if step in TAINTED_STEPS:
            self.gates.on_step(node, step)
        if self.hook is not None:
            self.hook(node, step)

    def _stopped_leading(self) -> None:
        self.term_stop.set()
        if self._leading:
            log.warning("not leader any more: stopped acting")
        self._leading = False
        self.metrics.leader.set(0)

    # -- triggers ------------------------------------------------------------------------------------------

    def _facts(self, node: Obj) -> NodeFacts:
        v = node_view(node)
        return NodeFacts(v.name, v.labels, v.annotations, v.tainted(self.config.planner.reconfigure_taint))

    def _in_flight(self, node: Obj) -> bool:
        return self._facts(node).in_flight

    def _on_change(self, kind: str, event: str, obj: Obj) -> None:
        if kind == "Node" and event == "DELETED" and self._in_flight(obj):
            self.strays.add(node_view(obj).name)  # deleted, or relabelled out of node_selector
        if self._stop.is_set() or not self._leading:
            return
        if kind == "Pod":
            pod = pod_view(obj)
            # only pending pods, pods leaving a node, and pod deletions can change a plan
            if not pod.pending and event != "DELETED" and not pod.deleting:
                return
        self.trigger(self.settings.debounce_s)

    def trigger(self, delay: float, job_id: str = "debounce") -> None:
        """Reconcile after `delay` seconds; a trigger already pending is kept (a burst gives one reconcile)."""
        if not self.scheduler.running or self._stop.is_set():
            return
        if job_id == "debounce" and self.scheduler.get_job(job_id) is not None:
            return
        run_at = datetime.now(UTC) + timedelta(seconds=delay)
        self.scheduler.add_job(self._tick, "date", run_date=run_at, id=job_id, replace_existing=True)

    def _tick(self) -> None:
        try:
            self.reconcile()
        except Exception:
            self.failed_in_a_row += 1
            self.metrics.reconcile_errors.inc()
            log.exception("reconcile failed (%d in a row); the next trigger retries", self.failed_in_a_row)
        else:
            self.failed_in_a_row = 0
        self.metrics.failed_in_a_row.set(self.failed_in_a_row)

    # -- reconcile -----------------------------------------------------------------------------------------

    def reconcile(self) -> None:
        if not self._reconcile_lock.acquire(blocking=False):
            self._again.set()
            return
        try:
            while True:
                self._again.clear()
                self._reconcile_once()
                if not self._again.is_set():
                    break
        finally:
            self._reconcile_lock.release()

    def _paused(self) -> bool:
        if self.settings.paused:
            return True
        cm = self.cache.configmap(self.settings.configmap_namespace, self.settings.configmap_name)
        return cm is not None and node_view(cm).annotations.get(self.settings.pause_annotation) == "true"

    def _busy(self) -> set[str]:
        """The nodes a worker is changing now (under `_lock`)."""
        self.workers = {n: t for n, t in self.workers.items() if t.is_alive()}
        return set(self.workers)

    def _reconcile_once(self) -> None:
        if not self._leading or self._stop.is_set() or not self.cache.synced():
            return
        self.reconciles += 1
        now = self.clock()
        nodes = self.cache.nodes.items()
        paused = self._paused()
        self.metrics.paused.set(1 if paused else 0)
        with self._lock:
            in_flight = self._busy()
            self.settled = {p: until for p, until in self.settled.items() if until > now}
            reserved = set(self.settled)
        self.metrics.in_flight.set(len(in_flight))

        # 1. resume nodes left mid-way (dry run: release abandoned ones); clean orphaned taints and annotations
        facts = {f.name: f for f in map(self._facts, nodes)}
        reserved |= reserved_pods(facts.values())
        self._resume(facts, in_flight, now)

        # 2. the snapshot; then the one step the simulator runs too (reconcile/step.py)
        started = time.perf_counter()
        objects = self.cache.objects()
        self.pod_uids.clear()
        self.pod_uids.update({p.key: p.uid for p in map(pod_view, filter(is_pod, objects)) if p.uid})
        read = build_snapshot(self.cache, objects, self.config, self.catalog, self.conversions, reserved, self.in_place)
        snapshot = read.snapshot
        strays = unplanned(objects, {p.key for p in snapshot.pods} | reserved)
        modes = {n.name: n.dra for n in snapshot.nodes if n.dra}  # DRA nodes take a DRA path (reconcile/paths.py)
        facts = {name: dataclasses.replace(f, dra=modes.get(name, "")) for name, f in facts.items()}
        facts_now = Facts(
            snapshot, facts, frozenset(in_flight), paused, self.settings.queue_gate, read.opted_out,
            self.ledger.count(now), tuple(strays), dra_facts(read.dra, self.settings),
        )  # fmt: skip
        out = self.last_outcome = step(
            facts_now, self.windows, self.settings, Clock.at(now), lambda s: make_plan(s, self.config.planner)
        )
        result = self.last_plan = out.plan
        self.reporter.refused({n: r.text for n, r in out.refused.items()})
        self.reporter.planned(out.planned, result, time.perf_counter() - started)
        if self.term_kube is not None:  # DRA: migctl's DeviceTaintRules as the step's fences say (fences.py)
            pools = {name: pool.name for name, pool in read.dra.pools.items()}
            self.fences.after_step(self.term_kube, out.fences, owned_rules(objects), pools, facts, in_flight,
                                   self.settings, paused, now)  # fmt: skip

        # 3. carry out the outcome: when to look again, the pods left out, the gates, the starts and holds
        if out.burst_until is not None:  # a burst still arriving: look again once it has landed
            self.trigger(max(0.0, out.burst_until - now) + 0.01, job_id="burst")
        if out.report_unplaced:
            for u in result.unplaced:
                self.reporter.note(u.pod, ev.NOT_PLANNED, f"not planned: {u.reason}")
        if out.batch_due is not None:
            self.trigger(max(0.0, out.batch_due - now) + 0.01, job_id="batch")
        hostnames = {n.name: n.labels.get(HOSTNAME) for n in out.whole.nodes}
        if not out.ready:
            if any(n.changed for n in result.nodes):
                log.debug("plan waits for the batching window (demand %d pods)", len(out.planned.pending))
            self.gates.apply(out.lifts, hostnames, in_flight)
            return
        plan_id = self.last_plan_id = out.plan_id
        self.last_decisions = [(a.node, isinstance(a, Start), a.reason.code) for a in out.actions]
        self.metrics.held.set(sum(1 for a in out.actions if not isinstance(a, Start)))
        self.gates.apply(out.lifts, hostnames, in_flight)
        cached = {node_view(n).name: n for n in nodes}
        for a in out.actions:
            extra = {"plan_id": plan_id, "node": a.node, "decision": "start" if isinstance(a, Start) else "hold"}
            log.info("plan %s: node %s (%s path): %s", plan_id, a.node, a.path.name, a.reason, extra=extra)
            self.reporter.pod_events(result, plan_id, a.node, isinstance(a, Start))
            if isinstance(a, Start):
                self._execute(a, cached.get(a.node) or {}, result, plan_id, now)
            elif a.reason.code is not Code.PAUSED:
                self.events.emit(ev.node_ref(a.node), ev.HELD, f"plan {plan_id}: not starting: {a.reason}")

    def _execute(self, start: Start, node_obj: Obj, result: Plan, plan_id: str, now: float) -> None:
        """Start one node change on its own worker (in dry run: an Event saying what would happen)."""
        target = start.target
        if self.settings.dry_run:
            self.reporter.would_start(start, result, plan_id)
            return
        expected = fingerprint("Node", node_obj)
        with self._lock:
            self.settled.update(dict.fromkeys(target.pods, now + 10 * 3600))  # until the worker ends
        begin = BEGIN[start.path.name]
        self._spawn(
            start.node,
            lambda a, n=start.node, t=target, fp=expected: begin(  # type: ignore[misc]
                a, n, t, lambda fresh: fingerprint("Node", fresh) == fp
            ),
            target,
        )
