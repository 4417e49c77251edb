"""Events on rewritten pods, sent after admission.

At admission the pod does not exist yet: it has no uid, and a pod made from `generateName` (every Deployment's)
has no name either. So the webhook queues the Event and a worker sends it once the pod exists, with the pod's
uid in `involvedObject`, so `kubectl describe pod` shows it. A named pod is read by name; a generateName pod is
found by the admission request uid the webhook wrote into its `migctl.io/vram-choice` annotation. A pod that
never appears within `event_wait_s` (a later webhook rejected it, or it was a dry run) gets no Event; the
decision is logged either way.

The API cost is bounded, not per event: each pass makes at most one pod LIST per namespace, shared by every
generateName pod waited for there, served from the API server's watch cache (resourceVersion 0), and a pod not
found yet is looked for again with a doubling delay (`poll_s`, 2x, 4x, ... at most `max_poll_s`).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from migctl.adapters.events import event_body
from migctl.adapters.kube.errors import KubeError, NotFoundError
from migctl.adapters.kube.interface import Obj
from migctl.adapters.views import pod_view
from migctl.wire import vram_choice
from migctl.wire.names import VRAM_CHOICE as CHOICE_ANNOTATION

log = logging.getLogger(__name__)
COMPONENT = "migctl-webhook"
REASON = "MigctlVramProfile"


class EventApi(Protocol):
    def read_pod(self, namespace: str, name: str) -> Obj: ...
    def list_pods(self, namespace: str | None = None, field_selector: str = "", cached: bool = False) -> list[Obj]: ...
    def create_event(self, namespace: str, body: Obj) -> None: ...


@dataclass
class PendingEvent:
    namespace: str
    name: str  # "" for a generateName pod
    generate_name: str
    request_uid: str
    message: str
    deadline: float
    tries: int = 0
    next_at: float = field(default=0.0, compare=False)  # not looked for again before this (the doubling delay)


def _admission_uid(pod: Obj) -> str:
    """The admission request uid the webhook recorded on the pod; "" when there is none or the record is not one
    this migctl reads (another version's, or damaged: then it is no pod this webhook waits for)."""
    raw = pod_view(pod).annotations.get(CHOICE_ANNOTATION, "")
    if not isinstance(raw, str) or not raw:
        return ""
    try:
        return vram_choice.decode(raw).admission
    except (ValueError, TypeError):  # UnknownVersionError included
        return ""


class EventSender:
    """A bounded queue and one worker thread; `sent` keeps the last Events for tests and debugging."""

    def __init__(
        self,
        kube: EventApi,
        wait_s: float = 10.0,
        poll_s: float = 0.5,
        clock: Callable[[], float] = time.monotonic,
        max_poll_s: float = 4.0,
    ) -> None:
        self.kube = kube
        self.wait_s = wait_s
        self.poll_s = poll_s
        self.max_poll_s = max(max_poll_s, poll_s)
        self.lists = 0  # pod LISTs made (tests check they do not grow with the number of events)
        self.clock = clock
        self.queue: queue.Queue[PendingEvent] = queue.Queue(maxsize=1000)
        self.sent: list[tuple[str, str]] = []  # (namespace/name, message)
        self.host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def submit(self, namespace: str, pod: Obj, request_uid: str, message: str) -> None:
        view = pod_view(pod)
        item = PendingEvent(
            namespace,
            view.name,
            view.generate_name,
            request_uid,
            message,
            self.clock() + self.wait_s,
        )
        try:
            self.queue.put_nowait(item)
        except queue.Full:
            log.warning("event queue full; no Event for %s/%s: %s", namespace, item.name or item.generate_name, message)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="migctl-webhook-events", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        waiting: list[PendingEvent] = []
        while not self._stop.is_set():
            with contextlib.suppress(queue.Empty):
                waiting.append(self.queue.get(timeout=self.poll_s if waiting else 0.5))
            while True:  # everything queued now, then one pass over the API
                try:
                    waiting.append(self.queue.get_nowait())
                except queue.Empty:
                    break
            waiting = self.send_due(waiting)

    def send_due(self, waiting: list[PendingEvent]) -> list[PendingEvent]:
        """One pass over the events whose delay is up (one LIST per namespace at most); returns those still waiting."""
        now = self.clock()
        listed: dict[str, list[Obj] | None] = {}
        return [e for e in waiting if e.next_at > now or not self._attempt(e, listed)]

    def try_send(self, e: PendingEvent) -> bool:
        """Send the Event if the pod exists now; True when done with it (sent, or given up)."""
        return self._attempt(e, {})

    def _attempt(self, e: PendingEvent, listed: dict[str, list[Obj] | None]) -> bool:
        try:
            pod = self._find(e, listed)
        except KubeError as err:
            log.debug("looking for pod %s/%s: %s", e.namespace, e.name or e.generate_name, err)
            pod = None
        if pod is None:
            now = self.clock()
            e.next_at = now + min(self.poll_s * 2**e.tries, self.max_poll_s)
            e.tries += 1
            if now >= e.deadline:
                log.info(
                    "pod %s/%s did not appear within %.0f s; no Event (%s)",
                    e.namespace,
                    e.name or e.generate_name + "*",
                    self.wait_s,
                    e.message,
                )
                return True
            return False
        self._emit(e.namespace, pod, e.message)
        return True

    def _find(self, e: PendingEvent, listed: dict[str, list[Obj] | None]) -> Obj | None:
        """The pod by name, or (generateName) in this pass's one LIST of its namespace (`listed`, None: it failed)."""
        if e.name:
            try:
                return self.kube.read_pod(e.namespace, e.name)
            except NotFoundError:
                return None
        if e.namespace not in listed:
            listed[e.namespace] = None  # a failed LIST is not repeated within the pass
            self.lists += 1
            listed[e.namespace] = self.kube.list_pods(e.namespace, cached=True)
        for pod in listed[e.namespace] or []:
            if pod_view(pod).name.startswith(e.generate_name) and _admission_uid(pod) == e.request_uid:
                return pod
        return None

    def _emit(self, namespace: str, pod: Obj, message: str) -> None:
        view = pod_view(pod)
        name = view.name
        involved = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": name, "uid": view.uid or None}
        body = event_body(involved, REASON, message, COMPONENT, self.host)
        try:
            self.kube.create_event(namespace, body)
        except KubeError as err:
            log.warning("event for pod %s/%s not sent: %s", namespace, name, err)
            return
        self.sent.append((f"{namespace}/{name}", message))
        del self.sent[:-200]
