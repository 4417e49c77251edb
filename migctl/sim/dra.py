"""DRA nodes in the simulator (docs/simulation.md, "DRA clusters"): NVIDIA's DynamicMIG pools, the claims the
trace's pods make, and kube-scheduler's first fit over them.

Why a model of its own: on a DynamicMIG node no layout exists before a pod; the DRA allocator picks a partition
among every free placement, in device-name order, and the driver makes it where the allocator chose. So a pod is
placed by `migctl.core.dra.firstfit.predict` (the predictor migctl's fences are computed with) on the node's pool
as `migctl.core.dra.pools.dynamic_pool` builds it, never by a rule of the simulator. The partition is made there
(`Cluster.make`) and destroyed when its pod ends (`Cluster.drop_free`, NVIDIA's unprepare).

A pod asks for its smallest profile by name (`nvidia.com/mig-<profile>`, as on the other paths) and reaches the
node through the per-profile DeviceClass with that `extendedResourceName` (KEP-5004): one claim, one request of
`num_gpu` devices of that class. Nodes are tried in name order (the first node whose first fit succeeds):
kube-scheduler's node scores are not modelled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from migctl.core.dra.claims import ClaimSpec, ExactRequest, Request
from migctl.core.dra.devices import DeviceId, NodePool
from migctl.core.dra.fences import FENCE
from migctl.core.dra.firstfit import predict
from migctl.core.dra.naming import DRIVER, mig_device_name
from migctl.core.dra.pools import dynamic_pool, profile_class_name, profile_classes
from migctl.core.hardware.geometry import Placement as Spot
from migctl.core.model.cluster import Taint
from migctl.sim.mig import Sim
from migctl.sim.names import DEFAULT_DRA_FENCE_S, DEFAULT_DRA_RESTART_S
from migctl.sim.state import Cluster, Placement
from migctl.sim.timing import READVERTISE_SIGMA, InPlaceTime

NAMESPACE = "sim"  # as controller.NAMESPACE (the pods' namespace)


def node_name(n: int) -> str:
    """As `controller.node_name` (pool name = node name on NVIDIA's driver)."""
    return f"n{n:05d}"


@dataclass(frozen=True)
class DraTime:
    """The DRA paths' times. `fence_s`: a DeviceTaintRule written until the scheduler honours it (its informer);
    `restart_s`: median of the static-MIG kubelet plugin's restart (lognormal, shape `restart_sigma`), during which
    no new pod of the node can start (kubelet cannot prepare a claim without the plugin). Neither was measured."""

    fence_s: float = DEFAULT_DRA_FENCE_S
    restart_s: float = DEFAULT_DRA_RESTART_S
    restart_sigma: float = READVERTISE_SIGMA

    def __post_init__(self) -> None:
        values = (self.fence_s, self.restart_s, self.restart_sigma)
        if min(values) < 0 or not math.isfinite(sum(values)):
            raise ValueError(f"DRA timing needs non-negative finite values, got {self}")

    def restart(self, rng: np.random.Generator) -> float:
        """One plugin restart (the window of `InPlaceTime` with no NVML operation)."""
        return InPlaceTime(self.restart_s, self.restart_sigma).draw(0, rng)

    def describe(self) -> str:
        return f"fence latency {self.fence_s:g} s, plugin restart lognormal median {self.restart_s:g} s"


class DynamicNodes:
    """Every node of the cluster as a DynamicMIG pool, the pods' claims, and first fit over them.

    MIG mode is on on every GPU (Ampere needs it before DynamicMIG can make partitions), so the whole GPU device is
    not offered; the pods ask for MIG profiles only, which a whole GPU would not serve anyway."""

    def __init__(self, cl: Cluster) -> None:
        model = cl.shapes.model
        self.cl = cl
        self.pools: dict[str, NodePool] = {
            node_name(n): dynamic_pool(node_name(n), model, len(ids), mig_mode_on=True)
            for n, ids in enumerate(cl.by_node)
        }
        self.classes = profile_classes(model)
        self.ids = {p.name: p.profile_id for p in model.profiles if p.profile_id is not None}
        self._claims: dict[int, ClaimSpec | None] = {}

    def claim(self, sim: Sim, ji: int) -> ClaimSpec | None:
        """The claim job `ji`'s pod makes: `num_gpu` devices of its smallest profile's class (None: no profile of
        the model holds it, so no class serves it)."""
        if ji not in self._claims:
            job = sim.jobs[ji]
            p = self.cl.shapes.smallest(job)
            spec = None
            if p is not None:
                request = Request("mig", ExactRequest(profile_class_name(p), count=job.num_gpu))
                spec = ClaimSpec(NAMESPACE, f"j{ji:07d}-mig", (request,))
            self._claims[ji] = spec
        return self._claims[ji]

    def allocated(self, n: int) -> frozenset[DeviceId]:
        """The devices allocated on node `n`: every partition that exists (one exists only while a pod holds it)."""
        pool = node_name(n)
        out = set()
        for gid in self.cl.by_node[n]:
            g = self.cl.gpus[gid]
            assert g.spots is not None, "DynamicMIG nodes track placements"
            for s, job in g.spots.items():
                if job is not None:
                    name = mig_device_name(g.index, s.profile, self.ids[s.profile], s.start)
                    out.add(DeviceId(DRIVER, pool, name))
        return frozenset(out)

    def allocate(
        self,
        sim: Sim,
        fences: Mapping[str, Sequence[str]] | None = None,
        eligible: Callable[[int], bool] | None = None,
    ) -> int:
        """kube-scheduler over the pending queue (priority, then arrival): each pod's claim on the first node whose
        first fit succeeds, the devices `fences` names (node -> device names) tainted NoSchedule; each partition
        made there, the pod started `sim.create_s` later (NVML makes it at NodePrepareResources). Returns how
        many pods started. A (node, state, claim shape) that failed is not tried again in this call."""
        cl, started = self.cl, 0
        fences = fences or {}
        version = [0] * len(cl.by_node)
        failed: set[tuple[int, int, str]] = set()
        taints: dict[str, dict[DeviceId, tuple[Taint, ...]]] = {
            node: {DeviceId(DRIVER, node, d): (FENCE,) for d in names} for node, names in fences.items()
        }
        for ji in list(sim.pending):
            spec = self.claim(sim, ji)
            if spec is None or (eligible is not None and not eligible(ji)):
                continue
            shape = spec.requests[0].exactly
            assert shape is not None
            what = f"{shape.device_class}x{shape.count}"
            for n in range(len(cl.by_node)):
                if (n, version[n], what) in failed:  # no window on a DynamicMIG node: nothing closes it
                    continue
                name = node_name(n)
                got = predict(
                    [self.pools[name]], [spec], self.classes, allocated=self.allocated(n), fences=taints.get(name)
                ).choice(spec.key)
                if got is None:
                    failed.add((n, version[n], what))
                    continue
                units = []
                for _, dev in got.devices:
                    assert dev.minor is not None and dev.placement is not None
                    gid = cl.by_node[n][dev.minor]
                    cl.make(gid, Spot(dev.profile, dev.placement.start, dev.placement.size), ji)
                    units.append((gid, dev.profile))
                start = (sim.jobs[ji].arrival if sim.packing else sim.now) + sim.create_s
                sim._take(ji)
                sim._started(Placement(ji, units), start)
                sim.reconfigs += len(units)  # a partition made is a layout change of its GPU
                version[n] += 1
                started += 1
                break
        return started

    def destroy(self, units: Sequence[tuple[int, str]]) -> None:
        """The driver's unprepare: the partitions of a pod that left are destroyed."""
        for gid in {gid for gid, _ in units}:
            self.cl.drop_free(gid)


__all__ = ["DraTime", "DynamicNodes", "node_name"]
