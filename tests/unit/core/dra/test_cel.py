"""The CEL subset: each accepted form evaluated on device records, each rejected form with its why, and what a
selector means for planning (k8s.io/dynamic-resource-allocation/cel semantics)."""

from __future__ import annotations

from decimal import Decimal

import pytest

from migctl.core.dra import cel
from migctl.core.dra.devices import Device, Version
from migctl.core.hardware.gpu_model import Catalog

D = "gpu.nvidia.com"
GI = 2**30


def mig(profile: str = "1g.10gb", memory_gib: float = 9.75) -> Device:
    return Device(
        "gpu-0-mig-1g10gb-19-0",
        "n1",
        "s",
        "mig",
        0,
        attributes={
            f"{D}/type": "mig",
            f"{D}/profile": profile,
            f"{D}/driverVersion": Version("580.1.2"),
            f"{D}/cores": 14,
            f"{D}/healthy": True,
        },
        capacity={f"{D}/memory": Decimal(int(memory_gib * GI))},
    )


def whole() -> Device:
    return Device(
        "gpu-0", "n1", "s", "gpu", 0, attributes={f"{D}/type": "gpu"}, capacity={f"{D}/memory": Decimal(80 * GI)}
    )


MEM = f"device.capacity['{D}'].memory"
PROFILE = f"device.attributes['{D}'].profile"


@pytest.mark.parametrize(
    ("expression", "device", "expected"),
    [
        (f"device.driver == '{D}'", mig(), True),
        ("device.driver == 'other.example.com'", mig(), False),
        (f"device.attributes['{D}'].type == 'mig'", mig(), True),
        (f'device.attributes["{D}"]["type"] == "gpu"', whole(), True),
        (f"{PROFILE} == '1g.10gb'", mig(), True),
        (f"{PROFILE} != '1g.10gb'", mig(), False),
        (f"{PROFILE} in ['2g.20gb', '1g.10gb']", mig(), True),
        (f"{PROFILE} in ['2g.20gb']", mig(), False),
        (f"{MEM}.isGreaterThan(quantity('9Gi'))", mig(), True),
        (f"{MEM}.isGreaterThan(quantity('10Gi'))", mig(), False),
        (f"{MEM}.isLessThan(quantity('10Gi'))", mig(), True),
        (f"quantity('10Gi').isLessThan({MEM})", whole(), True),
        (f"{MEM}.compareTo(quantity('9984Mi')) >= 0", mig(), True),
        (f"{MEM}.compareTo(quantity('9984Mi')) > 0", mig(), False),
        (f"{MEM}.compareTo(quantity('9984Mi')) == 0", mig(), True),
        (f"{MEM}.compareTo(quantity('10Gi')) <= -1", mig(), True),
        (f"{MEM}.compareTo(quantity('10Gi')) < 0", mig(), True),
        (f"{MEM}.compareTo(quantity('10Gi')) != 0", mig(), True),
        (f"device.attributes['{D}'].type == 'mig' && ({PROFILE} == '2g.20gb' || {PROFILE} == '1g.10gb')", mig(), True),
        (f"!({PROFILE} == '1g.10gb')", mig(), False),
        ("!!true", mig(), True),
        (f"device.attributes['{D}'].cores >= 14", mig(), True),
        (f"device.attributes['{D}'].healthy", mig(), True),
        # CEL: == across types is false; a version is not a string
        (f"{PROFILE} == 5", mig(), False),
        (f"device.attributes['{D}'].driverVersion == '580.1.2'", mig(), False),
        (f"device.attributes['{D}'].healthy == 1", mig(), False),
        # an error on one side is absorbed when the other side decides (commutative && and ||)
        (f"device.attributes['{D}'].type == 'mig' && {PROFILE} == '1g.10gb'", whole(), False),
        (f"{PROFILE} == '1g.10gb' && device.attributes['{D}'].type == 'mig'", whole(), False),
        (f"{PROFILE} == 'x' || device.attributes['{D}'].type == 'gpu'", whole(), True),
        # an unknown domain is an empty map, the key in it missing: absorbed here
        ("device.driver == 'x' && device.attributes['x.example.com'].foo == 'y'", mig(), False),
    ],
)
def test_accepted(expression: str, device: Device, expected: bool) -> None:
    assert cel.parse(expression).matches(device) is expected


