"""ResourceClaims, templates, pods' claims, DeviceClasses and the operator model, read from plain dicts."""

from __future__ import annotations

from typing import Any

from migctl.adapters.dra.claims import pod_claims, read_claims
from migctl.adapters.dra.deviceclasses import class_for_resource, extended_claim, read_device_classes
from migctl.adapters.dra.operator import read_operator
from migctl.core.dra.claims import claim_demand
from migctl.core.dra.devices import DeviceId
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import GpuDemand, Toleration
from tests.nvidia_slices import device_classes, profile_class

PROFILE = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"


def claim_obj(
    name: str, requests: list[dict[str, Any]], status: dict[str, Any] | None = None, **devices: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": {"requests": requests, **devices}},
    }
    if status:
        obj["status"] = status
    return obj


def mig_request(name: str = "mig", **extra: Any) -> dict[str, Any]:
    exactly = {"deviceClassName": "mig.nvidia.com", "selectors": [{"cel": {"expression": PROFILE}}], **extra}
    return {"name": name, "exactly": exactly}


def test_claim_spec_and_allocations() -> None:
    allocated = claim_obj(
        "held",
        [mig_request()],
        status={
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "mig", "driver": "gpu.nvidia.com", "pool": "n1", "device": "gpu-0-mig-1g10gb-19-0"},
                        {
                            "request": "mon",
                            "driver": "gpu.nvidia.com",
                            "pool": "n1",
                            "device": "gpu-0",
                            "adminAccess": True,
                        },
                    ]
                }
            }
        },
    )
    pending = claim_obj(
        "wait",
        [
            mig_request(count=2, tolerations=[{"key": "migctl.io/placement", "operator": "Exists"}]),
            {"name": "alt", "firstAvailable": [{"name": "a", "deviceClassName": "gpu.nvidia.com"}]},
        ],
        constraints=[{"requests": ["mig", "alt"], "matchAttribute": "gpu.nvidia.com/parentUUID"}],
    )
    r = read_claims([allocated, pending])
    assert r.problems == () and set(r.claims) == {"ml/held", "ml/wait"} and r.allocated == {"ml/held"}
    assert r.in_use == {DeviceId("gpu.nvidia.com", "n1", "gpu-0-mig-1g10gb-19-0")}  # adminAccess holds nothing
    spec = r.claims["ml/wait"]
    ex = spec.requests[0].exactly
    assert ex is not None and ex.count == 2 and ex.selectors == (PROFILE,)
    assert ex.tolerations == (Toleration("migctl.io/placement", "Exists"),)
    assert ex.path == "spec.devices.requests[0].exactly"
    assert spec.requests[1].first_available[0][0] == "a"
    assert spec.constraints[0].requests == ("mig", "alt") and spec.constraints[0].match_attribute.endswith("parentUUID")


def test_a_bad_claim_costs_only_itself() -> None:
    bad = claim_obj("bad", [mig_request(count="two")])
    old = claim_obj("old", [{"name": "x", "deviceClassName": "mig.nvidia.com"}])
    r = read_claims([bad, old, claim_obj("good", [mig_request()])])
    assert set(r.claims) == {"ml/good"}
    paths = {(p.kind, p.name, p.path) for p in r.problems}
    assert paths == {
        ("ResourceClaim", "ml/bad", "spec.devices.requests[0].exactly.count"),
        ("ResourceClaim", "ml/old", "spec.devices.requests[0]"),
    }
    assert any("v1beta1" in p.message for p in r.problems)


def _pod(entries: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": "p", "namespace": "ml"}, "spec": {"resourceClaims": entries}}
    if statuses is not None:
        pod["status"] = {"resourceClaimStatuses": statuses}
    return pod


def test_pods_claims_from_names_templates_and_generated_claims() -> None:
    template = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "mig-10g", "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": [mig_request()]}}},
    }
    generated = claim_obj("p-gpu-x7k9m", [mig_request()])
    held = claim_obj("shared", [mig_request()], status={"allocation": {"devices": {"results": []}}})
    r = read_claims([generated, held], [template])
    before = pod_claims(_pod([{"name": "gpu", "resourceClaimTemplateName": "mig-10g"}]), r)
    assert [(c.key, c.kind, c.object) for c in before.pending] == [("ml/p-gpu", "ResourceClaimTemplate", "ml/mig-10g")]
    after = pod_claims(
        _pod(
            [{"name": "gpu", "resourceClaimTemplateName": "mig-10g"}, {"name": "s", "resourceClaimName": "shared"}],
            [{"name": "gpu", "resourceClaimName": "p-gpu-x7k9m"}],
        ),
        r,
    )
    assert [c.key for c in after.pending] == ["ml/p-gpu-x7k9m"] and after.allocated == ("ml/shared",)
    missing = pod_claims(_pod([{"name": "gpu", "resourceClaimName": "nope"}]), r)
    assert missing.pending == () and missing.problems[0].path == "spec.resourceClaims[0].resourceClaimName"
    no_tmpl = pod_claims(_pod([{"name": "gpu", "resourceClaimTemplateName": "nope"}]), r)
    assert "ResourceClaimTemplate ml/nope" in no_tmpl.problems[0].message


