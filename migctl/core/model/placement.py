"""Static placement rules the scheduler applies, reproduced for the planner: selectors, affinity, taints.

These decide which nodes a pending pod could ever land on; resource fit (CPU, memory, pod slots, GPU instances)
is checked by the planner as it fills nodes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from migctl.core.model.cluster import Node, Pod, Term, Toleration

# Taint effects the scheduler refuses at scheduling time; PreferNoSchedule is only a preference.
_HARD = ("NoSchedule", "NoExecute")
SELECTOR_MISFIT = "nodeSelector does not match"
AFFINITY_MISFIT = "required node affinity does not match"


def static_misfit(pod: Pod, node: Node) -> str | None:
    """Why `pod` can never be scheduled on `node` (short reason), or None when it could."""
    why = blocked(pod.tolerations, node)
    if why is not None:
        return why
    if not selected(pod, node):
        return SELECTOR_MISFIT
    if not affine(pod, node):
        return AFFINITY_MISFIT
    return None


def blocked(tolerations: tuple[Toleration, ...], node: Node) -> str | None:
    """The first of the rules that only the pod's tolerations meet: a cordon, an untolerated hard taint."""
    if node.unschedulable:
        return "node is cordoned"
    for taint in node.taints:
        if taint.effect in _HARD and not any(t.tolerates(taint) for t in tolerations):
            return f"untolerated taint {taint.key}{'=' + taint.value if taint.value else ''}:{taint.effect}"
    return None


def selected(pod: Pod, node: Node) -> bool:
    return all(node.labels.get(key) == value for key, value in pod.node_selector)


def affine(pod: Pod, node: Node) -> bool:
    return not pod.affinity or any(t.matches(node.name, node.labels) for t in pod.affinity)


class NodeIndex:
    """`static_misfit` over one list of nodes, for pods that name their nodes. A pod pinned by a nodeSelector or
    an `In` affinity term (a hostname, a pool) is checked only on the nodes carrying those labels or names, found
    in an index, so a thousand pinned pods on a thousand nodes cost a thousand look-ups, not a million checks.
    The answers are exactly those of `static_misfit` on every node: which nodes pass, and why the others fail."""

    _MEMO_LIMIT = 1024  # toleration lists remembered (a webhook's index lives long)

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = nodes
        self._labels: dict[tuple[str, str], list[int]] = {}
        self._names: dict[str, list[int]] = {}
        for i, n in enumerate(nodes):
            self._names.setdefault(n.name, []).append(i)
            for pair in n.labels.items():
                self._labels.setdefault(pair, []).append(i)
        # per toleration list: each node's `blocked` reason, those reasons counted, the positions blocked by none
        self._blocks: dict[tuple[Toleration, ...], tuple[list[str | None], Counter[str], list[int]]] = {}

    def fitting(self, pod: Pod) -> list[int]:
        """Positions of the nodes `pod` passes `static_misfit` on, ascending."""
        return self.misfits(pod)[1]

    def misfits(self, pod: Pod) -> tuple[Counter[str], list[int]]:
        """(`static_misfit` reasons of the nodes the pod fails, counted; positions of the nodes it passes)."""
        why, reasons, clear = self._blocked_by(pod.tolerations)
        counted = Counter(reasons)
        chosen = self._selected(pod)
        if chosen is None:
            after_selector = len(clear)
            pool: Sequence[int] = clear
        else:
            pool = sorted(i for i in chosen if why[i] is None)
            after_selector = len(pool)
        near = self._affine(pod.affinity) if pod.affinity else None
        if near is not None:
            pool = [i for i in pool if i in near]
        nodes = self.nodes
        passing = [i for i in pool if affine(pod, nodes[i])] if pod.affinity else list(pool)
        if len(clear) > after_selector:
            counted[SELECTOR_MISFIT] += len(clear) - after_selector
        if after_selector > len(passing):
            counted[AFFINITY_MISFIT] += after_selector - len(passing)
        return counted, passing

    def _blocked_by(self, tolerations: tuple[Toleration, ...]) -> tuple[list[str | None], Counter[str], list[int]]:
        hit = self._blocks.get(tolerations)
        if hit is None:
            if len(self._blocks) >= self._MEMO_LIMIT:
                self._blocks.clear()
            why = [blocked(tolerations, n) for n in self.nodes]
            hit = self._blocks[tolerations] = (
                why,
                Counter(w for w in why if w is not None),
                [i for i, w in enumerate(why) if w is None],
            )
        return hit

    def _selected(self, pod: Pod) -> set[int] | None:
        """The nodes whose labels hold every pair of the pod's nodeSelector (exactly); None without one."""
        if not pod.node_selector:
            return None
        found: set[int] | None = None
        for pair in sorted(pod.node_selector, key=lambda kv: len(self._labels.get(kv, ()))):
            here = self._labels.get(pair, ())
            found = set(here) if found is None else found.intersection(here)
            if not found:
                break
        return found

    def _affine(self, terms: tuple[Term, ...]) -> set[int] | None:
        """Nodes that may match one of the terms (more, never fewer), from their `In` requirements on labels and
        node names; None when some term names none (it may match anywhere)."""
        out: set[int] = set()
        for term in terms:
            if not term.expressions and not term.fields:
                continue  # an empty term matches nothing
            near: set[int] | None = None
            for r in term.expressions:
                if r.operator == "In":
                    here = {i for v in r.values for i in self._labels.get((r.key, v), ())}
                    near = here if near is None else near & here
            for r in term.fields:
                if r.operator == "In" and r.key == "metadata.name":
                    here = {i for v in r.values for i in self._names.get(v, ())}
                    near = here if near is None else near & here
            if near is None:
                return None
            out |= near
        return out


def signature(pod: Pod) -> tuple[object, ...]:
    """Pods with the same signature pass `static_misfit` on exactly the same nodes."""
    return (pod.node_selector, pod.affinity, pod.tolerations)


def tally(reasons: Counter[str], total: int) -> str:
    """`0/12 nodes fit: 8 untolerated taint ..., 4 nodeSelector does not match` (like the scheduler says it)."""
    parts = ", ".join(f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0])))
    fitting = total - sum(reasons.values())
    return f"{fitting}/{total} GPU nodes fit" + (f" ({parts})" if parts else "")
