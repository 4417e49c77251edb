"""SIMULATED node agent and device plugin for the controller's in-place tests, at their real interface only: the
node's annotations (`migctl.io/in-place-target` in, `migctl.io/in-place-status` out) and its allocatable.

Why simulated: the real agent needs NVML and a kubelet. It runs as the actuator's step hook: when the controller
has written the target (`in-place-target-written`), the "agent" answers with `answer` (applied, blocked, failed,
or None: silent) for the target's plan, and on applied the "device plugin" advertises the new instances in
allocatable unless `advertise` is False (a plugin that never comes back). It never reads the controller's other
annotations: only what the real agent would.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from migctl.core.hardware.naming import resource_name
from migctl.wire import inplace as wire
from migctl.wire.names import IN_PLACE_STATUS, IN_PLACE_TARGET
from tests.unit.fake_cluster import FakeCluster


@dataclass
class SimAgent:
    cluster: FakeCluster
    answer: str | None = "applied"
    advertise: bool = True
    message: str = ""
    seen: list[wire.Target] = field(default_factory=list)

    def __call__(self, node: str, step: str) -> None:
        if step == "in-place-target-written":
            self.act(node)

    def act(self, node: str) -> None:
        raw = self.cluster.read_node(node)["metadata"]["annotations"][IN_PLACE_TARGET]
        target = wire.decode_target(raw)
        self.seen.append(target)
        if self.answer is None:
            return
        held = {
            i: tuple(wire.Held(p, 0, 1, False) for p, n in sorted(counts.items()) for _ in range(n))
            for i, counts in target.gpus.items()
        }
        status = wire.Status(target.plan, self.answer, self.message, held if self.answer == "applied" else {})  # type: ignore[arg-type]
        self.cluster.patch_node(node, {"metadata": {"annotations": {IN_PLACE_STATUS: wire.encode_status(status)}}})
        if self.answer == "applied" and self.advertise:
            self.advertise_now(node, target)

    def advertise_now(self, node: str, target: wire.Target) -> None:
        counts: Counter[str] = Counter()
        for per_gpu in target.gpus.values():
            for p, n in per_gpu.items():
                counts[resource_name(p)] += n
        alloc = dict(self.cluster.read_node(node)["status"]["allocatable"])
        alloc.update({k: "0" for k in alloc if k.startswith("nvidia.com/mig-")})
        alloc.update({k: str(v) for k, v in counts.items()})
        self.cluster.patch_node(node, {"status": {"allocatable": alloc, "capacity": alloc}})
