"""The webhook without a cluster: AdmissionReview handling, JSONPatch, TLS and rotation, caBundle, HTTPS, Events."""

from __future__ import annotations

import base64
import datetime as dt
import json
import ssl
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from migctl.adapters.kube.errors import ConflictError, NotFoundError
from migctl.config.webhook import TlsSettings, WebhookSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.cluster import Taint
from migctl.core.vram.decide import CHOICE_ANNOTATION, ModelOffer, NodeOffer, VramRules
from migctl.errors import InputError
from migctl.webhook.admission import BadReviewError, apply_patch, json_patch, review
from migctl.webhook.certs import CertManager, set_ca_bundle
from migctl.webhook.configuration import webhook_configuration
from migctl.webhook.events import EventSender
from migctl.webhook.server import WebhookServer
from migctl.webhook.tls import CertBundle, ServingContext, renew, renewal_reason
from migctl.wire.vram_choice import VramChoice, decode, encode

CATALOG = load_catalog()
H100 = CATALOG.model("h100-80gb")
OFFERS = (ModelOffer(H100, ("NVIDIA-H100-80GB-HBM3",), (NodeOffer("n1", free={"1g.10gb": 1}),)),)
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def admission_review(pod: dict[str, Any], **req: Any) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "ns",
            "operation": "CREATE",
            "object": pod,
            **req,
        },
    }


def vram_pod(vram: str = "7Gi", **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ns", **meta},
        "spec": {"containers": [{"name": "m", "image": "x", "resources": {"limits": {"migctl.io/vram": vram}}}]},
    }


# -- AdmissionReview ------------------------------------------------------------------------------------------


def test_review_places_the_pod_by_the_planners_filter() -> None:
    """A tainted node the pod does not tolerate offers nothing; a malformed affinity rejects only a VRAM pod."""
    tainted = (ModelOffer(H100, ("NVIDIA-H100-80GB-HBM3",), (NodeOffer("n1", free={"1g.10gb": 1}, taints=(
        Taint("dedicated", "x"),)),)),)  # fmt: skip
    out = review(admission_review(vram_pod()), tainted, VramRules())
    assert out.response["response"]["allowed"] is False
    assert "untolerated taint dedicated=x:NoSchedule" in out.response["response"]["status"]["message"]
    tolerant = vram_pod()
    tolerant["spec"]["tolerations"] = [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]
    ok = review(admission_review(tolerant), tainted, VramRules())
    assert ok.decision is not None and (ok.decision.capacity, ok.decision.node) == ("free", "n1")
    broken = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"operator": "In", "values": ["a"]}]}]
            }
        }
    }  # fmt: skip  (no key)
    bad = vram_pod()
    bad["spec"]["affinity"] = broken
    rejected = review(admission_review(bad), OFFERS, VramRules())
    assert rejected.response["response"]["allowed"] is False
    assert "unreadable nodeSelector, node affinity or tolerations" in rejected.response["response"]["status"]["message"]
    plain = {"metadata": {"name": "q"}, "spec": {"affinity": broken, "containers": [{"name": "c", "image": "x"}]}}
    assert review(admission_review(plain), OFFERS, VramRules()).response["response"] == {"uid": "u-1", "allowed": True}


