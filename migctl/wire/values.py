"""Strict readers of whole numbers on the wire, and the codec of the fallback's GPU placement annotations.

Label and annotation values (`nvidia.com/gpu.count`, migctl's GPU index, a layout's instance counts) are plain
non-negative integers in ASCII digits with sane bounds. Anything else raises ValueError naming the value and what
was expected, so the caller can skip or freeze the one object and say why (never silently read 0).
`migctl.core.text.label_values` builds the GFD readers on `parse_whole`.
"""

from __future__ import annotations

import re

from migctl.wire.names import GPU_INDEX, GPU_UUID, VISIBLE_DEVICES

MAX_GPUS_PER_NODE = 64  # the largest real nodes have 16; far above means a wrong label, not a bigger node
_DIGITS = re.compile(r"^[0-9]{1,12}$")  # ASCII only: `²` passes str.isdigit() and then fails int()


def parse_whole(value: object, maximum: int, what: str, *, minimum: int = 0) -> int:
    """A whole number in ASCII digits within [minimum, maximum]; ValueError naming the value otherwise."""
    text = str(value).strip() if isinstance(value, str | int) and not isinstance(value, bool) else None
    if text is None or not _DIGITS.match(text):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"{shown} is not a whole number (expected {what}: ASCII digits, {minimum}..{maximum})")
    n = int(text)
    if n < minimum or n > maximum:
        raise ValueError(f"{n} is out of range (expected {what}: {minimum}..{maximum})")
    return n


def gpu_index(value: object) -> int:
    """A GPU's index on its node (0-based)."""
    return parse_whole(value, MAX_GPUS_PER_NODE - 1, "a GPU index")


def gpu_index_or_none(value: object) -> int | None:
    """The GPU index migctl's fallback scheduler recorded on a pod, or None when absent or garbled: a garbled
    one counts as unknown rather than rejecting the pod, which would drop out of its node's accounting."""
    if value is None:
        return None
    try:
        return gpu_index(value)
    except ValueError:
        return None


def gpu_placement(index: int, uuid: str | None) -> dict[str, str]:
    """The annotations the fallback scheduler binds a pod with: its GPU's index, UUID and a ready
    NVIDIA_VISIBLE_DEVICES value (the UUID when known, else the index)."""
    return {GPU_INDEX: str(index), GPU_UUID: uuid or "", VISIBLE_DEVICES: uuid or str(index)}
