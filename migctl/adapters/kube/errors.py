"""migctl's one family of Kubernetes API errors, mapped once from the client's exceptions: they say whether
retrying can help, and carry the API server's own message.

Transient (a retry may succeed): 409 Conflict (re-read and try again), 429 Too Many Requests (API priority and
fairness, or a PodDisruptionBudget refusing an eviction), 5xx, 408, timeouts and broken connections.
Permanent (retrying the same request cannot help): 400, 401, 403 (`ForbiddenError`), 404 (`NotFoundError`), 422
and any other 4xx. `CredentialsError`: no kubeconfig or in-cluster identity to talk with at all.
"""

from __future__ import annotations

import json

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from migctl.errors import MigctlError


class KubeError(MigctlError):
    """A failed API call; `status` is the HTTP status (None for connection problems), `message` the API
    server's explanation from its Status body ("" when it gave none)."""

    def __init__(self, what: str, status: int | None, reason: str, message: str = "") -> None:
        self.what, self.status, self.reason, self.message = what, status, reason, message
        super().__init__(f"{what}: {status or 'no response'} {reason}".strip())


class TransientError(KubeError):
    """Retrying may help (after a backoff, or after re-reading the object for a 409)."""


class ConflictError(TransientError):
    """409: the object changed since it was read (or already exists); re-read, then decide again."""


class TooManyRequestsError(TransientError):
    """429: throttled, or an eviction refused by a PodDisruptionBudget."""


class PermanentError(KubeError):
    """Retrying the same request cannot help (bad request, forbidden, not found, invalid)."""


class NotFoundError(PermanentError):
    """404."""


class ForbiddenError(PermanentError):
    """403: RBAC, or an admission policy refused the call."""


class CredentialsError(KubeError):
    """No usable kubeconfig or in-cluster credentials: nothing was sent."""

    def __init__(self, reason: str) -> None:
        super().__init__("no usable Kubernetes credentials", None, reason)
        self.args = (f"no usable Kubernetes credentials: {reason}",)

    def __str__(self) -> str:
        return str(self.args[0])


TRANSIENT_STATUSES = frozenset({408, 409, 429})
# What the client raises for a failed call: the API answered with an error, or the connection failed.
API_ERRORS = (ApiException, HTTPError, OSError)


def _server_message(err: ApiException) -> str:
    """The `message` of the Status object the API server answered with, if it sent one."""
    try:
        body = json.loads(err.body or "{}")
    except (ValueError, TypeError):
        return ""
    return str(body.get("message") or "") if isinstance(body, dict) else ""


def translate(err: BaseException, what: str) -> KubeError:
    """Map a client exception to a KubeError subclass; `what` names the call for logs and messages."""
    if isinstance(err, KubeError):
        return err
    if isinstance(err, ApiException):
        status = int(err.status) if err.status else None
        reason = str(err.reason or "")
        message = _server_message(err)
        if status is None or status == 0:
            return TransientError(what, None, reason or "no status", message)
        if status == 409:
            return ConflictError(what, status, reason, message)
        if status == 429:
            return TooManyRequestsError(what, status, reason, message)
        if status == 404:
            return NotFoundError(what, status, reason, message)
        if status == 403:
            return ForbiddenError(what, status, reason, message)
        if status >= 500 or status in TRANSIENT_STATUSES:
            return TransientError(what, status, reason, message)
        return PermanentError(what, status, reason, message)
    if isinstance(err, HTTPError | OSError):
        return TransientError(what, None, f"{type(err).__name__}: {err}")
    raise TypeError(f"not an API error: {err!r}")