def test_rewrite_answers_with_a_jsonpatch_that_yields_the_rewritten_pod() -> None:
    pod = vram_pod()
    out = review(admission_review(pod), OFFERS, VramRules())
    resp = out.response["response"]
    assert out.response["apiVersion"] == "admission.k8s.io/v1"
    assert (resp["uid"], resp["allowed"], resp["patchType"]) == ("u-1", True, "JSONPatch")
    patch = json.loads(base64.b64decode(resp["patch"]))
    assert {op["path"] for op in patch} == {"/metadata/annotations", "/spec/containers", "/spec/affinity"}
    patched = apply_patch(pod, patch)
    assert patched == out.pod
    assert patched["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert out.decision is not None and out.decision.action == "rewrite"


def test_generate_name_pods_carry_the_request_uid_for_their_event() -> None:
    pod = vram_pod()
    del pod["metadata"]["name"]
    pod["metadata"]["generateName"] = "w-"
    out = review(admission_review(pod), OFFERS, VramRules())
    assert out.pod is not None
    assert decode(out.pod["metadata"]["annotations"][CHOICE_ANNOTATION]).admission == "u-1"
    named = review(admission_review(vram_pod()), OFFERS, VramRules())
    assert named.pod is not None
    record = named.pod["metadata"]["annotations"][CHOICE_ANNOTATION]
    assert "admission" not in json.loads(record) and json.loads(record)["version"] == "v1"
    assert decode(record).containers == decode(out.pod["metadata"]["annotations"][CHOICE_ANNOTATION]).containers


def test_reject_is_403_with_the_message() -> None:
    out = review(admission_review(vram_pod("100Gi")), OFFERS, VramRules())
    resp = out.response["response"]
    assert resp["allowed"] is False
    assert resp["status"]["code"] == 403
    assert "the largest MIG instance on the GPUs in this cluster is 7g.80gb" in resp["status"]["message"]
    assert "patch" not in resp


@pytest.mark.parametrize(
    "req",
    [
        {"operation": "UPDATE"},
        {"kind": {"group": "", "version": "v1", "kind": "Service"}},
        {"kind": {"group": "apps", "version": "v1", "kind": "Pod"}},
        {"subResource": "binding"},
    ],
)
def test_other_requests_are_allowed_unchanged(req: dict[str, Any]) -> None:
    out = review(admission_review(vram_pod(), **req), OFFERS, VramRules())
    assert out.response["response"] == {"uid": "u-1", "allowed": True}
    assert out.decision is None


def test_leave_alone_is_allowed_without_patch_and_namespace_labels_count() -> None:
    out = review(
        admission_review(vram_pod()), OFFERS, VramRules(), lambda ns: {"migctl.io/webhook": "disabled"} if ns else None
    )
    assert out.response["response"] == {"uid": "u-1", "allowed": True}
    assert out.decision is not None and out.decision.action == "leave"


def test_dry_run_flag_is_reported() -> None:
    assert review(admission_review(vram_pod(), dryRun=True), OFFERS, VramRules()).dry_run


@pytest.mark.parametrize(
    ("body", "msg"),
    [
        ([], "expected an AdmissionReview"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1", "request": {}}, "apiVersion"),
        ({"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {}}, "uid"),
    ],
)
def test_bad_reviews(body: Any, msg: str) -> None:
    with pytest.raises(BadReviewError, match=msg):
        review(body, OFFERS, VramRules())


def test_json_patch_adds_replaces_removes_and_escapes() -> None:
    old = {"metadata": {"annotations": {"a/b": "1"}, "name": "x"}, "spec": {"gone": 1, "same": 2}}
    new = {"metadata": {"annotations": {"a/b": "2"}, "name": "x", "labels": {"k": "v"}}, "spec": {"same": 2}}
    ops = json_patch(old, new)
    assert ops == [
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "2"}},
        {"op": "add", "path": "/metadata/labels", "value": {"k": "v"}},
        {"op": "remove", "path": "/spec/gone"},
    ]
    assert apply_patch(old, ops) == new


# -- configuration and settings -------------------------------------------------------------------------------


def test_configuration_defaults_ignore_and_opt_out_selector() -> None:
    cfg = webhook_configuration("w", {"url": "https://127.0.0.1:1/mutate"}, ca_pem=b"PEM")
    wh = cfg["webhooks"][0]
    assert wh["failurePolicy"] == "Ignore"
    assert wh["sideEffects"] == "NoneOnDryRun"
    assert wh["clientConfig"]["caBundle"] == base64.b64encode(b"PEM").decode()
    assert wh["namespaceSelector"]["matchExpressions"][0] == {
        "key": "migctl.io/webhook",
        "operator": "NotIn",
        "values": ["disabled"],
    }
    assert wh["rules"][0]["operations"] == ["CREATE"]
    strict = webhook_configuration("w", {"url": "u"}, WebhookSettings(failure_policy="Fail"))
    assert strict["webhooks"][0]["failurePolicy"] == "Fail"


def test_settings_validation() -> None:
    with pytest.raises(ValueError, match="failure_policy"):
        WebhookSettings.model_validate({"failure_policy": "Maybe"})
    with pytest.raises(ValueError, match="rotate_before_days must be < validity_days"):
        TlsSettings(validity_days=10, rotate_before_days=10)
    with pytest.raises(ValueError, match="extra"):
        WebhookSettings.model_validate({"whole_gpus": True})


def test_cli_reads_the_webhook_section_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from migctl.cli.webhook import load_webhook_config

    f = tmp_path / "c.yaml"
    f.write_text("planner:\n  vram_resource: example.com/vram\nwebhook:\n  whole_gpu: true\n  port: 9443\n")
    monkeypatch.setenv("MIGCTL_WEBHOOK__FAILURE_POLICY", "Fail")
    cfg, s = load_webhook_config(f)
    assert (s.whole_gpu, s.port, s.failure_policy) == (True, 9443, "Fail")
    assert cfg.planner.vram_resource == "example.com/vram"
    assert s.rules(cfg.planner).resource == "example.com/vram"
    f.write_text("webhook:\n  wole_gpu: true\n")
    with pytest.raises(InputError, match=r"webhook\.wole_gpu"):
        load_webhook_config(f)


# -- TLS ------------------------------------------------------------------------------------------------------

NAMES = ["migctl-webhook.ns.svc", "localhost"]
IPS = ["127.0.0.1"]


def test_new_bundle_then_stable_then_rotated_before_expiry() -> None:
    tls = TlsSettings(validity_days=30, rotate_before_days=7, ca_validity_days=365)
    first, why = renew(None, tls, NAMES, IPS, NOW)
    assert why == "no certificate yet"
    leaf = x509.load_pem_x509_certificate(first.cert_pem)
    assert leaf.not_valid_after_utc == NOW + dt.timedelta(days=30)
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(san.get_values_for_type(x509.DNSName)) == set(NAMES)
    same, why = renew(first, tls, NAMES, IPS, NOW + dt.timedelta(days=22))
    assert (same, why) == (first, "")
    rotated, why = renew(first, tls, NAMES, IPS, NOW + dt.timedelta(days=24))
    assert why.startswith("the serving certificate expires")
    assert rotated.cert_pem != first.cert_pem
    assert rotated.ca_pem == first.ca_pem  # same CA: the caBundle does not change
    assert renewal_reason(first, tls, [*NAMES, "other"], IPS, NOW)[1] == "the serving certificate's names changed"


def test_ca_renewal_keeps_the_old_ca_trusted() -> None:
    tls = TlsSettings(validity_days=30, rotate_before_days=7, ca_validity_days=60)
    first, _ = renew(None, tls, NAMES, IPS, NOW)
    later = NOW + dt.timedelta(days=40)  # the CA would not outlive a new 30-day leaf
    second, why = renew(first, tls, NAMES, IPS, later)
    assert why.startswith("the CA expires")
    cas = x509.load_pem_x509_certificates(second.ca_pem)
    assert len(cas) == 2
    old_ca = x509.load_pem_x509_certificate(first.ca_pem)
    assert old_ca in cas
    leaf = x509.load_pem_x509_certificate(second.cert_pem)
    assert leaf.issuer == cas[0].subject != old_ca.subject


class FakeKube:
    def __init__(self) -> None:
        self.secret: tuple[dict[str, bytes], str] | None = None
        self.version = 0
        self.config: dict[str, Any] | None = webhook_configuration("migctl-webhook", {"url": "u"})
        self.conflicts = 0
        self.replaced = 0
        self.names = NAMES  # the SANs the racing replica uses

    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, bytes], str] | None:
        return self.secret

    def write_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str | None) -> None:
        if self.conflicts:
            self.conflicts -= 1
            other, _ = renew(None, TlsSettings(), self.names, IPS, NOW)  # another replica won the race
            self.version += 1
            self.secret = (other.to_secret_data(), str(self.version))
            raise ConflictError("write secret", 409, "Conflict")
        if (resource_version is None) != (self.secret is None) or (self.secret and resource_version != self.secret[1]):
            raise ConflictError("write secret", 409, "Conflict")
        self.version += 1
        self.secret = (data, str(self.version))

    def read_webhook_configuration(self, name: str) -> dict[str, Any] | None:
        return json.loads(json.dumps(self.config)) if self.config else None

    def replace_webhook_configuration(self, name: str, body: dict[str, Any]) -> None:
        self.replaced += 1
        self.config = body