@pytest.mark.parametrize(
    "expression",
    [
        f"{PROFILE} == '1g.10gb'",  # a whole GPU has no profile: "no such key"
        "device.attributes['x.example.com'].foo == 'y'",
        f"{PROFILE} == 'x' || device.attributes['{D}'].type == 'mig'",  # false || error
        f"device.attributes['{D}'].type > 3",  # no such overload
        f"device.attributes['{D}'].type",  # a string where a bool is needed
    ],
)
def test_runtime_errors(expression: str) -> None:
    with pytest.raises(cel.CelRuntimeError):
        cel.parse(expression).matches(whole())


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("", "empty"),
        (f"has({PROFILE})", "function or macro 'has'"),
        (f"size({PROFILE}) > 2", "function or macro 'size'"),
        (f"{PROFILE}.matches('1g.*')", "method matches() on a dyn"),
        (f"{PROFILE}.startsWith('1g')", "method startsWith()"),
        ("cel.bind(x, 1, x == 1)", "function or macro 'cel'"),
        (f"{MEM}.asInteger() > 5", "quantity method 'asInteger'"),
        (f"{MEM} == quantity('1Gi')", "compare with isGreaterThan"),
        (f"{MEM}.isGreaterThan(10)", "takes a quantity"),
        (f"{MEM}.isGreaterThan(quantity('10 Gi'))", "is not a Kubernetes quantity"),
        (f'{MEM}.isGreaterThan(quantity("1Gi" ))', None),  # accepted (spaces are fine): see the check below
        (f"quantity({PROFILE}).isLessThan({MEM})", "string literal"),
        ("device.allowMultipleAllocations", "device.allowMultipleAllocations is outside the subset"),
        ("device.attributes", "device.attributes is read only as"),
        ("device.attributes[x].profile == 'a'", "string literal"),
        (f"{PROFILE} == r'1g.10gb'", "raw and bytes string literals"),
        (f"{PROFILE} == '1g.10gb", "unexpected character"),
        (f"{PROFILE} == '1g\\q'", "escape \\q"),
        (f"{PROFILE} == '1g.10gb' '2g'", "after a complete expression"),
        (f"{PROFILE}", None),  # a bare attribute may be a bool: accepted
        ("'1g.10gb'", "yields a string, not a bool"),
        (f"{MEM}", "yields a quantity"),
        (f"{MEM}.compareTo(quantity('1Gi'))", "yields a int"),
        ("1 < 2 < 3", "chained comparisons"),
        (f"{PROFILE} < 'b'", "is read on ints only"),
        ("'a' == 1", "string == int can never hold"),
        (f"{PROFILE} in {PROFILE}", "`in` is read only as"),
        (f"[{PROFILE}] == []", "a list holds literals only"),
        ("x == 1", "unknown name 'x'"),
        ("device.driver == 'a' ? true : false", "unexpected character '?'"),
        ("device.driver == 'a' &&", "ended early"),
        ("-device.driver == 'a'", "unary minus"),
        ("(" * 70 + "true" + ")" * 70, "nested deeper than"),
        ("device.driver == 'a' && 5", "&& needs bool operands"),
        ("!5", "! needs a bool operand"),
    ],
)
def test_rejected_with_why(expression: str, why: str | None) -> None:
    if why is None:
        cel.parse(expression)  # must read
        return
    with pytest.raises(cel.UnreadableSelector) as err:
        cel.parse(expression)
    assert why in err.value.why
    assert err.value.expression == expression or len(expression) > cel.MAX_EXPRESSION


def test_unreadable_carries_the_position() -> None:
    with pytest.raises(cel.UnreadableSelector) as err:
        cel.parse(f"{PROFILE} == 'a' && has(x)")
    assert err.value.position == len(f"{PROFILE} == 'a' && ")


def test_meaning_profiles_and_memory(catalog: Catalog) -> None:
    mig_class = cel.parse(f"device.driver == '{D}' && device.attributes['{D}'].type == 'mig'")
    one = cel.meaning([mig_class, cel.parse(f"{PROFILE} == '1g.10gb'")], catalog)
    assert one.profiles == {"1g.10gb"} and one.kinds == {"mig"}
    assert one.models == {m.id for m in catalog.models if m.has_profile("1g.10gb")}
    assert "h100-80gb" in one.models and "h200-141gb" not in one.models
    floor = cel.meaning([mig_class, cel.parse(f"{MEM}.isGreaterThan(quantity('10Gi'))")], catalog)
    assert floor.min_memory_mib is not None and floor.min_memory_mib > 10 * 1024
    assert "1g.10gb" not in floor.profiles and "1g.20gb" in floor.profiles
    ge = cel.meaning([mig_class, cel.parse(f"{MEM}.compareTo(quantity('9984Mi')) >= 0")], catalog)
    assert "1g.10gb" in ge.profiles  # H100's 1g.10gb has exactly 9984 MiB
    both = cel.meaning([cel.parse(f"{MEM}.isGreaterThan(quantity('70Gi'))")], catalog)
    assert both.kinds == {"gpu", "mig"}  # no type restriction: whole GPUs too


def test_meaning_other_driver_and_unmodelled_attributes(catalog: Catalog) -> None:
    net = cel.parse("device.driver == 'net.example.com' && device.attributes['net.example.com'].speed == 100")
    assert cel.meaning([net], catalog).offers == frozenset()
    with pytest.raises(cel.UnreadableSelector, match="architecture"):
        cel.meaning([cel.parse(f"device.attributes['{D}'].architecture == 'Hopper'")], catalog)
    product = cel.meaning([cel.parse(f"device.attributes['{D}'].productName == 'NVIDIA H100 80GB HBM3'")], catalog)
    assert product.models == {"h100-80gb"}


def test_meaning_records_runtime_errors(catalog: Catalog) -> None:
    m = cel.meaning([cel.parse(f"{PROFILE} == '1g.10gb'")], catalog)  # whole GPUs have no profile
    assert m.errors and all(o.kind == "gpu" for o, _ in m.errors)
    assert m.profiles == {"1g.10gb"}
