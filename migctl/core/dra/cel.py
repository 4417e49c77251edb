"""The CEL subset that claims and DeviceClasses really use, read strictly: an evaluator over a device record and
what a selector means for planning.

Accepted: `device.driver`, `device.attributes['<domain>'].<id>` (or `['<id>']`),
`device.capacity['<domain>'].<id>`; string, int and bool literals and lists of them; `==`, `!=`, `in [...]`, `<`,
`<=`, `>`, `>=` on ints; `quantity('<q>')` with `isGreaterThan`, `isLessThan` and `compareTo` (Kubernetes' quantity
library); `&&`, `||`, `!`, parentheses (grammar and evaluation: `cel_grammar.py`). Anything else raises
`UnreadableSelector` with the expression, the position and why: migctl never guesses what a selector it cannot
read admits.

Why a hand-written reader and not cel-python: the selectors need Kubernetes' quantity extension (`quantity()`,
`isGreaterThan`, `compareTo`), which cel-python lacks, and migctl needs more than a verdict per device: it asks what
a selector admits among the devices a catalog model can offer (`meaning`), so the planner can turn a claim into
demand. A full CEL would also accept expressions whose planning meaning migctl cannot derive; a small grammar makes
"unreadable" a precise, reportable answer. Semantics follow k8s.io/dynamic-resource-allocation/cel (compile.go): an
unknown domain is an empty map, an unknown key a runtime error ("no such key"), `&&`/`||` absorb an error when the
other side decides, and `==` between different types is false.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Literal

from migctl.core.dra.cel_grammar import Err, Evaluable, GrammarError, Node, driver_names, read, truth
from migctl.core.dra.devices import MIB, AttrValue
from migctl.core.dra.naming import DRIVER
from migctl.core.hardware.gpu_model import Catalog
from migctl.errors import MigctlError

MAX_EXPRESSION = 10 * 1024  # Kubernetes bounds a selector at 10 Ki characters (CELSelectorExpressionMaxLength)
MODELLED = frozenset({("attribute", DRIVER, "type"), ("attribute", DRIVER, "profile"),
                      ("attribute", DRIVER, "productName"), ("capacity", DRIVER, "memory")})  # fmt: skip


class UnreadableSelector(MigctlError):  # noqa: N818 - the name the brief and callers use
    """A selector outside the subset (or whose planning meaning migctl cannot derive): the expression and why."""

    def __init__(self, expression: str, why: str, position: int | None = None) -> None:
        self.expression, self.why, self.position = expression, why, position
        at = f" at position {position}" if position is not None else ""
        super().__init__(f"CEL selector {expression!r}{at}: {why}")


class CelRuntimeError(MigctlError):
    """A selector failed on a device (the allocator then fails the claim on that node, as Kubernetes does)."""


# -- selectors ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Selector:
    """One readable CEL selector."""

    expression: str
    root: Node

    def matches(self, device: Evaluable) -> bool:
        """Whether the device satisfies the selector; CelRuntimeError where Kubernetes' evaluation errs."""
        v = truth(self.root.eval(device))
        if isinstance(v, Err):
            raise CelRuntimeError(f"CEL selector {self.expression!r}: {v.message}")
        return v

    @property
    def refs(self) -> frozenset[tuple[str, str, str]]:
        """(attribute|capacity, domain, id) of every lookup; ("driver", "", "") for device.driver."""
        out: set[tuple[str, str, str]] = set()
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n.kind in ("attr", "cap"):
                domain, ident = n.key
                out.add(("attribute" if n.kind == "attr" else "capacity", domain, ident))
            elif n.kind == "driver":
                out.add(("driver", "", ""))
            stack.extend(n.args)
        return frozenset(out)

    @property
    def drivers(self) -> frozenset[str] | None:
        """The drivers a top-level `device.driver == '...'` (or `in [...]`) conjunct admits; None if unpinned."""
        pinned: frozenset[str] | None = None
        stack = [self.root]
        while stack:
            n = stack.pop()
            if n.kind == "and":
                stack.extend(n.args)
                continue
            names = driver_names(n)
            if names is not None:
                pinned = names if pinned is None else pinned & names
        return pinned


@lru_cache(maxsize=4096)
def parse(expression: str) -> Selector:
    """Read one selector; UnreadableSelector naming the position and why when it is outside the subset."""
    if not isinstance(expression, str) or not expression.strip():
        raise UnreadableSelector(str(expression), "an empty expression is no selector")
    if len(expression) > MAX_EXPRESSION:
        raise UnreadableSelector(expression[:60] + "...", f"longer than {MAX_EXPRESSION} characters")
    try:
        return Selector(expression, read(expression))
    except GrammarError as e:
        raise UnreadableSelector(expression, e.why, e.position) from e


