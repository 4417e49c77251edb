"""The records of a VRAM-request decision: the rules it follows, what each container gets, the decision itself.

`decide.decide` makes them; `rewrite.apply` turns a rewrite into the Pod object the webhook admits;
`migctl plan` prints them (`to_dict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from migctl.core.hardware.catalog import round_gib
from migctl.core.model.settings import PlannerSettings
from migctl.core.vram.offers import Capacity, ModelOffer
from migctl.wire import names

CHOICE_ANNOTATION = names.VRAM_CHOICE
OPT_OUT_KEY = names.WEBHOOK_OPT_OUT
OPT_OUT_VALUE = "disabled"


@dataclass(frozen=True)
class VramRules:
    """The knobs of the decision (from the planner settings and the `webhook:` section)."""

    resource: str = names.VRAM  # the extended resource pods ask for
    annotation: str = names.VRAM  # where the original request is kept (the planner reads it)
    fallback_scheduler: str = "migctl"  # pods of this scheduler belong to the non-MIG fallback
    whole_gpu: bool = False  # serve a request larger than every MIG instance with a whole GPU
    opt_out_key: str = OPT_OUT_KEY  # namespace label / pod annotation ...
    opt_out_value: str = OPT_OUT_VALUE  # ... with this value: leave the pod alone

    @classmethod
    def from_planner(cls, planner: PlannerSettings, **kw: Any) -> VramRules:
        return cls(resource=planner.vram_resource, annotation=planner.vram_annotation, **kw)


@dataclass(frozen=True)
class ContainerChoice:
    """What one container asked for and what it gets."""

    name: str
    index: int  # position in spec.containers or spec.initContainers
    init: bool
    request: str  # the original quantity, as written
    request_mib: int
    profile: str = ""  # MIG profile, or "gpu" for a whole GPU
    resource: str = ""  # nvidia.com/mig-<p> or nvidia.com/gpu
    instance_mib: int = 0
    sidecar: bool = False  # an init container with restartPolicy: Always (runs alongside the app containers)
    instance: int = -1  # which of the pod's instances it uses (plain init containers share one)
    shared_mib: int = 0  # what that instance must hold (the largest request of the containers sharing it)

    @property
    def waste_mib(self) -> int:
        return max(0, self.instance_mib - self.request_mib)

    @property
    def where(self) -> str:
        return f"{'initContainers' if self.init else 'containers'}[{self.index}] {self.name!r}"


@dataclass(frozen=True)
class VramDecision:
    action: Literal["leave", "rewrite", "reject"]
    reason: str
    choices: tuple[ContainerChoice, ...] = ()
    model: str = ""  # model id the choice was made for
    products: tuple[str, ...] = ()  # the affinity's product values
    capacity: Capacity | None = None
    node: str = ""  # the node with that capacity (a hint)
    alternatives: tuple[str, ...] = ()  # other models that could serve, ranked, for the message
    instances: tuple[tuple[str, int], ...] = ()  # what the pod holds: (profile, count), Kubernetes' effective rule

    @property
    def waste_mib(self) -> int:
        """Instance memory beyond what each instance must hold, summed over the instances the pod holds."""
        return waste_of(self.choices)

    @property
    def message(self) -> str:
        """One paragraph for an Event or a rejection: what was chosen and why."""
        if self.action != "rewrite":
            return self.reason
        parts = [
            f"{c.name}: {c.request} ({c.request_mib} MiB) -> {c.resource} ({c.instance_mib} MiB, {c.waste_mib} MiB "
            "spare)"
            for c in self.choices
        ]
        text = f"{'; '.join(parts)} on {self.model} ({', '.join(self.products)}): {self.reason}"
        if self.alternatives:
            text += f"; also possible: {', '.join(self.alternatives)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "reason": self.reason,
            "model": self.model or None,
            "products": list(self.products),
            "capacity": self.capacity,
            "node": self.node or None,
            "waste_mib": self.waste_mib,
            "instances": dict(self.instances),
            "containers": [
                {
                    "name": c.name,
                    "init": c.init,
                    "request": c.request,
                    "request_mib": c.request_mib,
                    "profile": c.profile or None,
                    "resource": c.resource or None,
                    "instance_mib": c.instance_mib or None,
                }
                for c in self.choices
            ],
        }


def waste_of(choices: Iterable[ContainerChoice]) -> int:
    per_instance = {c.instance: max(0, c.instance_mib - c.shared_mib) for c in choices}
    return sum(per_instance.values())


def too_large(wanted: Sequence[ContainerChoice], offers: Sequence[ModelOffer], rules: VramRules) -> str:
    """Why no model here can serve `wanted`: its largest request against the largest instance (and GPU)."""
    largest = max(
        ((p.memory_mib, p.name, o.model.id) for o in offers for p in o.model.base_profiles), default=(0, "", "")
    )
    biggest_gpu = max(((o.model.memory_mib, o.model.id) for o in offers), default=(0, ""))
    reach = max(largest[0], biggest_gpu[0] if rules.whole_gpu else 0)
    too_big = [c for c in wanted if c.request_mib > reach]
    if too_big:
        c = max(too_big, key=lambda c: c.request_mib)
        text = (
            f"{c.where} asks for {c.request} ({c.request_mib} MiB, {round_gib(c.request_mib)} GiB) of GPU memory "
            f"({rules.resource}); the largest MIG instance on the GPUs in this cluster is {largest[1]} with "
            f"{largest[0]} MiB ({round_gib(largest[0])} GiB, {largest[2]})"
        )
        if c.request_mib <= biggest_gpu[0]:
            text += (
                f"; a whole {biggest_gpu[1]} GPU ({biggest_gpu[0]} MiB) would hold it: request nvidia.com/gpu: 1, "
                "or let migctl do it (webhook.whole_gpu: true)"
            )
        else:
            text += f"; no single GPU here has that much memory (largest: {biggest_gpu[0]} MiB, {biggest_gpu[1]})"
        return text + ". Ask for less, or split the work across app containers (each gets its own instance)."
    # Not reached: serving is monotonic in the request, and an instance must hold only its largest request.
    return f"no GPU model here can serve {', '.join(f'{c.name}: {c.request}' for c in wanted)}"
