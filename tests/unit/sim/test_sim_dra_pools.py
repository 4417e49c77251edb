"""`core/dra/pools.py` builds, from a catalog model, the pool the adapter reads from NVIDIA's DynamicMIG slices: the
same devices in the same walk order, the same placements and counters, and the same per-profile DeviceClasses.
The slices are the ones `tests/nvidia_slices.py` writes in NVIDIA's shape; the reader is the adapter's own."""

from __future__ import annotations

import pytest

from migctl.adapters.dra.deviceclasses import read_device_classes
from migctl.adapters.dra.slices import read_slices
from migctl.core.dra.devices import Mode, NodePool
from migctl.core.dra.pools import dynamic_pool, profile_class_name, profile_classes
from migctl.core.hardware.catalog import load_catalog
from tests.nvidia_slices import device_classes, node_slices

CATALOG = load_catalog()


def _shape(pool: NodePool) -> list[tuple[object, ...]]:
    return [
        (
            d.name,
            d.kind,
            d.minor,
            d.profile,
            d.placement,
            sorted((c.counter_set, c.counter, c.amount) for c in d.consumes),
        )
        for d in pool.devices
    ]


@pytest.mark.parametrize("model_id", ["a100-40gb", "h100-80gb"])
@pytest.mark.parametrize("mig_mode_on", [False, True])
def test_the_built_pool_is_what_the_adapter_reads_from_nvidias_slices(model_id: str, mig_mode_on: bool) -> None:
    model = CATALOG.model(model_id)
    read = read_slices(node_slices("n1", model, 2, mig_mode_on=mig_mode_on), CATALOG).pool("n1")
    assert read is not None
    built = dynamic_pool("n1", model, 2, mig_mode_on=mig_mode_on)
    assert built.mode is read.mode is Mode.DYNAMIC
    assert _shape(built) == _shape(read)  # first fit's walk order included
    assert {n: dict(c.counters) for n, c in built.counter_sets.items()} == {
        n: dict(c.counters) for n, c in read.counter_sets.items()
    }
    first = "gpu-0-mig-1g10gb-15-0" if model_id == "a100-40gb" else "gpu-0-mig-1g10gb-19-0"
    assert built.devices[0].name == (first if mig_mode_on else "gpu-0")  # the whole GPU sorts first when offered


def test_the_profile_classes_are_the_drivers_extended_resource_classes() -> None:
    model = CATALOG.model("h100-80gb")
    read = read_device_classes(device_classes(model)).classes
    built = profile_classes(model)
    assert len(built) == len(model.base_profiles)
    for p in model.base_profiles:
        spec = built[profile_class_name(p.name)]
        assert spec.extended_resource == f"nvidia.com/mig-{p.name}"
        got = read[spec.name]
        assert (got.selectors, got.extended_resource) == (spec.selectors, spec.extended_resource)
    with pytest.raises(ValueError, match="at least one GPU"):
        dynamic_pool("n1", model, 0)