def test_device_classes_and_extended_resources(catalog: Catalog) -> None:
    objs = device_classes(catalog.model("h100-80gb"))
    newer = profile_class("1g.10gb")
    newer["metadata"] |= {"name": "mig-1g10gb-v2", "creationTimestamp": "2026-09-01T00:00:00Z"}
    objs[2]["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
    bad = {"kind": "DeviceClass", "metadata": {"name": "broken"}, "spec": {"selectors": [{"cel": {"expression": 5}}]}}
    r = read_device_classes([*objs, newer, bad])
    assert [(p.name, p.path) for p in r.problems] == [("broken", "spec.selectors[0].cel.expression")]
    assert class_for_resource(r.classes, "nvidia.com/gpu").name == "gpu.nvidia.com"  # type: ignore[union-attr]
    assert class_for_resource(r.classes, "nvidia.com/mig-1g.10gb").name == "mig-1g10gb-v2"  # type: ignore[union-attr]
    assert class_for_resource(r.classes, "deviceclass.resource.kubernetes.io/mig.nvidia.com").name == "mig.nvidia.com"  # type: ignore[union-attr]
    assert class_for_resource(r.classes, "nvidia.com/mig-9g.99gb") is None
    cls = class_for_resource(r.classes, "nvidia.com/mig-1g.20gb")
    assert cls is not None
    spec = extended_claim("ml", "p", 0, 0, 2, cls)
    assert claim_demand(spec, r.classes, catalog).gpu == (GpuDemand("profile", 2, "1g.20gb"),)


def test_same_extended_name_same_time_lexicographic_first() -> None:
    a, b = profile_class("1g.10gb"), profile_class("1g.10gb")
    a["metadata"]["name"], b["metadata"]["name"] = "b-class", "a-class"
    r = read_device_classes([a, b])
    assert class_for_resource(r.classes, "nvidia.com/mig-1g.10gb").name == "a-class"  # type: ignore[union-attr]


def test_a_claim_naming_a_missing_device_class(catalog: Catalog) -> None:
    r = read_claims([claim_obj("c", [{"name": "g", "exactly": {"deviceClassName": "mig-typo.nvidia.com"}}])])
    classes = read_device_classes(device_classes()).classes
    (p,) = claim_demand(r.claims["ml/c"], classes, catalog).problems
    assert (p.kind, p.name, p.path) == ("ResourceClaim", "ml/c", "spec.devices.requests[0].exactly.deviceClassName")


def _op(kind: str, name: str, spec: dict[str, Any], state: str = "ready") -> dict[str, Any]:
    api = "nvidia.com/v1alpha1" if kind == "GPUCluster" else "nvidia.com/v1"
    return {"apiVersion": api, "kind": kind, "metadata": {"name": name}, "spec": spec, "status": {"state": state}}


def test_operator_model() -> None:
    gc = _op("GPUCluster", "gpu-cluster", {"draDriver": {"featureGates": {"DynamicMIG": True}}})
    cp = _op("ClusterPolicy", "cluster-policy", {"migManager": {"enabled": True}})
    assert read_operator([gc]).model == "gpu-cluster" and read_operator([gc]).dynamic_mig is True
    plain = read_operator([_op("GPUCluster", "g", {"draDriver": {}})])
    assert plain.dynamic_mig is False  # the gate's default: off (Alpha)
    assert read_operator([cp]).model == "cluster-policy" and read_operator([cp]).mig_manager is True
    both = read_operator([gc, cp])
    assert both.model == "both" and both.problems
    ignored = _op("GPUCluster", "dup", {}, state="ignored")
    assert read_operator([ignored, cp]).model == "cluster-policy"
    assert read_operator([{"apiVersion": "v1", "kind": "Node"}]).model == "none"
    bad = _op("GPUCluster", "g", {"draDriver": {"featureGates": {"DynamicMIG": "yes"}}})
    got = read_operator([bad, cp])
    assert got.model == "cluster-policy" and got.problems[0].path == "spec.draDriver.featureGates.DynamicMIG"