def test_serving_context_leaves_no_temporary_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The certificate files `ssl` needs exist only while `load()` runs, even if `close()` is never called."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    bundle, _ = renew(None, TlsSettings(), NAMES, IPS, NOW)
    ctx = ServingContext()
    ctx.load(bundle.cert_pem, bundle.key_pem)
    ctx.load(bundle.cert_pem, bundle.key_pem)
    assert ctx.loaded
    assert list(tmp_path.iterdir()) == []


def test_cert_manager_stores_adopts_and_keeps_the_ca_bundle() -> None:
    kube = FakeKube()
    ctx = ServingContext()
    try:
        mgr = CertManager(kube, WebhookSettings(), ctx, "ns", clock=lambda: NOW)
        done = mgr.sync()
        assert done == ["certificate renewed: no certificate yet", "caBundle of migctl-webhook updated"]
        assert kube.secret is not None and kube.secret[0]["ca.crt"] == mgr.ca_pem
        assert ctx.loaded
        assert mgr.sync() == []  # nothing to do
        assert kube.replaced == 1
        # helm upgrade (or a person) blanked the caBundle: the next check restores it
        assert kube.config is not None
        kube.config["webhooks"][0]["clientConfig"].pop("caBundle")
        assert mgr.sync() == ["caBundle of migctl-webhook updated"]
        # a second replica adopts the stored certificate instead of making its own
        other = CertManager(kube, WebhookSettings(), ServingContext(), "ns", clock=lambda: NOW)
        assert other.sync() == ["certificate renewed: loaded from secret"]
        assert other.bundle == mgr.bundle
    finally:
        ctx.close()


