"""The `migctl.io/vram-choice` pod annotation: round trips, the legacy unversioned form, another version, damage."""

from __future__ import annotations

import json

import pytest

from migctl.wire.versions import UnknownVersionError
from migctl.wire.vram_choice import ContainerRecord, VramChoice, decode, encode

MAIN = ContainerRecord("main", False, "7Gi", "nvidia.com/mig-1g.10gb")
INIT = ContainerRecord("warm", True, "20Gi", "nvidia.com/mig-3g.40gb")
CHOICE = VramChoice("h100-80gb", ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe"), (MAIN, INIT))


@pytest.mark.parametrize("admission", ["", "u-1"])
def test_round_trips_compact_versioned_and_admission_only_when_set(admission: str) -> None:
    choice = VramChoice(CHOICE.model, CHOICE.products, CHOICE.containers, admission)
    raw = encode(choice)
    assert decode(raw) == choice
    doc = json.loads(raw)
    assert doc["version"] == "v1" and " " not in raw
    assert ("admission" in doc) == bool(admission)  # a named pod's record carries no request uid


def test_an_earlier_migctls_unversioned_record_reads_as_v1() -> None:
    legacy = {
        "model": "h100-80gb",
        "products": ["NVIDIA-H100-80GB-HBM3"],
        "containers": [{"name": "main", "init": False, "request": "7Gi", "resource": "nvidia.com/mig-1g.10gb"}],
        "admission": "u-9",
    }
    got = decode(json.dumps(legacy, sort_keys=True, separators=(",", ":")))
    assert got == VramChoice("h100-80gb", ("NVIDIA-H100-80GB-HBM3",), (MAIN,), "u-9")


@pytest.mark.parametrize("version", ["v2", 2, None])
def test_another_version_is_recognised_as_such(version: object) -> None:
    doc = {**json.loads(encode(CHOICE)), "version": version, "containers": "a shape v1 never had"}
    with pytest.raises(UnknownVersionError, match=r"migctl\.io/vram-choice: version .* another migctl version"):
        decode(json.dumps(doc))


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"model": 3}, r"vram-choice\.model"),
        ({"products": "NVIDIA-H100"}, r"vram-choice\.products: expected a list"),
        ({"products": [1]}, r"vram-choice\.products\[0\]"),
        ({"containers": None}, r"vram-choice\.containers: expected a list"),
        ({"containers": [7]}, r"vram-choice\.containers\[0\]: expected an object"),
        ({"containers": [{"name": "m", "init": "no", "request": "1Gi", "resource": "r"}]}, r"containers\[0\]\.init"),
        ({"containers": [{"name": "m", "init": False, "resource": "r"}]}, r"containers\[0\]\.request"),
        ({"admission": ["u"]}, r"vram-choice\.admission"),
    ],
)
def test_damage_names_the_field_and_is_not_another_version(patch: dict[str, object], field: str) -> None:
    with pytest.raises((ValueError, TypeError), match=field) as e:
        decode(json.dumps({**json.loads(encode(CHOICE)), **patch}))
    assert not isinstance(e.value, UnknownVersionError)


def test_not_an_object() -> None:
    with pytest.raises(TypeError, match="expected an object"):
        decode("[1]")