# -- planning meaning --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Offer:
    """A device some catalog model can offer: a whole GPU (kind `gpu`) or a MIG profile."""

    model: str
    product: str
    kind: Literal["gpu", "mig"]
    profile: str
    memory_mib: int
    driver: str = DRIVER
    attributes: Mapping[str, AttrValue] = field(default_factory=dict, hash=False, compare=False)
    capacity: Mapping[str, Decimal] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Meaning:
    """What a conjunction of selectors admits among the catalog's offers (`offers`), and the offers on which it
    fails with a runtime error (`errors`, which would fail a claim on a node holding such a device)."""

    offers: frozenset[Offer]
    errors: tuple[tuple[Offer, str], ...] = ()

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(o.kind for o in self.offers)

    @property
    def profiles(self) -> frozenset[str]:
        """MIG profile names admitted on at least one model."""
        return frozenset(o.profile for o in self.offers if o.kind == "mig")

    @property
    def models(self) -> frozenset[str]:
        return frozenset(o.model for o in self.offers)

    @property
    def min_memory_mib(self) -> int | None:
        return min((o.memory_mib for o in self.offers), default=None)


_OFFERS: dict[int, tuple[Catalog, tuple[Offer, ...]]] = {}


def offers(catalog: Catalog) -> tuple[Offer, ...]:
    """Every device a catalog model can offer, per product name (memory: the catalog's; whole GPUs: the total).
    Cached per catalog object (a catalog holds dicts, so it is not hashable)."""
    hit = _OFFERS.get(id(catalog))
    if hit is not None and hit[0] is catalog:
        return hit[1]
    out: list[Offer] = []
    for m in catalog.models:
        for product in m.nvml_names or (m.display_name,):
            base: dict[str, AttrValue] = {f"{DRIVER}/productName": product}
            out.append(
                Offer(
                    m.id,
                    product,
                    "gpu",
                    "",
                    m.memory_mib,
                    attributes=base | {f"{DRIVER}/type": "gpu"},
                    capacity={f"{DRIVER}/memory": Decimal(m.memory_mib * MIB)},
                )
            )
            for p in m.profiles:
                attrs = base | {f"{DRIVER}/type": "mig", f"{DRIVER}/profile": p.name}
                out.append(
                    Offer(
                        m.id,
                        product,
                        "mig",
                        p.name,
                        p.memory_mib,
                        attributes=attrs,
                        capacity={f"{DRIVER}/memory": Decimal(p.memory_mib * MIB)},
                    )
                )
    if len(_OFFERS) > 8:
        _OFFERS.clear()
    _OFFERS[id(catalog)] = (catalog, tuple(out))
    return _OFFERS[id(catalog)][1]


_MEANINGS: dict[tuple[int, tuple[str, ...]], tuple[Catalog, Meaning]] = {}


def meaning(selectors: Sequence[Selector], catalog: Catalog) -> Meaning:
    """`_meaning`, cached per catalog object and expressions (a snapshot repeats a few classes and selectors)."""
    key = (id(catalog), tuple(s.expression for s in selectors))
    hit = _MEANINGS.get(key)
    if hit is not None and hit[0] is catalog:
        return hit[1]
    got = _meaning(selectors, catalog)
    if len(_MEANINGS) > 4096:
        _MEANINGS.clear()
    _MEANINGS[key] = (catalog, got)
    return got


def _meaning(selectors: Sequence[Selector], catalog: Catalog) -> Meaning:
    """What `selectors`, all of them (a class's then a request's, as the allocator evaluates them), admit among the
    catalog's offers. A selector that pins another driver admits none; one that reads an attribute or capacity
    migctl does not model for the catalog (anything but type, profile, productName and memory of gpu.nvidia.com)
    raises UnreadableSelector: planning cannot tell which devices it admits."""
    for s in selectors:
        pinned = s.drivers
        if pinned is not None and DRIVER not in pinned:
            return Meaning(frozenset())
    for s in selectors:
        outside = sorted(r for r in s.refs if r[0] != "driver" and r not in MODELLED)
        if outside:
            kind, domain, ident = outside[0]
            raise UnreadableSelector(
                s.expression,
                f"it reads {kind} {domain}/{ident}, which migctl cannot know for devices it would create "
                "(it plans on type, profile, productName and memory)",
            )
    admitted: set[Offer] = set()
    errors: list[tuple[Offer, str]] = []
    for o in offers(catalog):
        try:
            if all(s.matches(o) for s in selectors):
                admitted.add(o)
        except CelRuntimeError as e:
            errors.append((o, str(e)))
    return Meaning(frozenset(admitted), tuple(errors))
