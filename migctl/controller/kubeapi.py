"""Thin wrappers over the Kubernetes client: plain-dict results, migctl's error types, bounded retries.

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

from migctl.controller.errors import (
    API_ERRORS,
    ConflictError,
    NotFoundError,
    TooManyRequestsError,
    TransientError,
    translate,
)

log = logging.getLogger(__name__)
T = TypeVar("T")
MERGE_PATCH = "application/merge-patch+json"
Obj = dict[str, Any]


class Stopped(Exception):  # noqa: N818 - a signal, not an error
    """The caller is shutting down (or lost leadership): no further API writes."""


class _StopWhen(stop_base):
    """Give up retrying as soon as the controller stops (or loses leadership)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.event.is_set()


class KubeApi:
    """The API calls the controller makes, each translated and retried. Thread-safe (one client, many threads)."""

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
        self.core = client.CoreV1Api(api_client)
        self.policy = client.PolicyV1Api(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
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

    # -- nodes --------------------------------------------------------------------------------------------

    def read_node(self, name: str) -> Obj:
        node = self.call(f"read node {name}", lambda: self.core.read_node(name, _request_timeout=self.timeout_s))
        return self.to_dict(node, "Node")

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        """A JSON merge patch (null deletes a key). With metadata.resourceVersion it is conditional (409)."""
        self._guard()
        node = self.call(
            f"{what} node {name}",
            lambda: self.core.patch_node(name, patch, _content_type=MERGE_PATCH, _request_timeout=self.timeout_s),
        )
        return self.to_dict(node, "Node")

    def update_node(self, name: str, mutate: Callable[[Obj], Obj | None], what: str = "update") -> Obj:
        """Read-modify-write with optimistic concurrency: `mutate(node)` returns a merge patch (None: nothing to
        do); it is applied only if the node is unchanged since the read, else re-read and decided again."""
        for _ in range(20):
            node = self.read_node(name)
            patch = mutate(node)
            if patch is None:
                return node
            meta = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = node["metadata"]["resourceVersion"]
            try:
                return self.patch_node(name, {**patch, "metadata": meta}, what)
            except ConflictError:
                log.info("node %s changed during %s; re-reading", name, what)
        raise ConflictError(f"{what} node {name}", 409, "still conflicting after 20 re-reads")

    def list_nodes(self) -> list[Obj]:
        nodes = self.call("list nodes", lambda: self.core.list_node(_request_timeout=self.timeout_s))
        return [self.to_dict(n, "Node") for n in nodes.items]

    def list_pods_on_node(self, node: str) -> list[Obj]:
        pods = self.call(
            f"list pods on {node}",
            lambda: self.core.list_pod_for_all_namespaces(
                field_selector=f"spec.nodeName={node}", _request_timeout=self.timeout_s
            ),
        )
        return [self.to_dict(p, "Pod") for p in pods.items]

    # -- evictions ----------------------------------------------------------------------------------------

    def evict(self, namespace: str, name: str) -> str:
        """Evict through the Eviction API (PDBs apply). Returns `evicted`, `gone` (404) or `blocked` (429)."""
        self._guard()
        body: Any = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        try:
            self.call(
                f"evict pod {namespace}/{name}",
                lambda: self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _request_timeout=self.timeout_s
                ),
                retry_throttle=False,
            )
        except NotFoundError:
            return "gone"
        except TooManyRequestsError:
            return "blocked"
        return "evicted"

    # -- ConfigMaps ---------------------------------------------------------------------------------------

    def read_configmap(self, namespace: str, name: str) -> Obj | None:
        try:
            cm = self.call(
                f"read configmap {namespace}/{name}",
                lambda: self.core.read_namespaced_config_map(name, namespace, _request_timeout=self.timeout_s),
            )
        except NotFoundError:
            return None
        return self.to_dict(cm, "ConfigMap")

    def create_configmap(self, namespace: str, body: Any) -> Obj:
        self._guard()
        name = body["metadata"]["name"]
        cm = self.call(
            f"create configmap {namespace}/{name}",
            lambda: self.core.create_namespaced_config_map(namespace, body, _request_timeout=self.timeout_s),
        )
        return self.to_dict(cm, "ConfigMap")

    def replace_configmap(self, namespace: str, body: Any) -> Obj:
        """Conditional on body.metadata.resourceVersion: 409 if someone else wrote first."""
        self._guard()
        name = body["metadata"]["name"]
        cm = self.call(
            f"replace configmap {namespace}/{name}",
            lambda: self.core.replace_namespaced_config_map(name, namespace, body, _request_timeout=self.timeout_s),
        )
        return self.to_dict(cm, "ConfigMap")

    # -- Events -------------------------------------------------------------------------------------------

    def create_event(self, namespace: str, body: Any) -> None:
        self.call(
            "create event",
            lambda: self.core.create_namespaced_event(namespace, body, _request_timeout=self.timeout_s),
        )

    # -- Leases (no retries: the elector has its own cadence) ---------------------------------------------

    def read_lease(self, namespace: str, name: str) -> Obj | None:
        try:
            lease = self.coordination.read_namespaced_lease(name, namespace, _request_timeout=self.timeout_s)
        except API_ERRORS as e:
            err = translate(e, f"read lease {namespace}/{name}")
            if isinstance(err, NotFoundError):
                return None
            raise err from e
        return self.to_dict(lease, "Lease")

    def write_lease(self, namespace: str, body: Any, create: bool) -> Obj:
        name = body["metadata"]["name"]
        try:
            if create:
                lease = self.coordination.create_namespaced_lease(namespace, body, _request_timeout=self.timeout_s)
            else:
                lease = self.coordination.replace_namespaced_lease(
                    name, namespace, body, _request_timeout=self.timeout_s
                )
        except API_ERRORS as e:
            raise translate(e, f"write lease {namespace}/{name}") from e
        return self.to_dict(lease, "Lease")
