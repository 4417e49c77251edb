"""Strict readers for the label and annotation values GPU Feature Discovery and migctl write.

`nvidia.com/gpu.count`, `nvidia.com/gpu.memory`, `nvidia.com/mig-<p>.memory`, migctl's GPU index: plain
non-negative integers in ASCII digits, with sane upper bounds. Anything else raises ValueError naming the value
and what was expected, so the caller can freeze or skip the one node and say why (never silently read 0).
"""

from __future__ import annotations

from migctl.wire.values import MAX_GPUS_PER_NODE, gpu_index, gpu_index_or_none, parse_whole  # the wire's readers

__all__ = [
    "MAX_GPUS_PER_NODE",
    "MAX_GPU_MEMORY_MIB",
    "MAX_INSTANCES_PER_POD",
    "gpu_count",
    "gpu_index",
    "gpu_index_or_none",
    "memory_mib",
    "parse_whole",
]

MAX_GPU_MEMORY_MIB = 4 * 2**20  # 4 TiB: no GPU is near this
MAX_INSTANCES_PER_POD = MAX_GPUS_PER_NODE * 7  # every MIG slice of the largest node


def gpu_count(value: object) -> int:
    """`nvidia.com/gpu.count`: at least 1 (a GPU node with zero GPUs is a broken label), at most 64."""
    return parse_whole(value, MAX_GPUS_PER_NODE, "a GPU count", minimum=1)


def memory_mib(value: object) -> int:
    """`nvidia.com/gpu.memory` or `nvidia.com/mig-<p>.memory`: MiB, positive, at most 4 TiB."""
    return parse_whole(value, MAX_GPU_MEMORY_MIB, "GPU memory in MiB", minimum=1)