def test_cert_manager_loses_a_race_and_adopts_the_winner() -> None:
    kube = FakeKube()
    kube.conflicts = 1
    mgr = CertManager(kube, WebhookSettings(configuration_name=""), ServingContext(), "ns", clock=lambda: NOW)
    kube.names = mgr.dns_names
    assert mgr.sync() == ["certificate renewed: loaded from secret"]
    assert kube.secret is not None
    assert mgr.bundle == CertBundle.from_secret_data(kube.secret[0])
    assert kube.version == 1  # it did not overwrite the winner


def test_set_ca_bundle_is_idempotent() -> None:
    cfg = webhook_configuration("x", {"url": "u"})
    assert set_ca_bundle(cfg, b"A")
    assert not set_ca_bundle(cfg, b"A")


def test_files_mode_reloads_changed_files(tmp_path: Path) -> None:
    b1, _ = renew(None, TlsSettings(), NAMES, IPS, NOW)
    (tmp_path / "tls.crt").write_bytes(b1.cert_pem)
    (tmp_path / "tls.key").write_bytes(b1.key_pem)
    tls = TlsSettings(mode="files", cert_file=str(tmp_path / "tls.crt"), key_file=str(tmp_path / "tls.key"))
    mgr = CertManager(FakeKube(), WebhookSettings(tls=tls), ServingContext(), "ns")
    assert mgr.sync() == [f"loaded {tmp_path / 'tls.crt'}"]  # no ca_file: the caBundle is cert-manager's job
    assert mgr.sync() == []
    b2, _ = renew(None, TlsSettings(), NAMES, IPS, NOW)
    (tmp_path / "tls.crt").write_bytes(b2.cert_pem)
    (tmp_path / "tls.key").write_bytes(b2.key_pem)
    assert mgr.sync() == [f"loaded {tmp_path / 'tls.crt'}"]


# -- HTTPS ----------------------------------------------------------------------------------------------------


def _post(url: str, body: Any, ca: bytes) -> tuple[int, Any]:
    ctx = ssl.create_default_context(cadata=ca.decode())
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_https_round_trip_verifies_against_the_ca_and_serves_a_rotated_cert() -> None:
    bundle, _ = renew(None, TlsSettings(), NAMES, IPS, NOW - dt.timedelta(days=1))
    ctx = ServingContext()
    ctx.load(bundle.cert_pem, bundle.key_pem)

    def admit(body: Any) -> dict[str, Any]:
        if body == {"boom": 1}:
            raise RuntimeError("bug")
        return review(body, OFFERS, VramRules()).response

    server = WebhookServer("127.0.0.1", 0, lambda: ctx.context, admit, "/mutate", lambda: False)
    server.start()
    try:
        url = f"https://127.0.0.1:{server.port}"
        code, body = _post(url + "/mutate", admission_review(vram_pod()), bundle.ca_pem)
        assert code == 200
        assert body["response"]["patchType"] == "JSONPatch"
        assert _post(url + "/mutate", {"kind": "nope"}, bundle.ca_pem)[0] == 400
        assert _post(url + "/mutate", {"boom": 1}, bundle.ca_pem)[0] == 500  # failurePolicy then decides
        assert _post(url + "/other", {}, bundle.ca_pem)[0] == 404
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(url + "/readyz", context=ssl.create_default_context(cadata=bundle.ca_pem.decode()))
        assert e.value.code == 503
        # a new certificate from another CA: new connections get it at once
        other, _ = renew(None, TlsSettings(), NAMES, IPS, NOW - dt.timedelta(days=1))
        ctx.load(other.cert_pem, other.key_pem)
        assert _post(url + "/mutate", admission_review(vram_pod()), other.ca_pem)[0] == 200
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            _post(url + "/mutate", admission_review(vram_pod()), bundle.ca_pem)
    finally:
        server.stop()
        ctx.close()


