"""How every Kubernetes API call is made: through one client, errors translated into one family (`errors`),
transient ones retried a bounded number of times, writes refused once the caller stops.

Every call is retried with jittered exponential backoff (tenacity) only on transient errors, a bounded number
of times. Two transient kinds are *not* retried blindly here, because repeating the same request cannot help:
409 Conflict (the caller re-reads and decides again: `update_node`, the ConfigMap writer) and, for evictions,
429 (a PodDisruptionBudget said no; the actuator retries that against its own eviction timeout).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from kubernetes import client
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, stop_any, wait_random_exponential
from tenacity.stop import stop_base

from migctl.adapters.kube.errors import (
    API_ERRORS,
    ConflictError,
    TooManyRequestsError,
    TransientError,
    translate,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
Obj = dict[str, Any]


class Stopped(Exception):  # noqa: N818 - a signal, not an error
    """The caller is shutting down (or lost leadership): no further API writes."""


class _StopWhen(stop_base):
    """Give up retrying as soon as the controller stops (or loses leadership)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


class ApiCalls:
    """One client and the way to call it (`call`); `KubeApi` adds the calls. Thread-safe (one client, many
    threads). `attempts=1` calls once (for callers that try again on their own cadence)."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        attempts: int = 6,
        max_wait_s: float = 8.0,
        timeout_s: float = 30.0,
        stop: threading.Event | None = None,
    ) -> None:
        self.api_client = api_client
        # The client's models are only partly annotated and migctl sends plain dicts: reached through Any.
        self.core: Any = client.CoreV1Api(api_client)
        self.coordination: Any = client.CoordinationV1Api(api_client)
        self.admission: Any = client.AdmissionregistrationV1Api(api_client)
        self.resource: Any = client.ResourceV1Api(api_client)  # resource.k8s.io/v1: DRA
        self.attempts, self.max_wait_s, self.timeout_s = attempts, max_wait_s, timeout_s
        self.stop = stop or threading.Event()

    # -- plumbing -----------------------------------------------------------------------------------------

    def to_dict(self, obj: Any, kind: str | None = None) -> Obj:
        out: Obj = self.api_client.sanitize_for_serialization(obj)
        if kind:
            out["kind"] = kind
        return out

    def call(self, what: str, fn: Callable[[], T], *, retry_conflict: bool = False, retry_throttle: bool = True) -> T:
        """Run `fn`, translating errors; retry transient ones (see the module docstring for the exceptions)."""

        def retryable(e: BaseException) -> bool:
            if not isinstance(e, TransientError):
                return False
            if isinstance(e, ConflictError):
                return retry_conflict
            if isinstance(e, TooManyRequestsError):
                return retry_throttle
            return True

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            log.warning("retrying %s after %s (attempt %d)", what, exc, state.attempt_number)

        def attempt() -> T:
            try:
                return fn()
            except API_ERRORS as e:
                raise translate(e, what) from e

        retrying = Retrying(
            retry=retry_if_exception(retryable),
            stop=stop_any(stop_after_attempt(self.attempts), _StopWhen(self.stop)),
            wait=wait_random_exponential(multiplier=0.1, max=self.max_wait_s),
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(attempt)

    def _guard(self) -> None:
        if self.stop.is_set():
            raise Stopped("stopping: no more API writes")
