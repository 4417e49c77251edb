"""KubeApi's retries (tenacity): transient errors retried a bounded number of times, permanent ones and 409s
not at all; a 429 on an eviction is a verdict (`blocked`), not retried blindly; stopping ends retries."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from migctl.adapters.kube import KubeApi, Stopped
from migctl.adapters.kube.errors import ConflictError, PermanentError, TransientError


def _api(attempts: int = 4) -> KubeApi:
    return KubeApi(client.ApiClient(), attempts=attempts, max_wait_s=0.001)


def _failing(statuses: list[int], result: Any = "ok") -> Any:
    calls: list[int] = []

    def fn() -> Any:
        calls.append(1)
        if len(calls) <= len(statuses):
            raise ApiException(status=statuses[len(calls) - 1], reason="injected")
        return result

    fn.calls = calls  # type: ignore[attr-defined]
    return fn


def test_transient_errors_are_retried_until_success() -> None:
    fn = _failing([500, 503, 429])
    assert _api().call("x", fn) == "ok"
    assert len(fn.calls) == 4


def test_retries_are_bounded() -> None:
    fn = _failing([500] * 10)
    with pytest.raises(TransientError):
        _api(attempts=3).call("x", fn)
    assert len(fn.calls) == 3


@pytest.mark.parametrize(("status", "kind"), [(403, PermanentError), (422, PermanentError), (409, ConflictError)])
def test_permanent_errors_and_conflicts_are_not_retried(status: int, kind: type[Exception]) -> None:
    fn = _failing([status])
    with pytest.raises(kind):
        _api().call("x", fn)
    assert len(fn.calls) == 1


def test_conflicts_retried_only_when_asked() -> None:
    fn = _failing([409])
    assert _api().call("x", fn, retry_conflict=True) == "ok"


def test_eviction_429_is_blocked_and_404_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    kube = _api()
    calls: list[int] = []

    def evict(name: str, namespace: str, body: Any, **kw: Any) -> None:
        calls.append(1)
        raise ApiException(status=429 if name == "guarded" else 404, reason="x")

    monkeypatch.setattr(kube.core, "create_namespaced_pod_eviction", evict)
    assert kube.evict("ns", "guarded") == "blocked"
    assert kube.evict("ns", "gone") == "gone"
    assert len(calls) == 2  # no blind retries of a PDB's answer


def test_stopping_ends_retries_and_blocks_writes() -> None:
    stop = threading.Event()
    kube = KubeApi(client.ApiClient(), attempts=50, max_wait_s=0.001, stop=stop)
    calls: list[int] = []

    def fn() -> None:
        calls.append(1)
        if len(calls) == 2:
            stop.set()
        raise ApiException(status=500, reason="x")

    with pytest.raises(TransientError):
        kube.call("x", fn)
    assert len(calls) == 2
    with pytest.raises(Stopped):
        kube.patch_node("n", {})
