"""Which neighbourhoods the large-neighbourhood search solves, in a fixed order: for objective 1 the nodes in
reach of each left-out pod, highest priority first; for objective 2 the nodes that strand the most memory above
what their pods must strand, each with the nodes of its GPU model that strand most (docs/planning.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator

from migctl.core.exact.model import class_key, in_scope
from migctl.core.exact.state import _State
from migctl.core.hardware.geometry import geometry
from migctl.core.model.cluster import Node, Pod
from migctl.core.model.demand import need_mib, profiles_for
from migctl.core.model.placement import NodeIndex, signature


def part_pods(state: _State, group: set[str], near: dict[str, list[Pod]], pods: dict[str, Pod], cap: int) -> list[Pod]:
    """The pods of a neighbourhood: those the plan puts on its nodes, and up to `cap` left-out pods that could go
    there, highest priority first, at most four of a kind (interchangeable pods are one choice)."""
    out = [pods[k] for n in sorted(group) for k in state.on_node.get(n, {}) if k in pods]
    seen: set[str] = set()
    kinds: Counter[tuple[object, ...]] = Counter()
    extra: list[Pod] = []
    for p in sorted((p for n in group for p in near.get(n, ())), key=by_priority):
        if p.key in seen or p.key in state.where:
            continue
        seen.add(p.key)
        kind = class_key(p)
        if kinds[kind] >= 4:
            continue
        kinds[kind] += 1
        extra.append(p)
        if len(extra) >= cap:
            break
    return out + extra


def by_priority(p: Pod) -> tuple[int, str]:
    return (-p.priority, p.key)


def reach_of(left: list[Pod], nodes: list[Node], classes: int) -> dict[str, frozenset[str]]:
    """Nodes each left-out pod could use (static fit, CPU/memory/slots, a profile that serves it), for the first
    `classes` kinds of left-out pod (by priority); later kinds are not searched for."""
    out: dict[str, frozenset[str]] = {}
    memo: dict[tuple[object, ...], frozenset[str]] = {}
    static: dict[tuple[object, ...], list[Node]] = {}
    index = NodeIndex(nodes)
    free = {n.name: n.free for n in nodes}
    for pod in left:
        key = (signature(pod), pod.gpu, pod.requests)
        hit = memo.get(key)
        if hit is None:
            if len(memo) >= classes:
                continue
            sig = signature(pod)
            fits = static.get(sig)
            if fits is None:
                fits = static[sig] = [nodes[i] for i in index.fitting(pod)]
            serves: dict[str, bool] = {}
            names = []
            for n in fits:
                assert n.model is not None
                ok = serves.get(n.model.id)
                if ok is None:
                    ok = serves[n.model.id] = bool(profiles_for(n.model, pod.gpu[0]))
                if ok and pod.requests.fits_in(free[n.name]):
                    names.append(n.name)
            hit = memo[key] = frozenset(names)
        if hit:
            out[pod.key] = hit
    return out


class Excess:
    """Memory the plan strands per node above what its pods must strand there: each pod's waste above that of its
    smallest instance on the node's model, plus the unusable MiB of the node's changed GPUs. Kept per node and
    refreshed for the nodes a kept neighbourhood changed."""

    def __init__(self, state: _State, pods: dict[str, Pod], mig: list[str]) -> None:
        self.state, self.pods = state, pods
        self.least: dict[tuple[object, ...], int] = {}
        self.of = {n: self._node(n) for n in mig}

    def refresh(self, names: Iterable[str]) -> None:
        for n in names:
            self.of[n] = self._node(n)

    def _node(self, name: str) -> int:
        state = self.state
        node = state.nodes[name]
        model = node.model
        if model is None:
            return 0
        total = 0
        for a in state.on_node.get(name, {}).values():
            pod = self.pods[a.pod]
            if not in_scope(pod):
                continue
            d = pod.gpu[0]
            key = (model.id, d, pod.need_mib)
            floor = self.least.get(key)
            if floor is None:
                floor = self.least[key] = min(
                    (p.memory_mib - need_mib(d, p.memory_mib, pod.need_mib) for p in profiles_for(model, d)), default=0
                )
            total += a.waste_mib - floor
        geo = geometry(model)
        for g in node.gpus:
            t = state.targets.get((name, g.index))
            if t is not None and t.mig_enabled:
                total += geo.unusable_mib(t.layout)
        return total


def groups_of(
    state: _State, mig: list[str], left: list[Pod], reach: dict[str, frozenset[str]], size: int, score: dict[str, int]
) -> Iterator[set[str]]:
    """Neighbourhoods, alternating two sources. For objective 1, around each left-out pod that some node could
    serve, highest priority first: each node of its reach (most stranded memory first) with the others of its
    reach that strand most. For objective 2, the nodes that strand the most memory, each with those of its GPU
    model that strand most. At most eight groups per seed."""
    by_score = sorted(mig, key=lambda n: (-score[n], n))

    def for_pods() -> Iterator[set[str]]:
        for pod in left:
            r = reach.get(pod.key)
            if not r:
                continue
            around = sorted(r, key=lambda n: (-score.get(n, 0), n))
            for seed in around[:8]:
                yield from _with(seed, [n for n in around if n != seed], size)

    def for_waste() -> Iterator[set[str]]:
        kinds: dict[str, list[str]] = {}
        for n in by_score:
            model = state.nodes[n].model
            kinds.setdefault(model.id if model else "", []).append(n)
        for n in by_score:
            if score[n] == 0:
                return
            model = state.nodes[n].model
            yield from _with(n, [m for m in kinds[model.id if model else ""] if m != n], size)

    sources = [for_pods(), for_waste()]
    while sources:
        for src in list(sources):
            group = next(src, None)
            if group is None:
                sources.remove(src)
            else:
                yield group


def _with(seed: str, partners: list[str], size: int) -> Iterator[set[str]]:
    if size <= 1 or not partners:
        yield {seed}
        return
    for i in range(min(8, max(1, len(partners) - size + 2))):
        yield {seed, *partners[i : i + size - 1]}
