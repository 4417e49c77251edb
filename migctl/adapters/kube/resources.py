"""The DRA calls (resource.k8s.io/v1; DeviceTaintRule GA in Kubernetes 1.37): the DRA objects migctl reads, and
its fences on DRA devices.

A mixin of `KubeApi`, apart so api.py stays one screen per kind of object. Objects are read as the server sent
them (`raw_items`): a model round trip drops fields the client's version does not know. Creating a rule that
exists answers `exists` and deleting one that is gone answers False: migctl names its rules deterministically
(controller/fences.py), so both mean "already as wanted", never an error.

`DRA_LISTS` and `OPERATOR_LISTS` are the one list of what migctl reads of a DRA cluster: the controller's
informers (cache.py) and the live `migctl plan` (`dra_objects`) read the same kinds with the same selectors. Each
kind is optional: a cluster that does not serve it (404) or a role that may not read it (403) reads as none.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from migctl.adapters.kube.calls import ApiCalls, Obj
from migctl.adapters.kube.errors import ConflictError, ForbiddenError, NotFoundError
from migctl.wire.names import FENCE_NODE, NVIDIA_DRA_DRIVER

log = logging.getLogger(__name__)
# resource.k8s.io/v1 kinds migctl reads: (kind, ResourceV1Api list function, its selectors)
DRA_LISTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("ResourceSlice", "list_resource_slice", {"field_selector": f"spec.driver={NVIDIA_DRA_DRIVER}"}),
    ("ResourceClaim", "list_resource_claim_for_all_namespaces", {}),
    ("ResourceClaimTemplate", "list_resource_claim_template_for_all_namespaces", {}),
    ("DeviceClass", "list_device_class", {}),
    ("DeviceTaintRule", "list_device_taint_rule", {"label_selector": FENCE_NODE}),  # migctl's own only
)
# NVIDIA GPU Operator CRDs (custom objects): (kind, group, version, plural)
OPERATOR_LISTS: tuple[tuple[str, str, str, str], ...] = (
    ("GPUCluster", "nvidia.com", "v1alpha1", "gpuclusters"),
    ("ClusterPolicy", "nvidia.com", "v1", "clusterpolicies"),
)


class DraCalls(ApiCalls):
    """Read the DRA objects; list, create and delete DeviceTaintRules."""

    def dra_objects(self) -> list[Obj]:
        """Every kind of `DRA_LISTS` and `OPERATOR_LISTS`, as the server sent them; a kind the cluster does not
        serve or this identity may not list is none (logged at debug level: most clusters have no DRA)."""
        custom: Any = client.CustomObjectsApi(self.api_client)
        opts: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        calls: list[tuple[str, Callable[[], Any]]] = [
            (kind, lambda fn=fn, sel=sel: getattr(self.resource, fn)(**sel, **opts))  # type: ignore[misc]
            for kind, fn, sel in DRA_LISTS
        ]
        calls += [
            (kind, lambda g=g, v=v, p=p: custom.list_cluster_custom_object(g, v, p, **opts))  # type: ignore[misc]
            for kind, g, v, p in OPERATOR_LISTS
        ]
        out: list[Obj] = []
        for kind, fn in calls:
            try:
                out += self.raw_items(f"list {kind}", fn, kind)
            except (NotFoundError, ForbiddenError) as e:
                log.debug("%s: read as none (%s)", kind, e)
        return out

    def raw_items(self, what: str, fn: Callable[[], Any], kind: str) -> list[Obj]:
        """A list call's items as the server sent them, each with its `kind`."""
        resp = self.call(what, fn)
        items: list[Obj] = json.loads(resp.data).get("items") or []
        for item in items:
            item.setdefault("kind", kind)
        return items

    def list_device_taint_rules(self, label_selector: str = "") -> list[Obj]:
        kwargs: dict[str, Any] = {"_preload_content": False, "_request_timeout": self.timeout_s}
        if label_selector:
            kwargs["label_selector"] = label_selector
        return self.raw_items(
            f"list devicetaintrules -l {label_selector or '<all>'}",
            lambda: self.resource.list_device_taint_rule(**kwargs),
            "DeviceTaintRule",
        )

    def create_device_taint_rule(self, body: Obj) -> str:
        """`created`, or `exists` when a rule of that name is there already (409)."""
        self._guard()
        name = body["metadata"]["name"]
        try:
            self.call(
                f"create devicetaintrule {name}",
                lambda: self.resource.create_device_taint_rule(
                    body, _preload_content=False, _request_timeout=self.timeout_s
                ),
            )
        except ConflictError:
            return "exists"
        return "created"

    def delete_device_taint_rule(self, name: str, uid: str = "") -> bool:
        """Delete the rule (with `uid`, only that object: a namesake made since stays); False when gone."""
        self._guard()
        body: Obj = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if uid:
            body["preconditions"] = {"uid": uid}
        try:
            self.call(
                f"delete devicetaintrule {name}",
                lambda: self.resource.delete_device_taint_rule(
                    name, body=body, _preload_content=False, _request_timeout=self.timeout_s
                ),
            )
        except NotFoundError:
            return False
        return True
