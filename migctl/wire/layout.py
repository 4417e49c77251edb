"""The `migctl.io/layout` annotation: the controller's record of the per-GPU layout it last applied to a node.

    {"version": "v1", "config": "<mig-parted config name>", "gpus": {"0": {"mig": true, "layout": {...}}, ...}}

The `gpus` part (`gpus_doc`) is also the shape of the target inside `migctl.io/target`. The reader is strict
(ASCII digit indexes and counts, objects where objects belong) and raises ValueError or TypeError naming the
field, so one hand-edited annotation costs only its node. It is versioned (`versions.py`): the unversioned form
reads as v1; another version raises UnknownVersionError (the node is left alone, not read as unreadable).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migctl.wire.values import gpu_index, parse_whole
from migctl.wire.versions import VERSION, check_version

MAX_INSTANCES_PER_GPU = 7  # no MIG GPU has more than seven slices


@dataclass(frozen=True)
class GpuLayout:
    """One GPU as recorded: MIG on with these instances (profile name -> count), or MIG off."""

    mig: bool
    layout: Mapping[str, int] = field(default_factory=dict)


def gpus_doc(gpus: Mapping[int, GpuLayout]) -> dict[str, Any]:
    """{"0": {"mig": true, "layout": {...}}, ...} in index order."""
    return {str(i): {"mig": g.mig, "layout": dict(g.layout)} for i, g in sorted(gpus.items())}


def encode(gpus: Mapping[int, GpuLayout], config: str) -> str:
    """The annotation's value (sorted keys: an unchanged layout writes the same bytes)."""
    return json.dumps({"version": VERSION, "gpus": gpus_doc(gpus), "config": config}, sort_keys=True)


def expect_object(value: Any, where: str) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else TypeError naming the field (the wire codecs' one check)."""
    if not isinstance(value, Mapping):
        text = repr(value)
        shown = text if len(text) <= 60 else text[:57] + "..."
        raise TypeError(f"{where}: expected an object, got {type(value).__name__} {shown}")
    return value


def decode(raw: str) -> dict[int, GpuLayout]:
    """The per-GPU layouts of an annotation value (a GPU without `mig` reads as MIG on); ValueError (bad JSON,
    a bad number) or TypeError (a wrong type) naming the field; UnknownVersionError (a ValueError) for a value
    of another version."""
    data = expect_object(json.loads(raw), "gpus")
    check_version(data, "migctl.io/layout")
    gpus = data.get("gpus")
    out: dict[int, GpuLayout] = {}
    for idx, raw_gpu in (expect_object(gpus, "gpus") if gpus is not None else {}).items():
        i = gpu_index(idx)
        g = expect_object(raw_gpu, f"gpus[{idx}]")
        raw_layout = g.get("layout")
        layout = {
            str(k): parse_whole(v, MAX_INSTANCES_PER_GPU, "an instance count")
            for k, v in (expect_object(raw_layout, f"gpus[{idx}].layout") if raw_layout is not None else {}).items()
        }
        out[i] = GpuLayout(bool(g.get("mig", True)), layout)
    return out
