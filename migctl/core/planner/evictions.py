"""Evictions (opt-in, `planner.evictions: lower-priority`): free a node for a pod by evicting its GPU pods of
strictly lower priority, fewest victims first, at most `planner.max_evictions` per plan."""

from __future__ import annotations

from collections import Counter

from migctl.core.cluster import Pod
from migctl.core.demand import WHOLE_GPU
from migctl.core.plan import Eviction
from migctl.core.planner.greedy import Greedy
from migctl.core.planner.state import NodeState, Slot


class Evictions(Greedy):
    """The eviction step of a pass, after the greedy and the local search."""

    def _try_evict(self, pod: Pod, budget: int) -> list[Eviction] | None:
        """Free a node for `pod` by evicting its GPU pods, all of strictly lower priority (every GPU pod of the
        node: without per-GPU usage the planner cannot tell which GPU they use). Fewest victims win."""
        ranked: list[tuple[tuple[int, int, str], NodeState, list[tuple[str, int]]]] = []
        if not self.strategy.changes or not self.pod_kinds.get(pod.key):
            return None  # no GPU kind in the pod's reach serves it: no node freed of its pods would either
        for ns in self.sig_nodes[self._sig(pod)]:
            node = ns.node
            if node.model is None or node.frozen_reason or ns.touched or not node.gpu_pods or not node.gpus:
                continue
            victims = [(k, p) for k, p, _ in node.gpu_pods]
            if any(p >= pod.priority for _, p in victims) or len(victims) > budget:
                continue
            if pod.requests.fits_in(ns.free):
                ranked.append(((len(victims), sum(p for _, p in victims), node.name), ns, victims))
        for _, ns, victims in sorted(ranked, key=lambda r: r[0]):
            old = self._swap_slots(ns, self._idle_slots(ns))
            if self._place_multi(pod, [ns]):
                return [Eviction(k, ns.node.name, p, pod.key) for k, p in victims]
            self._swap_slots(ns, old)
        return None

    def _idle_slots(self, ns: NodeState) -> list[Slot]:
        """The node's GPUs as they will be once its GPU pods are gone."""
        node = ns.node
        base = ns.slots[0].order if ns.slots else 0
        slots = []
        for i, gpu in enumerate(node.gpus):
            cfg = gpu.config
            free = Counter(dict(cfg.layout)) if cfg.mig_enabled else Counter({WHOLE_GPU: 1})
            reconf = node.model is not None and (cfg.mig_enabled or ns.mode_ok)
            kind = node.model.id if node.model else ""
            slots.append(Slot(ns, gpu.index, node.model, kind, cfg, free, reconf, cfg.mig_enabled, base + i / 100))
        return slots

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
