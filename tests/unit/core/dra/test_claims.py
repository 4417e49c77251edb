"""Claims -> migctl demand: the rules of migctl/core/dra/claims.py, each problem with its object and field."""

from __future__ import annotations

from migctl.core.dra.claims import ClaimSpec, Constraint, DeviceClassSpec, Request, claim_demand, merge
from migctl.core.hardware.gpu_model import Catalog
from migctl.core.model.cluster import GpuDemand
from tests.unit.core.dra.helpers import GPU, MIG, claim, classes, exact, memory_cel, profile_cel, profile_claim

PARENT = "gpu.nvidia.com/parentUUID"


def test_profile_vram_and_whole_gpu(catalog: Catalog) -> None:
    cls = classes(catalog)
    assert claim_demand(profile_claim("a", "1g.10gb", 2), cls, catalog).gpu == (GpuDemand("profile", 2, "1g.10gb"),)
    floor = claim_demand(claim("b", exact(MIG, memory_cel("isGreaterThan", "10Gi"))), cls, catalog)
    least = min(p.memory_mib for m in catalog.models for p in m.base_profiles if p.memory_mib > 10 * 1024)
    assert floor.gpu == (GpuDemand("vram", 1, vram_mib=least),) and not floor.problems
    assert floor.requests[0].whole_gpu_ok is False
    assert claim_demand(claim("c", exact(GPU)), cls, catalog).gpu == (GpuDemand("gpu", 1),)


def test_compare_to_floor_is_inclusive(catalog: Catalog) -> None:
    d = claim_demand(claim("a", exact(MIG, f"{memory_cel('compareTo', '9984Mi')} >= 0")), classes(catalog), catalog)
    assert d.gpu == (GpuDemand("vram", 1, vram_mib=9984),)  # H100's 1g.10gb is exactly 9984 MiB


def test_class_and_request_selectors_are_anded(catalog: Catalog) -> None:
    cls = classes(catalog) | {
        "h100-migs": DeviceClassSpec(
            "h100-migs",
            (
                "device.attributes['gpu.nvidia.com'].type == 'mig'",
                "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'",
            ),
        )
    }
    d = claim_demand(claim("a", exact("h100-migs", memory_cel("isGreaterThan", "30Gi"))), cls, catalog)
    assert d.problems  # 3g.40gb and up on one model only: no floor over every model, so no guess
    one = claim_demand(claim("b", exact("h100-migs", profile_cel("3g.40gb"))), cls, catalog)
    assert one.gpu == (GpuDemand("profile", 1, "3g.40gb"),)


def test_memory_without_a_type_admits_whole_gpus(catalog: Catalog) -> None:
    cls = {"any": DeviceClassSpec("any", ("device.driver == 'gpu.nvidia.com'",))}
    d = claim_demand(claim("a", exact("any", memory_cel("isGreaterThan", "10Gi"))), cls, catalog)
    assert d.gpu[0].kind == "vram" and d.requests[0].whole_gpu_ok is True


def test_requests_merge_and_parent_uuid_groups_them(catalog: Catalog) -> None:
    spec = claim(
        "a",
        exact(MIG, profile_cel("1g.10gb")),
        exact(MIG, profile_cel("1g.10gb")),
        exact(MIG, profile_cel("3g.40gb")),
        constraints=[Constraint(("r0", "r2"), match_attribute=PARENT)],
    )
    d = claim_demand(spec, classes(catalog), catalog)
    assert d.gpu == (GpuDemand("profile", 2, "1g.10gb"), GpuDemand("profile", 1, "3g.40gb"))
    assert d.same_gpu and d.same_gpu_requests == ("r0", "r2")
    alone = claim_demand(
        claim("b", exact(MIG, count=1), constraints=[Constraint(match_attribute=PARENT)]), classes(catalog), catalog
    )
    assert not alone.same_gpu  # one device: nothing to share
    counted = claim_demand(
        claim("c", exact(MIG, profile_cel("1g.10gb"), count=3), constraints=[Constraint(match_attribute=PARENT)]),
        classes(catalog),
        catalog,
    )
    assert counted.same_gpu and counted.same_gpu_requests == ("r0",)


def test_first_available_takes_the_first_servable(catalog: Catalog) -> None:
    req = Request(
        "r",
        first_available=(
            ("huge", exact(MIG, profile_cel("9g.999gb"))),
            ("small", exact(MIG, profile_cel("1g.10gb"))),
            ("any", exact(MIG, memory_cel("isGreaterThan", "10Gi"))),
        ),
        path="spec.devices.requests[0]",
    )
    d = claim_demand(claim("a", req), classes(catalog), catalog)
    assert d.gpu == (GpuDemand("profile", 1, "1g.10gb"),) and d.requests[0].request == "r/small"
    assert any("huge" in n for n in d.notes)


