"""The wire format: migctl's names as the cluster sees them, and the `migctl.io/layout` codec's both directions.

The literals here are the point: a renamed key would strand every node and pod that carries the old one.
"""

from __future__ import annotations

import json

import pytest

from migctl.wire import layout, names, values

GPUS = {1: layout.GpuLayout(False), 0: layout.GpuLayout(True, {"1g.10gb": 3, "4g.40gb": 1})}


def test_names_keep_their_spelling() -> None:
    assert (names.MIG_CONFIG, names.MIG_CONFIG_STATE) == ("nvidia.com/mig.config", "nvidia.com/mig.config.state")
    assert (names.GPU_PRODUCT, names.WHOLE_GPU_RESOURCE) == ("nvidia.com/gpu.product", "nvidia.com/gpu")
    assert names.MIG_RESOURCE_PREFIX + "1g.10gb" == "nvidia.com/mig-1g.10gb"
    assert (names.LAYOUT, names.PHASE, names.ROLLBACK) == ("migctl.io/layout", "migctl.io/phase", "migctl.io/rollback")
    assert (names.VRAM, names.GPUS, names.GPU_INDEX) == ("migctl.io/vram", "migctl.io/gpus", "migctl.io/gpu-index")
    assert names.WEBHOOK_NAME == "vram.migctl.io"
    assert names.is_nvidia("nvidia.com/mig-1g.10gb") and not names.is_nvidia(names.VRAM)


def test_layout_is_written_sorted_and_read_back() -> None:
    raw = layout.encode(GPUS, "migctl-abc")
    assert json.loads(raw) == {
        "version": "v1",
        "config": "migctl-abc",
        "gpus": {"0": {"mig": True, "layout": {"1g.10gb": 3, "4g.40gb": 1}}, "1": {"mig": False, "layout": {}}},
    }
    assert raw == layout.encode(dict(reversed(list(GPUS.items()))), "migctl-abc")  # same layout, same bytes
    assert layout.decode(raw) == GPUS


def test_layout_reader_defaults_mig_on_and_accepts_digit_strings() -> None:
    assert layout.decode('{"gpus": {"2": {"layout": {"1g.5gb": "7"}}}}') == {2: layout.GpuLayout(True, {"1g.5gb": 7})}
    assert layout.decode('{"config": "x"}') == {}


@pytest.mark.parametrize(
    ("raw", "error", "match"),
    [
        ("[1]", TypeError, r"^gpus: expected an object, got list"),
        ('{"gpus": [1]}', TypeError, r"^gpus: expected an object, got list"),
        ('{"gpus": {"0": 5}}', TypeError, r"^gpus\[0\]: expected an object, got int"),
        ('{"gpus": {"0": {"layout": [1]}}}', TypeError, r"^gpus\[0\]\.layout: expected an object"),
        ('{"gpus": {"²": {}}}', ValueError, r"expected a GPU index"),
        ('{"gpus": {"64": {}}}', ValueError, r"64 is out of range \(expected a GPU index: 0..63\)"),
        ('{"gpus": {"0": {"layout": {"1g.5gb": 8}}}}', ValueError, r"expected an instance count: 0..7"),
        ('{"gpus": {"0": {"layout": {"1g.5gb": true}}}}', ValueError, r"not a whole number"),
        ("{gpus", ValueError, r"Expecting property name"),
    ],
)
def test_layout_reader_names_what_is_wrong(raw: str, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        layout.decode(raw)


def test_gpu_placement_round_trips_the_index() -> None:
    with_uuid = values.gpu_placement(3, "GPU-1234")
    assert with_uuid == {
        "migctl.io/gpu-index": "3",
        "migctl.io/gpu-uuid": "GPU-1234",
        "migctl.io/visible-devices": "GPU-1234",
    }
    assert values.gpu_placement(2, None)["migctl.io/visible-devices"] == "2"
    assert values.gpu_index_or_none(with_uuid[names.GPU_INDEX]) == 3
    assert values.gpu_index_or_none("x") is None and values.gpu_index_or_none(None) is None
