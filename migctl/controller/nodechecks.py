"""Pure checks the actuator makes while it waits: mig-manager's answer, the node's capacity, which pods must go.

No API calls and no clock (elapsed time is passed in), so each rule is unit-tested alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migctl.adapters.kube.interface import Obj
from migctl.adapters.nodes import offers
from migctl.adapters.requests import holds_any
from migctl.adapters.views import as_mapping, node_view, pod_view
from migctl.core.hardware.naming import profile_from_resource, resource_name
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.text.label_values import MAX_INSTANCES_PER_POD
from migctl.core.text.quantity import parse_quantity, to_count
from migctl.reconcile.nodestate import Target
from migctl.wire.names import MIG_CONFIG, MIG_CONFIG_STATE, WHOLE_GPU_RESOURCE, is_nvidia


def _count(value: object) -> int | None:
    """A resource or GFD count through the one strict parser; None when unreadable (then it cannot match)."""
    try:
        return to_count(parse_quantity(value), MAX_INSTANCES_PER_POD)
    except ValueError:
        return None


def mig_manager_verdict(labels: Mapping[str, str], config: str, elapsed: float, timeout: float) -> str:
    """While waiting for mig-manager: `success`, `failed`, `timeout`, `relabel` (the label is not `config`) or `wait`.

    migctl clears the state label in the same write that sets the config label, so a `success` seen
    afterwards is mig-manager's answer to *this* config, not a leftover from the previous one."""
    if labels.get(MIG_CONFIG) != config:
        return "relabel"
    state = labels.get(MIG_CONFIG_STATE, "")
    if state == "success":
        return "success"
    if state == "failed":
        return "failed"
    if elapsed >= timeout:
        return "timeout"
    return "wait"


def expected_resources(gpus: Mapping[int, GpuConfig]) -> Counter[str]:
    out: Counter[str] = Counter()
    for g in gpus.values():
        if not g.mig_enabled:
            out[WHOLE_GPU_RESOURCE] += 1
        for profile, n in g.layout if g.mig_enabled else ():
            out[resource_name(profile)] += n
    return out


def allocatable_mismatch(node: Obj, gpus: Mapping[int, GpuConfig]) -> str:
    """ "" when allocatable matches the layout (stale zero-valued resources ignored): the device plugin's part."""
    want = expected_resources(gpus)
    alloc = as_mapping(as_mapping(node.get("status")).get("allocatable"))
    have: dict[str, int] = {}
    for k, v in alloc.items():
        if profile_from_resource(k) or k == WHOLE_GPU_RESOURCE:
            n = _count(v)
            if n is not None and n > 0:
                have[k] = n
    if dict(want) != have:
        return f"allocatable {dict(sorted(have.items()))} != expected {dict(sorted(want.items()))}"
    return ""


def capacity_mismatch(node: Obj, gpus: Mapping[int, GpuConfig]) -> str:
    """ "" when allocatable and GFD's count labels match the layout (stale zero-valued resources ignored)."""
    want = expected_resources(gpus)
    problems = [p for p in (allocatable_mismatch(node, gpus),) if p]
    labels = node_view(node).labels
    gfd = {
        k[: -len(".count")]: _count(v)
        for k, v in labels.items()
        if profile_from_resource(k[: -len(".count")] if k.endswith(".count") else "")
    }
    gfd = {k: v for k, v in gfd.items() if v is not None and v > 0}
    want_mig = {k: v for k, v in want.items() if k != WHOLE_GPU_RESOURCE}
    if gfd != want_mig:
        problems.append(f"GFD counts {dict(sorted(gfd.items()))} != expected {dict(sorted(want_mig.items()))}")
    return "; ".join(problems)


@dataclass(frozen=True)
class BoundPod:
    """A pod bound to the node being changed, as the drain reads it."""

    key: str
    uid: str
    terminating: bool
    gpu: bool


def classify_pods(pods: Iterable[Obj], vram_resource: str, node: Obj | None = None) -> list[BoundPod]:
    """Pods bound to a node, with whether they hold a GPU resource (`adapters/requests.py`, the one reader of
    requests; finished pods are left out). With `node`, only a resource the node offers can hold one there, as
    the snapshot reads it (`adapters/objects.py`): an absurd value of a resource it does not offer holds none."""

    def device(resource: str) -> bool:
        return (is_nvidia(resource) or resource == vram_resource) and (node is None or offers(node, resource))

    out = []
    for p in pods:
        view = pod_view(p)
        if view.finished:
            continue
        try:  # a GPU resource of 0 (`0`, `0Gi`) holds nothing; one that cannot be read may hold a GPU
            gpu = holds_any(p, device)
        except (TypeError, ValueError):
            gpu = True  # containers that cannot be read: the safe side, as a GPU pod
        out.append(BoundPod(view.key, view.uid, view.deleting, gpu))
    return out


def drain_status(pods: Iterable[BoundPod], target: Target) -> tuple[list[str], list[BoundPod], list[str]]:
    """(unexpected GPU pods, pods still to evict, GPU pods still present that must go before configuring)."""
    allowed = set(target.keep) | set(target.evict)
    gpu = [p for p in pods if p.gpu]
    unexpected = sorted(p.key for p in gpu if not p.terminating and p.key not in allowed)
    to_evict = [p for p in gpu if p.key in target.evict and not p.terminating]
    remaining = sorted(p.key for p in gpu if p.key not in target.keep)
    return unexpected, to_evict, remaining