# -- Events ---------------------------------------------------------------------------------------------------


class FakeEvents:
    def __init__(self, pods: list[dict[str, Any]]) -> None:
        self.pods = pods
        self.events: list[dict[str, Any]] = []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any]:
        for p in self.pods:
            if p["metadata"]["name"] == name:
                return p
        raise NotFoundError("read pod", 404, "Not Found")

    def list_pods(
        self, namespace: str | None = None, field_selector: str = "", cached: bool = False
    ) -> list[dict[str, Any]]:
        return self.pods

    def create_event(self, namespace: str, body: dict[str, Any]) -> None:
        self.events.append(body)


def test_event_waits_for_the_pod_then_names_its_uid() -> None:
    kube = FakeEvents([])
    now = [0.0]
    sender = EventSender(kube, wait_s=10, clock=lambda: now[0])
    sender.submit("ns", {"metadata": {"name": "p"}}, "u-1", "chose 1g.10gb")
    item = sender.queue.get_nowait()
    assert not sender.try_send(item)  # not created yet
    kube.pods.append({"metadata": {"name": "p", "uid": "pod-uid"}})
    assert sender.try_send(item)
    (ev,) = kube.events
    assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "ns", "name": "p", "uid": "pod-uid"}
    assert (ev["reason"], ev["message"], ev["type"]) == ("MigctlVramProfile", "chose 1g.10gb", "Normal")


def test_event_for_generate_name_pod_found_by_request_uid_and_given_up_after_the_wait() -> None:
    def pod(name: str, uid: str, record: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "uid": uid, "annotations": {CHOICE_ANNOTATION: record}}}

    legacy = {"model": "m", "products": [], "containers": [], "admission": "u-1"}  # an earlier migctl's: unversioned
    later = json.dumps({"version": "v2", "admission": "u-3"})  # another version's: not a record this webhook wrote
    kube = FakeEvents(
        [
            pod("w-aaaaa", "x", json.dumps(legacy)),
            pod("w-bbbbb", "y", encode(VramChoice("m", (), (), "u-2"))),
            pod("w-ccccc", "z", later),
        ]
    )
    now = [0.0]
    sender = EventSender(kube, wait_s=5, clock=lambda: now[0])
    sender.submit("ns", {"metadata": {"generateName": "w-"}}, "u-2", "m")
    assert sender.try_send(sender.queue.get_nowait())
    assert kube.events[0]["involvedObject"]["uid"] == "y"
    sender.submit("ns", {"metadata": {"generateName": "w-"}}, "u-1", "m")
    assert sender.try_send(sender.queue.get_nowait())
    assert kube.events[1]["involvedObject"]["uid"] == "x"  # the legacy record reads as v1
    sender.submit("ns", {"metadata": {"generateName": "w-"}}, "u-3", "m")
    item = sender.queue.get_nowait()
    assert not sender.try_send(item)
    now[0] = 6.0
    assert sender.try_send(item)  # given up, nothing sent
    assert len(kube.events) == 2


# -- migctl plan ----------------------------------------------------------------------------------------------


def test_plan_shows_what_the_webhook_would_choose() -> None:
    from click.testing import CliRunner

    from migctl.cli import cli

    res = CliRunner().invoke(cli, ["plan", "--example", "--output", "json"])
    assert res.exit_code == 0, res.output
    rows = {r["pod"]: r for r in json.loads(res.stdout)["vram_requests"]}
    assert rows["ml/infer-a"]["action"] == "rewrite"
    assert rows["ml/infer-a"]["containers"][0]["resource"] == "nvidia.com/mig-1g.10gb"
    assert rows["batch/giant"]["action"] == "reject"
    assert "largest MIG instance" in rows["batch/giant"]["reason"]
    text = CliRunner().invoke(cli, ["plan", "--example"]).stdout
    assert "vram requests (what `migctl webhook` would choose)" in text
    assert "ml/infer-a" in text.split("vram requests")[1]
