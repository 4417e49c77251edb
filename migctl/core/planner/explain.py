"""Why a pod is left out: the reasons a plan gives per unplaced pod, counted over the nodes (selectors, taints,
GPU model, CPU and memory, frozen or busy GPUs)."""

from __future__ import annotations

from collections import Counter

from migctl.core.model.cluster import Pod
from migctl.core.model.demand import WHOLE_GPU
from migctl.core.model.placement import tally
from migctl.core.model.plan import Unplaced
from migctl.core.planner.evictions import Evictions
from migctl.core.planner.state import NodeState


class Explain(Evictions):
    """The explanations of a pass's result."""

    def _explain(self, pods: list[Pod]) -> list[Unplaced]:
        out = []
        largest = max((p.memory_mib for m in self.models.values() for p in m.base_profiles), default=0)
        whole_free = any(s.free[WHOLE_GPU] > s.assigned[WHOLE_GPU] for s in self.slots)  # once, not per pod
        for pod in sorted(pods, key=lambda p: p.key):
            out.append(Unplaced(pod.key, self._reason(pod, largest, whole_free)))
        return out

    def _reason(self, pod: Pod, largest: int, whole_free: bool) -> str:
        for d in pod.gpu:
            if d.kind == "vram" and d.vram_mib > largest:
                return (
                    f"asks for {d.vram_mib} MiB of GPU memory; the largest MIG instance on any GPU here has "
                    f"{largest} MiB"
                )
            if d.kind == "profile" and not any(m.has_profile(d.profile) for m in self.models.values()):
                return f"no GPU model in the cluster offers MIG profile {d.profile}"
        wants_whole = any(d.kind == "gpu" for d in pod.gpu) and not self.settings.allow_mig_mode_change
        if wants_whole and not whole_free:
            return (
                "needs a whole GPU with MIG disabled; none is free and MIG mode changes are off "
                "(planner.allow_mig_mode_change)"
            )
        fixed, open_nodes = self._misfits(pod)
        misfit = fixed.copy()
        for ns in open_nodes:
            if not pod.requests.fits_in(ns.free):
                misfit["insufficient cpu, memory or pod slots"] += 1
            elif ns.node.frozen_reason:
                misfit[f"node not reconfigurable ({ns.node.frozen_reason}) and no free instance"] += 1
            elif not ns.node.usage_known:
                misfit["no free instance; GPUs busy (per-GPU usage unknown)"] += 1
            else:
                misfit["no free instance and no idle GPU that a layout change could use"] += 1
        return tally(misfit, len(self.nodes)) + f"; needs {', '.join(str(d) for d in pod.gpu)}"

    def _misfits(self, pod: Pod) -> tuple[Counter[str], list[NodeState]]:
        """Why nodes refuse the pod whatever its CPU and memory (selectors, taints, GPU model), counted, and the
        nodes left; memoised per signature and GPU request, since explaining is per left-out pod."""
        sid = self._sig(pod)
        key = (sid, pod.gpu)
        hit = self.misfit_memo.get(key)
        if hit is None:
            static = self.static_memo.get(sid)
            if static is None:  # selectors and taints: per signature, whatever the GPU request
                reasons, fitting = self.node_index.misfits(pod)
                static = self.static_memo[sid] = (reasons, {})
                for i in fitting:
                    ns = self.nodes[i]
                    static[1].setdefault(frozenset(sl.kind for sl in ns.slots), []).append(ns)
            fixed = Counter(static[0])
            left: list[NodeState] = []
            for kinds, nodes in static[1].items():
                if any(self._choices(k, d) for k in kinds for d in pod.gpu):
                    left.extend(nodes)
                else:
                    fixed["GPU model cannot serve the request"] += len(nodes)
            hit = self.misfit_memo[key] = (fixed, left)
        return hit
