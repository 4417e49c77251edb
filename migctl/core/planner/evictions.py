"""Evictions (opt-in, `planner.evictions: lower-priority`): free a node for a pod by evicting its GPU pods of
strictly lower priority, fewest victims first, at most `planner.max_evictions` per plan.

The node may already serve pods of this plan on its free instances (the greedy and the local search run first).
Those pods keep their instances: the node's GPUs as they will be once its GPU pods are gone still hold them, so
a GPU the evicting pod reshapes is reshaped around them (its layout is the best completion of every instance
assigned to it), and the eviction is taken only when the pod fits beside them (docs/planning.md, "Evictions")."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from migctl.core.model.cluster import Pod
from migctl.core.model.demand import WHOLE_GPU
from migctl.core.model.plan import Eviction
from migctl.core.planner.greedy import Greedy
from migctl.core.planner.state import NodeState, Slot


class Evictions(Greedy):
    """The eviction step of a pass, after the greedy and the local search."""

    def _try_evict(self, pod: Pod, budget: int) -> list[Eviction] | None:
        """Free a node for `pod` by evicting its GPU pods, all of strictly lower priority (every GPU pod of the
        node: without per-GPU usage the planner cannot tell which GPU they use). Fewest victims win. A node this
        pass has freed already comes first, at no eviction (an empty list): its pods are gone once."""
        ranked: list[tuple[tuple[int, int, str], NodeState, list[tuple[str, int]]]] = []
        if not self.strategy.changes or not self.pod_kinds.get(pod.key):
            return None  # no GPU kind in the pod's reach serves it: no node freed of its pods would either
        reach = self.sig_nodes[self._sig(pod)]
        freed = {e.node for e in self.evictions}
        again = [ns for ns in reach if ns.node.name in freed]
        if again and self._place_multi(pod, again):
            return []
        for ns in reach:
            node = ns.node
            if node.name in freed or ns.touched or node.model is None or node.frozen_reason:
                continue
            if not node.gpu_pods or not node.gpus:
                continue
            victims = [(k, p) for k, p, _ in node.gpu_pods]
            if any(p >= pod.priority for _, p in victims) or len(victims) > budget:
                continue
            if pod.requests.fits_in(ns.free):
                ranked.append(((len(victims), sum(p for _, p in victims), node.name), ns, victims))
        for _, ns, victims in sorted(ranked, key=lambda r: r[0]):
            idle = self._idle_slots(ns)
            if idle is None:
                continue
            slots, pooled = idle
            old = self._swap_slots(ns, slots)
            if self._place_multi(pod, [ns]):
                if pooled:
                    self._name_gpus(ns.node.name, pooled)
                return [Eviction(k, ns.node.name, p, pod.key) for k, p in victims]
            self._swap_slots(ns, old)
        return None

    def _idle_slots(self, ns: NodeState) -> tuple[list[Slot], dict[str, list[int]]] | None:
        """The node's GPUs as they will be once its GPU pods are gone, each still holding the instances this plan
        has already assigned on it. A node whose usage is unknown had one pool of free instances: each instance
        the plan took there goes to the first GPU whose layout has one to spare (returned per profile, a GPU index
        per instance, for `_name_gpus` once the eviction is taken); None when the layouts cannot hold them all."""
        node = ns.node
        base = ns.slots[0].order if ns.slots else 0
        slots = []
        for i, gpu in enumerate(node.gpus):
            cfg = gpu.config
            free = Counter(dict(cfg.layout)) if cfg.mig_enabled else Counter({WHOLE_GPU: 1})
            reconf = node.model is not None and (cfg.mig_enabled or ns.mode_ok)
            kind = node.model.id if node.model else ""
            slots.append(Slot(ns, gpu.index, node.model, kind, cfg, free, reconf, cfg.mig_enabled, base + i / 100))
        by_index = {s.index: s for s in slots}
        pooled: dict[str, list[int]] = {}
        for old in ns.slots:
            same = by_index.get(old.index) if old.index is not None else None
            if same is not None:  # what the local search reads (it does not run after evictions; kept alike)
                same.requests, same.locked = list(old.requests), old.locked
            for profile, n in old.assigned.items():
                for _ in range(n):
                    slot = same if old.index is not None else _holder(slots, profile)
                    if slot is None or slot.assigned[profile] >= slot.free[profile]:
                        return None  # an instance the plan relies on that the node's layouts do not have
                    slot.assigned[profile] += 1
                    if old.index is None and slot.index is not None:
                        slot.locked = True  # not in its requests: the local search must leave it alone
                        pooled.setdefault(profile, []).append(slot.index)
        return slots, pooled

    def _name_gpus(self, node: str, pooled: dict[str, list[int]]) -> None:
        """The node's pool is gone: each assignment to it names the GPU `_idle_slots` gave its instance."""
        for i, a in enumerate(self.assignments):
            if a.node == node and a.gpu is None:
                self.assignments[i] = replace(a, gpu=pooled[a.profile].pop())

    def _swap_slots(self, ns: NodeState, new: list[Slot]) -> list[Slot]:
        """Replace a node's slots in every index; returns the old ones (CPU/memory are not credited back)."""
        for s in ns.slots:
            s.version += 1  # retires its heap entries
            if s.key is not None:
                for sid in ns.sigs:
                    lst = self.views[sid][s.key]
                    lst.remove(s)
                    if not lst:
                        del self.views[sid][s.key]
                s.key = None
        old, ns.slots = ns.slots, new
        for s in new:
            self._refresh(s)
        return old


def _holder(slots: list[Slot], profile: str) -> Slot | None:
    """The first GPU, in index order, with an instance of `profile` not yet assigned."""
    for s in slots:
        if s.assigned[profile] < s.free[profile]:
            return s
    return None
