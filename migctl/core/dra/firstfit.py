"""What kube-scheduler's DRA allocator picks on one node, predicted: first fit, in the allocator's own order.

The allocator (k8s.io/dynamic-resource-allocation/structured, internal/{incubating,experimental}) takes one pod's
unallocated claims at a time and searches depth first: claims in order, each claim's requests in order, a
firstAvailable request's subrequests in priority order, and for each device needed the devices of the node's pools
in walk order (pools sorted by driver then name; a pool's device slices sorted by name; devices as the slice lists
them), starting after the previous device of the same request. A device is skipped when it is allocated (or being
allocated in this search), when a class or request selector rejects it, when it carries a NoSchedule or NoExecute
taint the request does not tolerate (DeviceTaintRules are applied to the devices first), when its counters exceed
what is left in its pool, or when a claim constraint (matchAttribute, distinctAttribute) fails; the first complete
solution wins, and a dead end backtracks. Incomplete pools are skipped; a CEL runtime error fails the pod.

`predict` replays that for a queue of pods (each entry one pod's claims, allocated together), committing each
pod's result before the next, as the scheduler does between pods. Pods whose selectors migctl cannot read, or that
use allocationMode All, get `NoFit(unpredictable=True)`: a prediction migctl cannot make is never passed off as one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal

from migctl.core.dra import cel
from migctl.core.dra.claims import ClaimSpec, DeviceClassSpec, ExactRequest
from migctl.core.dra.devices import AttrValue, Device, DeviceId, NodePool
from migctl.core.model.cluster import Taint, Toleration

BLOCKING = ("NoSchedule", "NoExecute")
DEFAULT_BUDGET = 200_000  # devices tried per pod before migctl gives up predicting (the allocator has no such cap)


@dataclass(frozen=True)
class Choice:
    """A claim the allocator would allocate: its devices, each with the request name as the result names it."""

    claim: str
    devices: tuple[tuple[str, Device], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for _, d in self.devices)


@dataclass(frozen=True)
class NoFit:
    """A claim the allocator would not allocate on this node, and why; `unpredictable` when migctl cannot tell."""

    claim: str
    why: str
    unpredictable: bool = False


Outcome = Choice | NoFit


@dataclass(frozen=True)
class Prediction:
    """One outcome per claim, in queue order, and every device allocated after the queue."""

    outcomes: tuple[Outcome, ...]
    allocated: frozenset[DeviceId] = frozenset()

    def outcome(self, claim: str) -> Outcome | None:
        return next((o for o in self.outcomes if o.claim == claim), None)

    def choice(self, claim: str) -> Choice | None:
        o = self.outcome(claim)
        return o if isinstance(o, Choice) else None


class _UnpredictableError(Exception):
    pass


class _FatalError(Exception):
    pass


@dataclass
class _Req:
    name: str  # as the result names it: request or request/subrequest
    base: str
    sub: str
    selectors: tuple[cel.Selector, ...]
    count: int
    tolerations: tuple[Toleration, ...]
    admin: bool


@dataclass
class _Match:
    requests: frozenset[str]
    attribute: str
    distinct: bool
    values: list[AttrValue] = field(default_factory=list)

    def applies(self, req: _Req) -> bool:
        return not self.requests or req.base in self.requests or req.name in self.requests

    def add(self, req: _Req, dev: Device) -> bool:
        if not self.applies(req):
            return True
        value = dev.attributes.get(self.attribute)
        if value is None:
            return False
        if self.distinct:
            if any(type(v) is type(value) and v == value for v in self.values):
                return False
        elif self.values and not (type(self.values[0]) is type(value) and self.values[0] == value):
            return False
        self.values.append(value)
        return True

    def remove(self, req: _Req) -> None:
        if self.applies(req):
            self.values.pop()


@dataclass
class _Search:
    walk: list[tuple[NodePool, Device]]
    in_use: set[DeviceId]
    available: dict[str, dict[str, dict[str, Decimal]]]  # pool -> set -> counter -> left
    fences: Mapping[DeviceId, Sequence[Taint]]
    budget: int
    consumed: dict[str, dict[str, dict[str, Decimal]]] = field(default_factory=dict)
    taking: set[DeviceId] = field(default_factory=set)
    steps: int = 0

    def blocked(self, dev: Device, req: _Req) -> bool:
        for t in (*dev.taints, *self.fences.get(dev.id, ())):
            if t.effect in BLOCKING and not any(tol.tolerates(t) for tol in req.tolerations):
                return True
        return False

    def selectable(self, dev: Device, req: _Req) -> bool:
        try:
            return all(s.matches(dev) for s in req.selectors)
        except cel.CelRuntimeError as e:
            raise _FatalError(f"{e} (on device {dev.name})") from e

    def take_counters(self, pool: NodePool, dev: Device) -> bool:
        if not dev.consumes:
            return True
        used = self.consumed.setdefault(pool.name, {})
        for c in dev.consumes:
            cs = used.setdefault(c.counter_set, {})
            cs[c.counter] = cs.get(c.counter, Decimal(0)) + c.amount
        left = self.available[pool.name]
        if any(used.get(s, {}).get(n, Decimal(0)) > v for s, counters in left.items() for n, v in counters.items()):
            self.give_counters(pool, dev)
            return False
        return True

    def give_counters(self, pool: NodePool, dev: Device) -> None:
        used = self.consumed[pool.name]
        for c in dev.consumes:
            used[c.counter_set][c.counter] -= c.amount


def _counters_left(pool: NodePool, allocated: set[DeviceId]) -> dict[str, dict[str, Decimal]] | None:
    """The pool's counters less what allocated devices draw; None when a device draws a counter the pool lacks
    (the allocator then treats the pool as invalid)."""
    left = {name: dict(cs.counters) for name, cs in pool.counter_sets.items()}
    for d in pool.devices:
        for c in d.consumes:
            if c.counter not in left.get(c.counter_set, {}):
                return None
            if d.id in allocated:
                left[c.counter_set][c.counter] -= c.amount
    return left


def _requests(spec: ClaimSpec, classes: Mapping[str, DeviceClassSpec]) -> list[list[_Req]]:
    """Per request its alternatives (one for `exactly`, the subrequests in order otherwise)."""
    out = []
    for r in spec.requests:
        alts = [(r.name, "", r.exactly)] if r.exactly else [(r.name, n, e) for n, e in r.first_available]
        out.append([_req(base, sub, ex, classes) for base, sub, ex in alts])
    return out


def _req(base: str, sub: str, ex: ExactRequest, classes: Mapping[str, DeviceClassSpec]) -> _Req:
    name = f"{base}/{sub}" if sub else base
    dc = classes.get(ex.device_class)
    if dc is None:
        raise _FatalError(f"request {name}: DeviceClass {ex.device_class!r} does not exist")
    if ex.mode == "All" or ex.capacity:
        raise _UnpredictableError(f"request {name}: allocationMode All and capacity requests are not predicted")
    try:
        sels = tuple(cel.parse(e) for e in (*dc.selectors, *ex.selectors))
    except cel.UnreadableSelector as e:
        raise _UnpredictableError(f"request {name}: {e}") from e
    return _Req(name, base, sub, sels, ex.count, ex.tolerations, ex.admin_access)


def _constraints(spec: ClaimSpec) -> list[_Match]:
    return [
        _Match(frozenset(c.requests), c.match_attribute or c.distinct_attribute, not c.match_attribute)
        for c in spec.constraints
        if c.match_attribute or c.distinct_attribute
    ]


def _solve(
    s: _Search, claims: list[list[list[_Req]]], matches: list[list[_Match]], out: list[list[tuple[str, Device]]]
) -> bool:
    def claim_step(ci: int) -> bool:
        return True if ci == len(claims) else request_step(ci, 0)

    def request_step(ci: int, ri: int) -> bool:
        if ri == len(claims[ci]):
            return claim_step(ci + 1)
        return any(device_step(ci, ri, req, 0, 0) for req in claims[ci][ri])

    def device_step(ci: int, ri: int, req: _Req, k: int, start: int) -> bool:
        if k == req.count:
            return request_step(ci, ri + 1)
        for i in range(start, len(s.walk)):
            s.steps += 1
            if s.steps > s.budget:
                raise _UnpredictableError(f"the search passed {s.budget} device checks")
            pool, dev = s.walk[i]
            if not req.admin and (dev.id in s.in_use or dev.id in s.taking):
                continue
            if not s.selectable(dev, req) or s.blocked(dev, req):
                continue
            if not s.take_counters(pool, dev):
                continue
            added = []
            for m in matches[ci]:
                if not m.add(req, dev):
                    break
                added.append(m)
            if len(added) == len(matches[ci]):
                if not req.admin:
                    s.taking.add(dev.id)
                out[ci].append((req.name, dev))
                if device_step(ci, ri, req, k + 1, i + 1):
                    return True
                out[ci].pop()
                s.taking.discard(dev.id)
            for m in added:
                m.remove(req)
            s.give_counters(pool, dev)
        return False

    return claim_step(0)


def predict(
    pools: Sequence[NodePool],
    queue: Sequence[ClaimSpec | Sequence[ClaimSpec]],
    classes: Mapping[str, DeviceClassSpec],
    *,
    allocated: Iterable[DeviceId] = (),
    fences: Mapping[DeviceId, Sequence[Taint]] | None = None,
    budget: int = DEFAULT_BUDGET,
) -> Prediction:
    """First fit on one node for `queue` (a claim, or one pod's claims, per entry), after `allocated` devices.
    `fences` adds taints to devices by id (migctl's DeviceTaintRules, or any the cluster has)."""
    in_use = set(allocated)
    usable = [p for p in sorted(pools, key=lambda p: (p.driver, p.name)) if p.complete]
    outcomes: list[Outcome] = []
    for entry in queue:
        pod = [entry] if isinstance(entry, ClaimSpec) else list(entry)
        lefts = {p.name: _counters_left(p, in_use) for p in usable}
        walk = [(p, d) for p in usable if lefts[p.name] is not None for d in p.devices]
        available = {name: left for name, left in lefts.items() if left is not None}
        search = _Search(walk, in_use, available, fences or {}, budget)
        results: list[list[tuple[str, Device]]] = [[] for _ in pod]
        try:
            claims = [_requests(c, classes) for c in pod]
            ok = _solve(search, claims, [_constraints(c) for c in pod], results)
        except _UnpredictableError as e:
            outcomes += [NoFit(c.key, str(e), unpredictable=True) for c in pod]
            continue
        except _FatalError as e:
            outcomes += [NoFit(c.key, str(e)) for c in pod]
            continue
        if not ok:
            why = "no devices on this node satisfy the pod's claims (taken, rejected, tainted or out of counters)"
            outcomes += [NoFit(c.key, why) for c in pod]
            continue
        for c, got in zip(pod, results, strict=True):
            outcomes.append(Choice(c.key, tuple(got)))
            in_use.update(d.id for name, d in got if not _admin(c, name))
    return Prediction(tuple(outcomes), frozenset(in_use))


def _admin(spec: ClaimSpec, request: str) -> bool:
    base, _, sub = request.partition("/")
    for r in spec.requests:
        if r.name != base:
            continue
        if r.exactly is not None:
            return r.exactly.admin_access
        return any(n == sub and e.admin_access for n, e in r.first_available)
    return False
