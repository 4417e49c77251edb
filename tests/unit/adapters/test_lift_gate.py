"""KubeApi.lift_gate: one JSON patch that tests the gate's index and name, removes it and (optionally) pins the pod;
a concurrent change of the gates is read again, a pod gone or already ungated is no error."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from migctl.adapters.kube import KubeApi
from migctl.adapters.kube.api import gate_lift_ops
from migctl.adapters.kube.errors import KubeError
from migctl.wire.names import HOSTNAME, QUEUE_GATE
from tests.unit.fake_cluster import json_patch
from tests.unit.kube_builders import pod

OTHER = {"name": "example.com/other"}


def _pod(gates: list[dict[str, str]], selector: dict[str, str] | None = None) -> dict[str, Any]:
    p = pod("p", {"nvidia.com/mig-1g.10gb": "1"})
    p["spec"]["schedulingGates"] = gates
    if selector is not None:
        p["spec"]["nodeSelector"] = selector
    return p


@pytest.mark.parametrize(
    ("gates", "selector", "hostname", "after_gates", "after_selector"),
    [
        ([{"name": QUEUE_GATE}], None, None, [], None),
        ([OTHER, {"name": QUEUE_GATE}], None, "h1", [OTHER], {HOSTNAME: "h1"}),
        ([{"name": QUEUE_GATE}, OTHER], {"zone": "a"}, "h1", [OTHER], {"zone": "a", HOSTNAME: "h1"}),
        ([{"name": QUEUE_GATE}], {HOSTNAME: "h1"}, "h1", [], {HOSTNAME: "h1"}),  # already pinned: not re-added
    ],
)
def test_the_patch_removes_only_migctls_gate_and_pins(
    gates: list[dict[str, str]],
    selector: dict[str, str] | None,
    hostname: str | None,
    after_gates: list[dict[str, str]],
    after_selector: dict[str, str] | None,
) -> None:
    before = _pod(gates, selector)
    ops = gate_lift_ops(before, hostname)
    assert ops is not None and ops[0]["op"] == "test" and ops[0]["value"] == QUEUE_GATE
    after = json_patch(before, ops)
    assert after["spec"]["schedulingGates"] == after_gates
    assert after["spec"].get("nodeSelector") == after_selector
    if hostname and selector and HOSTNAME in selector:
        assert len(ops) == 2


def test_no_gate_no_patch() -> None:
    assert gate_lift_ops(_pod([OTHER]), "h1") is None
    assert gate_lift_ops(pod("p"), None) is None


def test_the_test_op_refuses_a_changed_gate_list() -> None:
    """The patch built for one list of gates, applied after someone put another gate in front: it fails whole."""
    ops = gate_lift_ops(_pod([{"name": QUEUE_GATE}, OTHER]), None)
    assert ops is not None
    with pytest.raises(KubeError) as err:
        json_patch(_pod([OTHER, {"name": QUEUE_GATE}]), ops)
    assert err.value.status == 422


class _Server:
    """read_namespaced_pod and patch_namespaced_pod over one stored pod; `race` changes its gates once, between
    the adapter's read and its patch."""

    def __init__(self, obj: dict[str, Any] | None, race: list[dict[str, str]] | None = None) -> None:
        self.obj, self.race, self.patches = obj, race, 0

    def read(self, name: str, namespace: str, **kw: Any) -> dict[str, Any]:
        if self.obj is None:
            raise ApiException(status=404, reason="Not Found")
        return self.obj

    def patch(self, name: str, namespace: str, body: Any, **kw: Any) -> None:
        assert kw["_content_type"] == "application/json-patch+json"
        assert self.obj is not None
        self.patches += 1
        if self.race is not None:
            self.obj = {**self.obj, "spec": {**self.obj["spec"], "schedulingGates": self.race}}
            self.race = None
        try:
            self.obj = json_patch(self.obj, body)
        except KubeError as e:
            raise ApiException(status=e.status, reason="Unprocessable Entity") from e


def _kube(server: _Server, monkeypatch: pytest.MonkeyPatch) -> KubeApi:
    kube = KubeApi(client.ApiClient(), attempts=2, max_wait_s=0.001)
    kube.api_client.sanitize_for_serialization = lambda obj: obj  # type: ignore[method-assign]
    monkeypatch.setattr(kube.core, "read_namespaced_pod", server.read)
    monkeypatch.setattr(kube.core, "patch_namespaced_pod", server.patch)
    return kube


def test_lift_rereads_after_a_concurrent_change(monkeypatch: pytest.MonkeyPatch) -> None:
    server = _Server(_pod([{"name": QUEUE_GATE}, OTHER]), race=[OTHER, {"name": QUEUE_GATE}])
    assert _kube(server, monkeypatch).lift_gate("ns", "p", "h1") == "lifted"
    assert server.patches == 2  # the first failed its test op whole; the second was built from a fresh read
    assert server.obj is not None and server.obj["spec"]["schedulingGates"] == [OTHER]
    assert server.obj["spec"]["nodeSelector"] == {HOSTNAME: "h1"}


def test_gone_and_ungated_pods_are_not_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _kube(_Server(None), monkeypatch).lift_gate("ns", "p") == "gone"
    server = _Server(_pod([OTHER]))
    assert _kube(server, monkeypatch).lift_gate("ns", "p", "h1") == "ungated"
    assert server.patches == 0
