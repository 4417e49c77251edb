"""Strict readers for the label and annotation values GPU Feature Discovery and migctl write.

`nvidia.com/gpu.count`, `nvidia.com/gpu.memory`, `nvidia.com/mig-<p>.memory`, migctl's GPU index: plain
non-negative integers in ASCII digits, with sane upper bounds. Anything else raises ValueError naming the value
and what was expected, so the caller can freeze or skip the one node and say why (never silently read 0).
"""

from __future__ import annotations

import re

MAX_GPUS_PER_NODE = 64  # the largest real nodes have 16; far above means a wrong label, not a bigger node
MAX_GPU_MEMORY_MIB = 4 * 2**20  # 4 TiB: no GPU is near this
MAX_INSTANCES_PER_POD = MAX_GPUS_PER_NODE * 7  # every MIG slice of the largest node
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


def gpu_count(value: object) -> int:
    """`nvidia.com/gpu.count`: at least 1 (a GPU node with zero GPUs is a broken label), at most 64."""
    return parse_whole(value, MAX_GPUS_PER_NODE, "a GPU count", minimum=1)


def memory_mib(value: object) -> int:
    """`nvidia.com/gpu.memory` or `nvidia.com/mig-<p>.memory`: MiB, positive, at most 4 TiB."""
    return parse_whole(value, MAX_GPU_MEMORY_MIB, "GPU memory in MiB", minimum=1)


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
