"""Webhook settings (the `webhook:` section of migctl's config file), validated with errors naming the field."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.decide import OPT_OUT_VALUE, VramRules
from migctl.wire.names import WEBHOOK_OPT_OUT as OPT_OUT_KEY


class TlsSettings(BaseModel):
    """Where the serving certificate comes from (docs/vram-requests.md, "TLS")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["self-signed", "files"] = Field(
        "self-signed",
        description="`self-signed`: migctl makes its own CA and serving certificate, rotates it and keeps the "
        "MutatingWebhookConfiguration's caBundle current. `files`: read cert_file/key_file (cert-manager), "
        "reloaded when they change; cert-manager's CA injector keeps the caBundle.",
    )
    secret_name: str = Field(
        "migctl-webhook-tls",
        description="self-signed: Secret (in `namespace`) holding the CA and serving certificate, shared by "
        "replicas and kept across restarts. Empty: keep them in memory only (one replica, new CA each start).",
    )
    cert_file: str = Field("/etc/migctl/webhook-tls/tls.crt", description="files: the serving certificate (PEM).")
    key_file: str = Field("/etc/migctl/webhook-tls/tls.key", description="files: its private key (PEM).")
    ca_file: str = Field(
        "", description="files: CA bundle to write into the caBundle (empty: leave the caBundle to cert-manager)."
    )
    dns_names: list[str] = Field(
        default_factory=list, description="Extra DNS SANs (the Service's names are always included)."
    )
    ip_addresses: list[str] = Field(default_factory=lambda: ["127.0.0.1"], description="IP SANs.")
    validity_days: int = Field(365, ge=1, description="self-signed: lifetime of a serving certificate.")
    rotate_before_days: int = Field(30, ge=0, description="self-signed: renew this long before it expires.")
    ca_validity_days: int = Field(3650, ge=1, description="self-signed: lifetime of the CA.")
    check_interval_s: float = Field(
        300.0, gt=0, description="How often to check expiry, reload files and re-assert the caBundle."
    )

    @model_validator(mode="after")
    def _windows(self) -> TlsSettings:
        if self.rotate_before_days >= self.validity_days:
            raise ValueError("rotate_before_days must be < validity_days")
        if self.validity_days > self.ca_validity_days:
            raise ValueError("validity_days must be <= ca_validity_days")
        return self


class WebhookSettings(BaseModel):
    """`migctl webhook`: the mutating admission webhook that turns VRAM requests into MIG profiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    address: str = Field("0.0.0.0", description="Address the HTTPS server binds.")
    port: int = Field(8443, ge=0, le=65535, description="HTTPS port (0: any free port).")
    metrics_port: int | None = Field(
        8080, ge=0, le=65535, description="Plain HTTP: /metrics, /healthz, /readyz (0: any free port; null: off)."
    )
    path: str = Field("/mutate", description="URL path of the admission endpoint.")
    namespace: str = Field(
        "gpu-operator", description="Namespace the webhook runs in (its Service and Secret); env POD_NAMESPACE wins."
    )
    service_name: str = Field("migctl-webhook", description="The Service in front of the webhook (for the SANs).")
    configuration_name: str = Field(
        "migctl-webhook",
        description="MutatingWebhookConfiguration whose caBundle migctl keeps current (empty: never touch it).",
    )
    failure_policy: Literal["Ignore", "Fail"] = Field(
        "Ignore",
        description="What the API server does when the webhook cannot answer: Ignore admits the pod unchanged "
        "(a webhook outage never blocks pod creation; such VRAM pods stay Pending); Fail rejects it.",
    )
    timeout_s: int = Field(5, ge=1, le=30, description="The API server's timeout for one call (timeoutSeconds).")
    whole_gpu: bool = Field(
        False, description="Serve a request larger than every MIG instance with a whole GPU (nvidia.com/gpu: 1)."
    )
    opt_out_key: str = Field(OPT_OUT_KEY, description="Namespace label (or pod annotation) key that opts out...")
    opt_out_value: str = Field(OPT_OUT_VALUE, description="...when set to this value.")
    fallback_scheduler: str = Field(
        "migctl", description="Pods with this schedulerName belong to migctl's non-MIG fallback: left alone."
    )
    refresh_s: float = Field(
        30.0, gt=0, description="How often the webhook re-reads nodes and pods for its view of GPU capacity."
    )
    events: bool = Field(True, description="Emit an Event on each rewritten pod saying what was chosen and why.")
    event_wait_s: float = Field(
        10.0, ge=0, description="How long to wait for an admitted pod to exist before giving up on its Event."
    )
    tls: TlsSettings = Field(default_factory=TlsSettings)

    def rules(self, planner: PlannerSettings | None = None) -> VramRules:
        planner = planner or PlannerSettings()
        return VramRules.from_planner(
            planner,
            fallback_scheduler=self.fallback_scheduler,
            whole_gpu=self.whole_gpu,
            opt_out_key=self.opt_out_key,
            opt_out_value=self.opt_out_value,
        )
