"""`migctl webhook` assembled: certificate, cluster view, admission handler, Events, HTTPS server, timers.

`Webhook.start()` returns once the server listens with a certificate (and, best effort, a first view and a
current caBundle); background threads then refresh the view every `refresh_s` and re-check the certificate
and the caBundle every `tls.check_interval_s`, and with the queue gate on read the controller's Lease
(`lease.py`: pods are gated only while it is fresh). `stop()` ends them all. The tests run it in-process.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from migctl.adapters.kube import ApiClient, KubeApi
from migctl.adapters.kube.errors import KubeError
from migctl.config import ControllerSettings
from migctl.config.webhook import WebhookSettings
from migctl.core.hardware.catalog import Catalog
from migctl.core.model.settings import GpuOperatorSettings, PlannerSettings
from migctl.webhook.admission import review
from migctl.webhook.certs import CertManager
from migctl.webhook.events import EventSender
from migctl.webhook.lease import LeaseWatch
from migctl.webhook.server import WebhookServer
from migctl.webhook.tls import ServingContext
from migctl.webhook.view import ClusterView
from migctl.wire.names import QUEUE_GATE

log = logging.getLogger(__name__)


class Webhook:
    def __init__(
        self,
        api: ApiClient,
        catalog: Catalog,
        settings: WebhookSettings | None = None,
        planner: PlannerSettings | None = None,
        operator: GpuOperatorSettings | None = None,
        controller: ControllerSettings | None = None,
    ) -> None:
        """`controller`: the controller's settings (`queue_gate`, and the Lease that says it is alive)."""
        self.settings = settings or WebhookSettings()
        self.planner = planner or PlannerSettings()
        self.namespace = os.environ.get("POD_NAMESPACE") or self.settings.namespace
        self.rules = self.settings.rules(self.planner)
        self.kube = KubeApi(api, attempts=1)  # one try: the timers try again
        self.context = ServingContext()
        self.certs = CertManager(self.kube, self.settings, self.context, self.namespace)
        self.view = ClusterView(self.kube, catalog, self.planner, operator)
        self.events = EventSender(self.kube, self.settings.event_wait_s)
        ctl = controller or ControllerSettings()
        self.lease = LeaseWatch(self.kube, ctl.leader_election) if ctl.queue_gate else None
        self.server: WebhookServer | None = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- admission ----------------------------------------------------------------------------------------

    def admit(self, body: Any) -> dict[str, Any]:
        summary = self.view.summary
        gate = self.lease is not None and self.lease.alive()
        outcome = review(body, summary.offers, self.rules, self.view.namespace_labels, gate)
        d = outcome.decision
        who = outcome.who
        if outcome.gated:
            log.info("pod %s: queue gate added", who)
        if d is not None:
            if d.action != "leave" or outcome.mentions_vram:
                log.info("pod %s: %s: %s", who, d.action, d.message)
            if (
                d.action == "rewrite"
                and outcome.pod is not None
                and self.settings.events
                and not outcome.dry_run  # sideEffects: NoneOnDryRun
            ):
                note = f"; scheduling gate {QUEUE_GATE} added (migctl's plan releases it)" if outcome.gated else ""
                self.events.submit(outcome.namespace, outcome.pod, outcome.request_uid, d.message + note)
        return outcome.response

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        self.certs.sync()  # raises when no certificate can be had: nothing to serve with
        try:
            self.view.refresh()
        except KubeError as e:
            log.warning("first view of the cluster failed (retrying every %.0f s): %s", self.settings.refresh_s, e)
        self.server = WebhookServer(
            self.settings.address,
            self.settings.port,
            lambda: self.context.context,
            self.admit,
            self.settings.path,
            self.view.ready.is_set,
        )
        self.server.start()
        self.events.start()
        self._every(self.settings.refresh_s, "view", self.view.refresh)
        self._every(self.settings.tls.check_interval_s, "certificate", self.certs.sync)
        if self.lease is not None:
            self.lease.refresh()
            self._every(self.lease.interval_s, "lease", self.lease.refresh)
        log.info("migctl webhook serving https on %s:%d%s", self.settings.address, self.port, self.settings.path)

    @property
    def port(self) -> int:
        return self.server.port if self.server else 0

    def _every(self, interval: float, what: str, fn: Callable[[], object]) -> None:
        def loop() -> None:
            while not self._stop.wait(interval):
                try:
                    fn()
                except Exception as e:  # keep serving; the next round retries
                    log.warning("%s refresh failed: %s", what, e)

        t = threading.Thread(target=loop, name=f"migctl-webhook-{what}", daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.stop()
        self.events.stop()
        for t in self._threads:
            t.join(timeout=5)
        self.context.close()

    def serve(self, stop: threading.Event) -> None:
        self.start()
        try:
            stop.wait()
        finally:
            self.stop()
