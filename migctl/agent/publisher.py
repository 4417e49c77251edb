"""Publish the inventory on the agent's own Node, only when it changes.

The agent needs one permission: `patch` on its Node, and the chart's node-restriction policy (a
ValidatingAdmissionPolicy) narrows that to this one annotation on the node its own pod is bound to. The patch is a
merge of that annotation alone, so it never touches labels, taints or migctl's phase annotations. It never reads
the Node: the first publish always patches and the patch response says what the annotation now holds; after that
it patches only when the hardware state differs from what it last wrote. Transient API failures (connection
errors, 429, 5xx) are retried with exponential backoff; anything else (403: RBAC, 422: the policy, 404: wrong node
name) is raised at once with what to fix.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential
from urllib3.exceptions import HTTPError

from migctl.core.inventory import Inventory
from migctl.errors import MigctlError
from migctl.wire.names import GPUS as INVENTORY_ANNOTATION

log = logging.getLogger(__name__)
TRANSIENT_STATUS = frozenset({429, 500, 502, 503, 504})


class PublishError(MigctlError):
    """The inventory could not be written to the Node (a permanent error, or retries ran out)."""


def transient(e: BaseException) -> bool:
    """Worth retrying: the API server was briefly unreachable or overloaded."""
    if isinstance(e, ApiException):
        return e.status in TRANSIENT_STATUS
    return isinstance(e, HTTPError | OSError)


_retry = retry(
    retry=retry_if_exception(transient),
    wait=wait_exponential(multiplier=0.5, max=10),
    stop=stop_after_attempt(5),
    reraise=True,
)


def _message(e: ApiException) -> str:
    """The API server's own message from a Status body, else the reason."""
    try:
        return str(json.loads(e.body or "{}").get("message") or e.reason)
    except (ValueError, AttributeError):
        return str(e.reason)


class Publisher:
    """Writes `migctl.io/gpus` (or the configured annotation) on one Node."""

    def __init__(self, core: client.CoreV1Api, node: str, annotation: str = INVENTORY_ANNOTATION) -> None:
        self.core = core
        self.node = node
        self.annotation = annotation
        self.published: str | None = None  # what the Node holds, as of our last successful patch
        self.patches = 0

    def publish(self, inventory: Inventory) -> bool:
        """Patch the Node if the inventory changed; True when a patch was sent."""
        desired = inventory.to_annotation()
        if desired == self.published:
            return False
        try:
            node: Any = self._patch({"metadata": {"annotations": {self.annotation: desired}}})
        except ApiException as e:
            if e.status == 404:
                raise PublishError(f"node {self.node} does not exist (is --node / NODE_NAME right?)") from e
            if e.status in (403, 422) and "ValidatingAdmissionPolicy" in str(e.body or ""):
                raise PublishError(
                    f"node {self.node}: the node-restriction policy refused the write ({_message(e)}); NODE_NAME must "
                    "be the node this pod runs on, and its token must carry the node claim (docs/install.md#rbac)"
                ) from e
            if e.status == 403:
                raise PublishError(
                    f"not allowed to patch node {self.node}: the agent's ServiceAccount needs `patch` on nodes"
                ) from e
            raise PublishError(f"patching node {self.node} failed: {e.status} {e.reason}") from e
        except (HTTPError, OSError) as e:
            raise PublishError(f"patching node {self.node} failed: the API server is unreachable ({e})") from e
        annotations = (getattr(node.metadata, "annotations", None) or {}) if node is not None else {}
        self.published = annotations.get(self.annotation, desired)
        self.patches += 1
        log.info("published the GPU inventory on node %s (%d GPUs)", self.node, len(inventory.gpus))
        return True

    @_retry
    def _patch(self, body: dict[str, Any]) -> Any:
        return self.core.patch_node(self.node, body)
