"""The one strict quantity and label-value parser (core/text/quantity.py, core/text/label_values.py)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from migctl.core.text import label_values
from migctl.core.text.quantity import MAX_MAGNITUDE, parse_quantity, to_count


@pytest.mark.parametrize(
    ("text", "value"),
    [("7Gi", 7 * 2**30), ("500m", Decimal("0.5")), ("1.5", Decimal("1.5")), ("8e9", 8 * 10**9),
     ("1E-3", Decimal("0.001")), (" 2 ", 2), (3, 3), (2.5, Decimal("2.5")), ("+1k", 1000),
     ("9223372036854775807", 2**63 - 1), ("1e18", 10**18)],
)  # fmt: skip
def test_valid_quantities_parse_exactly(text: Any, value: Any) -> None:
    assert parse_quantity(text) == Decimal(value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e999999999", "'1e999999999' is out of range (exponent 999999999; at most ±30)"),
        ("1e5000", "'1e5000' is out of range (exponent 5000"),
        ("1e-99", "out of range (exponent -99"),
        ("1e19", "'1e19' is out of range (a quantity's magnitude is at most 9223372036854775807"),
        ("-1e19", "out of range"),
        ("16Ei", "out of range"),
        (math.inf, "inf is not a quantity"),
        (math.nan, "nan is not a quantity"),
        (Decimal("Infinity"), "infinity and NaN are not amounts"),
        ("Infinity", "'Infinity' is not a Kubernetes quantity (expected a Kubernetes quantity such as 7Gi"),
        ("²", "'²' is not a Kubernetes quantity"),
        ("１", "is not a Kubernetes quantity"),
        ("٣Gi", "is not a Kubernetes quantity"),
        ("9" * 70, "longer than 64 characters"),
        (True, "True is not a quantity"),
        ([1], "[1] is not a quantity (expected a Kubernetes quantity such as 7Gi, 8192Mi, 500m or 2, got list)"),
        (None, "None is not a quantity"),
        ("1 Gi", "is not a Kubernetes quantity"),
        (10**30, "is out of range"),
    ],
)
def test_bad_quantities_name_the_value_and_what_was_expected(text: Any, message: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_quantity(text)
    assert message in str(e.value)


def test_the_magnitude_bound_is_int64() -> None:
    assert parse_quantity(str(2**63 - 1)) == MAX_MAGNITUDE
    with pytest.raises(ValueError, match="out of range"):
        parse_quantity(str(2**63))


def test_counts_are_whole_and_bounded() -> None:
    assert to_count(Decimal(3), 10) == 3
    with pytest.raises(ValueError, match=r"0\.5 is not a whole non-negative count"):
        to_count(Decimal("0.5"), 10)
    with pytest.raises(ValueError, match="-1 is not a whole non-negative count"):
        to_count(Decimal(-1), 10)
    with pytest.raises(ValueError, match=r"11 is out of range \(a count of at most 10 per pod\)"):
        to_count(Decimal(11), 10, "per pod")


@pytest.mark.parametrize(
    ("value", "message"),
    [("-1", "'-1' is not a whole number (expected a GPU count: ASCII digits, 1..64)"),
     ("abc", "'abc' is not a whole number"), ("0", "0 is out of range (expected a GPU count: 1..64)"),
     ("²", "'²' is not a whole number"), ("100000", "100000 is out of range"), ("", "'' is not a whole number"),
     ("1e3", "not a whole number"), (True, "True is not a whole number")],
)  # fmt: skip
def test_gpu_count_labels_are_strict(value: Any, message: str) -> None:
    with pytest.raises(ValueError) as e:
        label_values.gpu_count(value)
    assert message in str(e.value)


def test_label_values_accept_plain_digits() -> None:
    assert label_values.gpu_count("8") == 8
    assert label_values.memory_mib("81559") == 81559
    assert label_values.gpu_index("0") == 0
    with pytest.raises(ValueError, match="out of range"):
        label_values.memory_mib(str(5 * 2**20))


def test_the_actuator_reads_counts_with_the_same_parser() -> None:
    from migctl.controller.actuator import capacity_mismatch
    from migctl.core.model.gpu_config import GpuConfig

    gpus = {0: GpuConfig.mig({"1g.10gb": 7})}
    node: dict[str, Any] = {
        "metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": "7"}},
        "status": {"allocatable": {"nvidia.com/mig-1g.10gb": "7"}},
    }
    assert capacity_mismatch(node, gpus) == ""
    node["metadata"]["labels"]["nvidia.com/mig-1g.10gb.count"] = "⁷"  # passes isdigit(), fails int()
    assert "GFD counts {} != expected" in capacity_mismatch(node, gpus)
    node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "1e5000"
    assert "allocatable {} != expected" in capacity_mismatch(node, gpus)
