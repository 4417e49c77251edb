"""From a model's solution to per-GPU targets and assignments, and from those back to the model (a warm start).

The model counts pods per (node, profile) and layouts per class of GPUs; a plan names GPUs. Decoding gives the
first GPUs of a class its new layouts (index order) and fills GPUs that change first, so a GPU the solution
changes but that serves no pod is a needless change: it keeps its layout instead. A changed GPU's target is the
planner's best completion of what it serves (`Complete`) when that strands no more than the solver's layout.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from migctl.core.exact.model import Model, NodeModel
from migctl.core.hardware.geometry import CanonicalLayout, canonical
from migctl.core.model.cluster import Pod
from migctl.core.model.demand import need_mib
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Assignment

# (model id, instances a changed GPU serves) -> the planner's best completion, or None
Complete = Callable[[str, CanonicalLayout], CanonicalLayout | None]


@dataclass(frozen=True)
class NodeResult:
    """What a solution does on one node: new targets of the GPUs that change, and the pods it serves."""

    name: str
    targets: dict[int, GpuConfig]  # GPU index -> target, only GPUs that change
    assignments: tuple[Assignment, ...]


def decode(model: Model, x: Sequence[int], complete: Complete) -> list[NodeResult]:
    queues = [list(pc.pods) for pc in model.classes]
    per_node: dict[int, list[tuple[int, str, int]]] = {}  # node -> (pod class, profile, count)
    for j, (c, n, prof, _) in model.y.items():
        if x[j] > 0:
            per_node.setdefault(n, []).append((c, prof, x[j]))
    changes: dict[int, list[tuple[int, CanonicalLayout, int]]] = {}
    for j, (n, h, lay, _) in model.z.items():
        if x[j] > 0:
            changes.setdefault(n, []).append((h, lay, x[j]))
    out = []
    for n_idx, nm in enumerate(model.nodes):
        if n_idx not in per_node and n_idx not in changes:
            out.append(NodeResult(nm.node.name, {}, ()))
            continue
        out.append(_decode_node(nm, per_node.get(n_idx, []), changes.get(n_idx, []), queues, complete))
    return out


def _decode_node(
    nm: NodeModel,
    served: list[tuple[int, str, int]],
    changes: list[tuple[int, CanonicalLayout, int]],
    queues: list[list[Pod]],
    complete: Complete,
) -> NodeResult:
    new: dict[int, CanonicalLayout] = {}
    for h_idx, lay, count in changes:
        h = nm.classes[h_idx]
        idle = [i for i in h.indexes if i not in new]
        for i in idle[:count]:
            new[i] = lay
    # GPUs in fill order: changed ones first, then kept reconfigurable ones, then fixed ones; a pool is None
    free: dict[int | None, Counter[str]] = {}
    for i in sorted(new):
        free[i] = Counter(dict(new[i]))
    for h in nm.classes:
        for i in h.indexes:
            if i not in new:
                free[i] = Counter(h.keep_free)
    for i in sorted(nm.fixed):
        free[i] = Counter(nm.fixed[i])
    if not nm.node.usage_known or not nm.node.gpus:
        free[None] = Counter(nm.fixed_free)
    serves: dict[int | None, Counter[str]] = {i: Counter() for i in free}
    assignments = []
    for c, prof, count in served:
        mib = nm.model.profile(prof).memory_mib
        for _ in range(count):
            pod = queues[c].pop(0)
            gpu = next(i for i, f in free.items() if f[prof] > 0)
            free[gpu][prof] -= 1
            serves[gpu][prof] += 1
            demand = pod.gpu[0]
            assignments.append(Assignment(pod.key, nm.node.name, gpu, prof, mib, need_mib(demand, mib, pod.need_mib)))
    targets: dict[int, GpuConfig] = {}
    for i, lay in new.items():
        if not serves[i]:
            continue  # a needless change: the GPU keeps its layout
        best = complete(nm.model.id, canonical(serves[i]))
        keep = best is not None and nm.geo.unusable_mib(best) <= nm.geo.unusable_mib(lay)
        targets[i] = GpuConfig.mig(best if keep and best is not None else lay)
    return NodeResult(nm.node.name, targets, tuple(assignments))


def warm_start(
    model: Model, assignments: Sequence[Assignment], targets: Mapping[tuple[str, int], GpuConfig]
) -> list[int] | None:
    """The model's variables for a plan's part on the model's nodes and pods (None when it does not map, which
    would be a disagreement between the model and the planner: the caller then solves without a start)."""
    x = [0] * model.size
    pod_class = {p.key: c for c, pc in enumerate(model.classes) for p in pc.pods}
    node_idx = {nm.node.name: n for n, nm in enumerate(model.nodes)}
    y_var = {(c, n, prof): j for j, (c, n, prof, _) in model.y.items()}
    z_var = {(n, h, lay): j for j, (n, h, lay, _) in model.z.items()}
    touch_var = {n: j for j, n in model.touch.items()}
    for a in assignments:
        c = pod_class.get(a.pod)
        n = node_idx.get(a.node)
        if c is None or n is None:
            continue
        j = y_var.get((c, n, a.profile))
        if j is None:
            return None
        x[j] += 1
    for n, nm in enumerate(model.nodes):
        for h_idx, h in enumerate(nm.classes):
            for i in h.indexes:
                target = targets.get((nm.node.name, i))
                if target is None or not target.mig_enabled:
                    if target is not None:
                        return None  # MIG switched off: not in the model's scope
                    continue
                have = Counter(dict(target.layout))
                if h.mig and not (have - Counter(dict(h.current))):
                    continue  # within the current layout: keeping it serves the same
                sup = [lay for lay in h.layouts if not (have - Counter(dict(lay)))]
                if not sup:
                    return None
                lay = min(sup, key=lambda cand: (nm.geo.unusable_mib(cand), cand))
                x[z_var[(n, h_idx, lay)]] += 1
                if n in touch_var:
                    x[touch_var[n]] = 1
    return x
