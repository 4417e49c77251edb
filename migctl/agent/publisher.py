"""Publish the inventory on the agent's own Node, only when it changes.

The agent needs one permission: `patch` on its Node, and the chart's node-restriction policy (a
ValidatingAdmissionPolicy) narrows that to this one annotation on the node its own pod is bound to. The patch is a
merge of that annotation alone, so it never touches labels, taints or migctl's phase annotations. It never reads
the Node: the first publish always patches and the patch response says what the annotation now holds; after that
it patches only when the hardware state differs from what it last wrote. Transient API failures (connection
errors, 429, 5xx) are retried with exponential backoff by the adapter (`KubeApi`); anything else (403: RBAC, 422:
the policy, 404: wrong node name) is raised at once with what to fix.
"""

from __future__ import annotations

import logging

from migctl.adapters.kube.errors import ForbiddenError, KubeError, NotFoundError, PermanentError, TransientError
from migctl.adapters.kube.interface import AgentApi
from migctl.adapters.views import node_view
from migctl.core.model.inventory import Inventory
from migctl.errors import MigctlError
from migctl.wire.names import GPUS as INVENTORY_ANNOTATION

log = logging.getLogger(__name__)


class PublishError(MigctlError):
    """The inventory could not be written to the Node (a permanent error, or retries ran out)."""


class Publisher:
    """Writes `migctl.io/gpus` (or the configured annotation) on one Node."""

    def __init__(self, kube: AgentApi, node: str, annotation: str = INVENTORY_ANNOTATION) -> None:
        self.kube = kube  # a KubeApi retries transient failures (connection errors, 429, 5xx) with backoff
        self.node = node
        self.annotation = annotation
        self.published: str | None = None  # what the Node holds, as of our last successful patch
        self.patches = 0

    def publish(self, inventory: Inventory) -> bool:
        """Patch the Node if the inventory changed; True when a patch was sent."""
        desired = inventory.to_annotation()
        if desired == self.published:
            return False
        patch = {"metadata": {"annotations": {self.annotation: desired}}}
        try:
            node = self.kube.patch_node(self.node, patch, "publish the GPU inventory on")
        except NotFoundError as e:
            raise PublishError(f"node {self.node} does not exist (is --node / NODE_NAME right?)") from e
        except PermanentError as e:
            if e.status in (403, 422) and "ValidatingAdmissionPolicy" in e.message:
                raise PublishError(
                    f"node {self.node}: the node-restriction policy refused the write ({e.message}); NODE_NAME must "
                    "be the node this pod runs on, and its token must carry the node claim (docs/install.md#rbac)"
                ) from e
            if isinstance(e, ForbiddenError):
                raise PublishError(
                    f"not allowed to patch node {self.node}: the agent's ServiceAccount needs `patch` on nodes"
                ) from e
            raise PublishError(f"patching node {self.node} failed: {e.status} {e.reason}") from e
        except TransientError as e:
            if e.status is None:
                raise PublishError(f"patching node {self.node} failed: the API server is unreachable ({e})") from e
            raise PublishError(f"patching node {self.node} failed: {e.status} {e.reason}") from e
        except KubeError as e:
            raise PublishError(f"patching node {self.node} failed: {e}") from e
        annotations = node_view(node).annotations
        self.published = annotations.get(self.annotation, desired)
        self.patches += 1
        log.info("published the GPU inventory on node %s (%d GPUs)", self.node, len(inventory.gpus))
        return True