def test_first_available_stops_at_an_unreadable_subrequest(catalog: Catalog) -> None:
    req = Request(
        "r",
        first_available=(
            ("odd", exact(MIG, "has(device.attributes['gpu.nvidia.com'].profile)")),
            ("small", exact(MIG, profile_cel("1g.10gb"))),
        ),
        path="spec.devices.requests[0]",
    )
    d = claim_demand(claim("a", req), classes(catalog), catalog)
    assert not d.gpu and len(d.problems) == 1 and "has" in d.problems[0].message


def test_each_problem_names_object_and_field(catalog: Catalog) -> None:
    cls = classes(catalog)
    cases = {
        "nope": (claim("a", exact("no-such-class")), "deviceClassName", "does not exist"),
        "cel": (
            claim("b", exact(MIG, "device.attributes['gpu.nvidia.com'].profile.matches('1g')")),
            "selectors[0].cel.expression",
            "outside the subset",
        ),
        "zero": (claim("c", exact(MIG, count=0)), "count", "from 1 to 32"),
        "many": (claim("d", exact(MIG, count=33)), "count", "from 1 to 32"),
        "all": (claim("e", exact(MIG, mode="All")), "allocationMode", "ExactCount"),
        "two": (
            claim("f", exact(MIG, "device.attributes['gpu.nvidia.com'].profile in ['1g.10gb', '3g.40gb']")),
            "selectors",
            "admit profiles",
        ),
        "none": (claim("g", exact(MIG, profile_cel("9g.999gb"))), "selectors", "no device any catalog model"),
        "err": (claim("h", exact(GPU, profile_cel("1g.10gb"))), "selectors", "no such key"),
        "whole": (
            claim("i", exact(GPU, count=2), constraints=[Constraint(match_attribute=PARENT)]),
            "matchAttribute",
            "never hold",
        ),
        "ref": (
            claim("j", exact(MIG), constraints=[Constraint(("zz",), match_attribute=PARENT)]),
            "requests",
            "names no request",
        ),
    }
    for label, (spec, field, text) in cases.items():
        d = claim_demand(spec, cls, catalog)
        assert len(d.problems) == 1, (label, d.problems)
        p = d.problems[0]
        assert (p.kind, p.name) == ("ResourceClaim", spec.key), label
        assert p.path.endswith(field) or field in p.path, (label, p.path)
        assert text in p.message, (label, p.message)
        assert d.gpu == (), label


def test_a_bad_request_costs_the_claim_not_its_neighbours(catalog: Catalog) -> None:
    cls = classes(catalog)
    bad = claim_demand(claim("a", exact(MIG, profile_cel("1g.10gb")), exact("missing")), cls, catalog)
    good = claim_demand(profile_claim("b", "1g.10gb"), cls, catalog)
    assert bad.problems and bad.gpu == () and good.gpu and not good.problems


def test_foreign_claims_are_no_demand(catalog: Catalog) -> None:
    cls = {
        "nic": DeviceClassSpec(
            "nic", ("device.driver == 'net.example.com' && device.attributes['net.example.com'].speed >= 100",)
        )
    }
    d = claim_demand(claim("a", exact("nic")), cls, catalog)
    assert d.foreign and not d.problems and not d.gpu


def test_admin_access_is_no_demand(catalog: Catalog) -> None:
    from dataclasses import replace

    d = claim_demand(claim("a", replace(exact(MIG), admin_access=True)), classes(catalog), catalog)
    assert d.gpu == () and not d.problems and any("adminAccess" in n for n in d.notes)


def test_template_problems_are_reported_on_the_template(catalog: Catalog) -> None:
    spec = ClaimSpec(
        "ns",
        "pod-gpu",
        (Request("r", exactly=exact("missing"), path="spec.spec.devices.requests[0]"),),
        kind="ResourceClaimTemplate",
        object="ns/tmpl",
    )
    p = claim_demand(spec, classes(catalog), catalog).problems[0]
    assert (p.kind, p.name) == ("ResourceClaimTemplate", "ns/tmpl")


def test_merge_keeps_order_and_sums() -> None:
    a, b = GpuDemand("profile", 1, "1g.10gb"), GpuDemand("vram", 2, vram_mib=5000)
    assert merge([a, b, a]) == (GpuDemand("profile", 2, "1g.10gb"), b)
