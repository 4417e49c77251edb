"""Keeps the serving certificate current (self-signed in a Secret, or files) and the caBundle in step with it."""

from __future__ import annotations

import base64
import logging
from pathlib import Path
from typing import Protocol

from migctl.adapters.kube.errors import ConflictError, ForbiddenError
from migctl.adapters.kube.interface import Obj
from migctl.config.webhook import WebhookSettings
from migctl.webhook.tls import CertBundle, Clock, ServingContext, renew, service_dns_names, utcnow

log = logging.getLogger(__name__)


class CertApi(Protocol):
    def read_secret(self, namespace: str, name: str) -> tuple[dict[str, bytes], str] | None: ...
    def write_secret(self, namespace: str, name: str, data: dict[str, bytes], resource_version: str | None) -> None: ...
    def read_webhook_configuration(self, name: str) -> Obj | None: ...
    def replace_webhook_configuration(self, name: str, body: Obj) -> None: ...


def set_ca_bundle(configuration: Obj, ca_pem: bytes) -> bool:
    """Write the caBundle into every webhook of the configuration; False if all already had it."""
    want = base64.b64encode(ca_pem).decode()
    changed = False
    for wh in configuration.get("webhooks") or []:
        cc = wh.setdefault("clientConfig", {})
        if cc.get("caBundle") != want:
            cc["caBundle"] = want
            changed = True
    return changed


class CertManager:
    """`sync()` at start and every `tls.check_interval_s`: renew or reload the certificate, then the caBundle."""

    def __init__(
        self,
        kube: CertApi | None,
        settings: WebhookSettings,
        context: ServingContext,
        namespace: str | None = None,
        clock: Clock = utcnow,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.tls = settings.tls
        self.context = context
        self.namespace = namespace or settings.namespace
        self.clock = clock
        self.bundle: CertBundle | None = None
        self._files_seen: tuple[bytes, bytes] | None = None
        self.dns_names = service_dns_names(settings.service_name, self.namespace, self.tls.dns_names)

    @property
    def ca_pem(self) -> bytes | None:
        """What the API server must trust (None: not ours to say, e.g. cert-manager injects it)."""
        if self.tls.mode == "files":
            return Path(self.tls.ca_file).read_bytes() if self.tls.ca_file else None
        return self.bundle.ca_pem if self.bundle else None

    def sync(self) -> list[str]:
        """Bring the certificate and the caBundle up to date; returns what was done (for logs and tests)."""
        done: list[str] = []
        if self.tls.mode == "files":
            cert = Path(self.tls.cert_file).read_bytes()
            key = Path(self.tls.key_file).read_bytes()
            if (cert, key) != self._files_seen:
                self.context.load(cert, key)
                self._files_seen = (cert, key)
                done.append(f"loaded {self.tls.cert_file}")
        else:
            why = self._self_signed()
            if why:
                done.append(f"certificate renewed: {why}")
        ca = self.ca_pem
        if ca is not None and self.kube is not None and self.settings.configuration_name and self._ca_bundle(ca):
            done.append(f"caBundle of {self.settings.configuration_name} updated")
        return done

    def _self_signed(self) -> str:
        now = self.clock()
        ips = self.tls.ip_addresses
        if self.kube is None or not self.tls.secret_name:
            bundle, why = renew(self.bundle, self.tls, self.dns_names, ips, now)
            if why or not self.context.loaded:
                self._use(bundle)
            return why
        for _ in range(5):  # optimistic concurrency with other replicas
            stored = self.kube.read_secret(self.namespace, self.tls.secret_name)
            current = CertBundle.from_secret_data(stored[0]) if stored else None
            bundle, why = renew(current, self.tls, self.dns_names, ips, now)
            if why:
                try:
                    self.kube.write_secret(
                        self.namespace, self.tls.secret_name, bundle.to_secret_data(), stored[1] if stored else None
                    )
                except ConflictError:
                    log.info("another replica wrote secret %s first; adopting its certificate", self.tls.secret_name)
                    continue
            if bundle != self.bundle or not self.context.loaded:
                self._use(bundle)
                if not why:
                    why = "loaded from secret"
            return why
        raise ConflictError(f"secret {self.namespace}/{self.tls.secret_name}", 409, "kept conflicting; try again later")

    def _use(self, bundle: CertBundle) -> None:
        self.context.load(bundle.cert_pem, bundle.key_pem)
        self.bundle = bundle

    def _ca_bundle(self, ca_pem: bytes) -> bool:
        assert self.kube is not None
        name = self.settings.configuration_name
        try:
            return self._write_ca_bundle(name, ca_pem)
        except ForbiddenError as e:
            raise ForbiddenError(
                f"{e.what}: keeping the caBundle of MutatingWebhookConfiguration {name} needs get and update on it "
                "(the chart grants them in self-signed mode only); with cert-manager injecting the caBundle, set "
                "webhook.configuration_name empty",
                e.status,
                e.reason,
                e.message,
            ) from e

    def _write_ca_bundle(self, name: str, ca_pem: bytes) -> bool:
        assert self.kube is not None
        for _ in range(5):
            cfg = self.kube.read_webhook_configuration(name)
            if cfg is None:
                log.warning("MutatingWebhookConfiguration %s not found; its caBundle will be set once it exists", name)
                return False
            if not set_ca_bundle(cfg, ca_pem):
                return False
            try:
                self.kube.replace_webhook_configuration(name, cfg)  # carries resourceVersion: a lost race -> 409
                log.info("caBundle of MutatingWebhookConfiguration %s updated", name)
                return True
            except ConflictError:
                continue
        raise ConflictError(f"mutatingwebhookconfiguration {name}", 409, "kept conflicting; try again later")
