"""The `migctl.io/gpus` inventory: round trip, strict parsing with errors that name node and field."""

from __future__ import annotations

import json

import pytest

from migctl.adapters.nvml import NvmlReader
from migctl.core.model.inventory import ForeignInventoryError, GpuInfo, Inventory, MigDevice, parse_inventory
from migctl.errors import InputError
from migctl.wire.versions import UnknownVersionError
from tests.unit.fake_nvml import FakeNvml, a100_mig, h100_no_mig, t4


def _inventory() -> Inventory:
    return NvmlReader(FakeNvml([a100_mig(), h100_no_mig(), t4()])).read()


def test_annotation_round_trips_and_is_compact_and_deterministic() -> None:
    inv = _inventory()
    raw = inv.to_annotation()
    assert " " not in raw.replace("NVIDIA A100", "").replace("NVIDIA H100 80GB HBM3", "").replace("Tesla T4", "")
    assert parse_inventory(raw, "n1") == inv
    assert _inventory().to_annotation() == raw  # same hardware, same string: no needless patches


def test_layout_and_usage_per_gpu() -> None:
    a100 = _inventory().gpu(0)
    assert a100 is not None
    assert dict(a100.config.layout) == {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}
    assert a100.used() == {"3g.20gb": 1, "1g.5gb": 1}
    assert a100.idle() == {"2g.10gb": 1}
    h100 = _inventory().gpu(1)
    assert h100 is not None and not h100.config.mig_enabled


def test_unknown_busy_state_makes_usage_unknown() -> None:
    dev = MigDevice(profile="1g.5gb", profile_id=19, gi=1, start=0, size=1, memory_mib=4864, uuid="MIG-x", busy=None)
    gpu = GpuInfo(
        index=0, uuid="GPU-x", name="NVIDIA A100-SXM4-40GB", memory_mib=40536, mig_capable=True,
        mig_enabled=True, mig_pending=True, busy=None, instances=(dev,),
    )  # fmt: skip
    assert gpu.used() is None and gpu.idle() is None


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: "{not json", "not valid JSON"),
        (lambda d: json.dumps([1]), "expected a JSON object"),
        (lambda d: json.dumps({**d, "version": "v9"}), ".version: version 'v9' was written by another migctl version"),
        (lambda d: json.dumps({**d, "gpus": [{**d["gpus"][0], "uuid": ""}]}), "gpus[0].uuid"),
        (lambda d: json.dumps({**d, "gpus": [{**d["gpus"][0], "surprise": 1}]}), "gpus[0].surprise"),
        (lambda d: json.dumps({**d, "gpus": [d["gpus"][1], d["gpus"][1]]}), "duplicate GPU index"),
        (
            lambda d: json.dumps({**d, "gpus": [{**d["gpus"][0], "mig_enabled": False}]}),
            "instances are listed but MIG is disabled",
        ),
        (
            lambda d: json.dumps({**d, "gpus": [{**d["gpus"][0], "instances": [d["gpus"][0]["instances"][0]] * 2}]}),
            "overlaps",
        ),
    ],
)
def test_bad_annotations_name_the_node_and_the_field(mutate: object, expected: str) -> None:
    data = json.loads(_inventory().to_annotation())
    raw = mutate(data)  # type: ignore[operator]
    with pytest.raises(InputError) as err:
        parse_inventory(raw, "gpu-node-7")
    text = str(err.value)
    assert text.startswith("node gpu-node-7:")
    assert "metadata.annotations[migctl.io/gpus]" in text
    assert expected in text


def test_another_agent_versions_inventory_is_recognised_as_such_not_as_damage() -> None:
    """Through the one version rule (`wire.versions.check_version`): an UnknownVersionError (a reader can tell a
    newer agent from a broken one) that is still an InputError (a reader that cannot tell still leaves it out)."""
    data = json.loads(_inventory().to_annotation())
    with pytest.raises(ForeignInventoryError) as err:
        parse_inventory(json.dumps({**data, "version": "v2", "gpus": "a shape v1 never had"}), "n1")
    assert isinstance(err.value, UnknownVersionError) and isinstance(err.value, InputError)
    with pytest.raises(InputError) as damaged:
        parse_inventory(json.dumps({**data, "gpus": "not a list"}), "n1")
    assert not isinstance(damaged.value, UnknownVersionError)


def test_an_unversioned_inventory_reads_as_v1() -> None:
    inv = _inventory()
    data = json.loads(inv.to_annotation())
    del data["version"]
    assert parse_inventory(json.dumps(data), "n1") == inv
