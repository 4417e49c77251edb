"""Static placement rules the scheduler applies, reproduced for the planner: selectors, affinity, taints.

These decide which nodes a pending pod could ever land on; resource fit (CPU, memory, pod slots, GPU instances)
is checked by the planner as it fills nodes.
"""

from __future__ import annotations

from collections import Counter

from migctl.core.cluster import Node, Pod

# Taint effects the scheduler refuses at scheduling time; PreferNoSchedule is only a preference.
_HARD = ("NoSchedule", "NoExecute")


def static_misfit(pod: Pod, node: Node) -> str | None:
    """Why `pod` can never be scheduled on `node` (short reason), or None when it could."""
    if node.unschedulable:
        return "node is cordoned"
    for taint in node.taints:
        if taint.effect in _HARD and not any(t.tolerates(taint) for t in pod.tolerations):
            return f"untolerated taint {taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"
    for key, value in pod.node_selector:
        if node.labels.get(key) != value:
            return "nodeSelector does not match"
    if pod.affinity and not any(t.matches(node.name, node.labels) for t in pod.affinity):
        return "required node affinity does not match"
    return None


def signature(pod: Pod) -> tuple[object, ...]:
    """Pods with the same signature pass `static_misfit` on exactly the same nodes."""
    return (pod.node_selector, pod.affinity, pod.tolerations)


def tally(reasons: Counter[str], total: int) -> str:
    """`0/12 nodes fit: 8 untolerated taint ..., 4 nodeSelector does not match` (like the scheduler says it)."""
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0])))
    fitting = total - sum(reasons.values())
    return f"{fitting}/{total} GPU nodes fit" + (f" ({parts})" if parts else "")
