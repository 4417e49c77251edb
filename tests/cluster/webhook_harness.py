"""The webhook served in-process against the real API server, with its MutatingWebhookConfiguration registered
(no caBundle: the webhook writes it) and removed afterwards. Shared by the webhook's cluster tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes import client

from migctl.config import ControllerSettings
from migctl.config.webhook import WebhookSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.webhook.app import Webhook
from migctl.webhook.configuration import webhook_configuration


@contextmanager
def served_webhook(
    api: client.ApiClient,
    settings: WebhookSettings,
    namespaces: list[str],
    controller: ControllerSettings | None = None,
) -> Iterator[tuple[Webhook, client.AdmissionregistrationV1Api, list[str]]]:
    """(the running webhook, the admission API, what its first certificate sync did), for pods of `namespaces`."""
    app = Webhook(api, load_catalog(), settings, controller=controller)
    app.start()
    admission = client.AdmissionregistrationV1Api(api)
    body = webhook_configuration(
        settings.configuration_name,
        {"url": f"https://127.0.0.1:{app.port}{settings.path}"},
        settings,
        extra_namespace_expressions=[{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}],
        queue_gate=bool(controller and controller.queue_gate),
    )
    admission.create_mutating_webhook_configuration(body)
    try:
        yield app, admission, app.certs.sync()
    finally:
        admission.delete_mutating_webhook_configuration(settings.configuration_name)
        app.stop()
