"""The state of one planner pass: the GPUs and nodes of the snapshot as the pass changes them.

A `Slot` is a GPU, or a node's pool of free instances when per-GPU usage is unknown; a `NodeState` its node's
CPU, memory and pod slots left. `PlanState` holds them and every index and memo of the pass; the layers above it
(`index.py`, `greedy.py`, `evictions.py`, `explain.py`, `result.py`, `improve.py`, `passes.py`) each add one
concern on top, so each works on this one state.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import count
from operator import attrgetter

from migctl.core.forecast.estimate import Forecast, forecast
from migctl.core.forecast.spare import Completions
from migctl.core.hardware.catalog import GpuModel
from migctl.core.hardware.geometry import CanonicalLayout, geometry
from migctl.core.inplace.reach import Around, around
from migctl.core.model.cluster import GpuDemand, Node, Pod, Resources, Snapshot
from migctl.core.model.demand import WHOLE_GPU
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.placement import NodeIndex
from migctl.core.model.plan import Assignment, Eviction
from migctl.core.model.settings import PlannerSettings
from migctl.core.objective import Cost, Option
from migctl.core.planner.strategy import STRANDED_FIRST, Strategy
from migctl.core.planner.strategy import strategy as strategy_of
from migctl.core.search.bins import Bin, Box
from migctl.core.search.fits import Shapes

Layout = CanonicalLayout
# A heap entry of one free existing instance: (-usefulness of what its GPU keeps free, GPU order, sequence number,
#  the GPU's version when made, the GPU)
Entry = tuple[int, float, int, int, "Slot"]


@dataclass(eq=False)
class NodeState:
    node: Node
    free: Resources
    mode_ok: bool  # MIG mode may change here (setting on, no GPU pods, not frozen)
    start: Resources  # `free` before this plan
    touched: bool = False
    slots: list[Slot] = field(default_factory=list)
    sigs: list[int] = field(default_factory=list)
    gpu_total: int = 0  # MiB of GPU memory pods could get here at the start (idle GPUs, free instances)
    gpu_left: int = 0  # of that, MiB not yet assigned


@dataclass(eq=False)
class Slot:
    """A GPU, or a node-level pool of free instances when per-GPU usage is unknown (index None)."""

    node: NodeState
    index: int | None
    model: GpuModel | None
    kind: str  # model id, or "card:<memory>" for non-MIG cards
    current: GpuConfig | None
    free: Counter[str]  # instances that exist and are free now (WHOLE_GPU for a free MIG-disabled GPU)
    reconfigurable: bool
    mig: bool  # MIG mode the GPU has now (and keeps unless changed)
    order: float
    assigned: Counter[str] = field(default_factory=Counter)
    changed: bool = False
    key: int | None = None  # id of its state (`state_key`) in the views; None when not listed
    version: int = 0
    requests: list[tuple[GpuDemand, int | None, int]] = field(default_factory=list)  # + assignment index
    locked: bool = False  # serves part of a multi-instance pod: the local search leaves it alone
    # heap entries of its free instances at a version, made once and pushed into each of its signatures' heaps
    entries: tuple[int, list[tuple[str, Entry]]] | None = None
    # a busy GPU the in-place path may re-cut around its instances in use (`migctl/core/inplace/reach.py`); None for
    # every other GPU, which is reshaped whole (idle) or not at all
    around: Around | None = None


def state_key(slot: Slot) -> tuple[object, ...]:
    """What a reshaping option's cost depends on: GPUs with equal keys are interchangeable for it."""
    return (
        slot.kind,
        tuple(sorted(slot.assigned.items())),
        slot.changed,
        slot.mig,
        slot.node.touched,
        slot.node.mode_ok,
        slot.around,
    )


BY_ORDER = attrgetter("order")  # views keep their GPUs in this order
# a multi-instance pod's trial on a node: (the node's state then, its cost, the need it was costed at)
Tried = tuple[object, Cost | None, int | None]
# A candidate: (cost, GPU order, slot, profile, instance MiB, option)
Candidate = tuple[Cost, float, "Slot", str, int, Option]
# What a pod reads of one free-instance heap: (heap, GPU kind, profile, instance MiB, waste, scarce-kind term)
ExistingRow = tuple[list["Entry"], str, str, int, int, int]


class PlanState:
    """One planning pass's state over one snapshot (`Planner` in `passes.py` is this with its layers).

    Two indexes keep each pod's search independent of the cluster size. Existing free instances sit in heaps per
    (pod signature, GPU kind, profile), ordered by the usefulness of what the GPU keeps free, then GPU order.
    Reshaping options are costed per GPU state key (`state_key`): the views map each key to its GPUs in name
    order. Entries go stale by version number instead of being deleted.
    """

    def __init__(
        self,
        snapshot: Snapshot,
        settings: PlannerSettings | None = None,
        strategy: Strategy | str = STRANDED_FIRST,
        boost: frozenset[str] = frozenset(),
        shapes: dict[str, Shapes] | None = None,
        completions: dict[str, Completions] | None = None,
        demand: Forecast | None = None,
    ) -> None:
        self.boost = boost  # pods taken first within their priority (pods an earlier pass left out)
        self.strategy = strategy_of(strategy)
        self.snapshot = snapshot
        self.settings = settings or PlannerSettings()
        # what the spare instances of reshaped GPUs are chosen for; shared by the passes of one `plan()`
        self.demand = forecast(snapshot, self.settings) if demand is None else demand
        self.models: dict[str, GpuModel] = {}
        # per model id; shared by the passes of one `plan()`, like `shapes`: best completions are memoised
        self.completions: dict[str, Completions] = {} if completions is None else completions
        self.nodes: list[NodeState] = []
        self.slots: list[Slot] = []
        self.order_span = 0  # more than any GPU order
        self.sig_ids: dict[tuple[object, ...], int] = {}
        self.pod_sids: dict[str, int] = {}  # pod key -> `sig_ids` id (hashing a signature is not cheap)
        self.sig_nodes: list[list[NodeState]] = []
        self.sig_kinds: list[list[str]] = []  # GPU kinds on the signature's nodes, sorted
        self.views: list[dict[int, list[Slot]]] = []
        self.key_ids: dict[tuple[object, ...], int] = {}
        self.class_ids: dict[tuple[GpuDemand, int | None], int] = {}
        self.heaps: dict[tuple[int, str, str], list[Entry]] = {}
        self.unindexed: list[dict[Slot, None]] = []  # per signature: slots changed since its heaps were read
        self._seq = count()  # unique tie-breaker: heap entries never compare slots
        self.option_memo: dict[tuple[int, str], Option | None] = {}
        self.grow_memo: dict[int, bool] = {}
        self.as_is_memo: dict[tuple[int, bool], Option] = {}
        self.unit_memo: dict[int, dict[int, Candidate | None]] = {}  # demand class -> state id -> option
        self.existing_rows: dict[tuple[int, int], list[ExistingRow]] = {}  # (signature, demand class) -> rows
        # (GPU requests, annotated need) -> node -> (`_trial_key` when tried, the trial's cost or None)
        self.trial_memo: dict[tuple[object, ...], dict[NodeState, Tried]] = {}
        self.least_memo: dict[tuple[GpuDemand, ...], int] = {}  # `Greedy._least_mib`
        self.unit_rank: dict[int, list[tuple[Cost, int]]] = {}  # demand class -> (cost, state id), cheapest first
        self.choice_cost_memo: dict[tuple[int, str], list[tuple[str, int, int, int]]] = {}
        self.choice_memo: dict[tuple[str, GpuDemand], list[tuple[str, int]]] = {}
        self.kinds_memo: dict[tuple[int, tuple[GpuDemand, ...]], list[str]] = {}
        self.misfit_memo: dict[tuple[int, tuple[GpuDemand, ...]], tuple[Counter[str], list[NodeState]]] = {}
        self.static_memo: dict[int, tuple[Counter[str], dict[frozenset[str], list[NodeState]]]] = {}
        self.shapes = {} if shapes is None else shapes  # shared by the passes of one `plan()`: fits are memoised
        self.pod_kinds: dict[str, int] = {}
        self.rigid_kind: dict[str, str] = {}
        self.rigid_left: Counter[str] = Counter()  # MiB still needed by pods that fit only this kind
        # `demand-first`: MiB every pod still to place needs, spread evenly over the kinds that can serve it
        self.demand_left: Counter[str] = Counter()
        self.demand_share: dict[str, list[tuple[str, int]]] = {}
        self.cap_left: Counter[str] = Counter()  # MiB this kind can still offer (idle GPUs, free instances)
        self.assignments: list[Assignment] = []
        self.evictions: list[Eviction] = []
        self._run: tuple[list[Pod], list[Pod]] | None = None  # (pods in order, pods left out) of the last run
        self._tidied = False  # whether its tidy round finished within its probes (else polish would not either)
        self.repacked = 0  # pods its local search placed by re-packing nodes
        self._model: tuple[dict[int, Box], list[tuple[Slot, Bin]], set[str]] = ({}, [], set())
        self._build()

    def _build(self) -> None:
        order = 0
        for node in sorted(self.snapshot.nodes, key=lambda n: n.name):
            if node.model is None and node.card is None:
                continue
            frozen = not node.may_reconfigure(self.settings) or not self.strategy.changes
            mode_ok = self.settings.allow_mig_mode_change and not frozen and not node.gpu_pods
            room = node.free
            ns = NodeState(node, room, mode_ok, room)
            if node.model is not None:
                self.models[node.model.id] = node.model
                if node.model.id not in self.completions:
                    self.completions[node.model.id] = Completions(geometry(node.model), self.demand.of(node.model.id))
            kind = node.model.id if node.model else f"card:{node.card.memory_mib if node.card else 0}"
            if node.usage_known and node.gpus:
                for gpu in node.gpus:
                    cfg = gpu.config
                    where = None
                    if cfg.mig_enabled:
                        used = Counter(dict(gpu.used or {}))
                        free = Counter(dict(cfg.layout)) - used
                        idle = used.total() == 0
                        if not idle:  # busy: the in-place path may still re-cut its free part
                            where = around(node, gpu)
                    else:
                        idle = not gpu.whole_used
                        free = Counter({WHOLE_GPU: 1}) if idle else Counter()
                    reconf = (idle or where is not None) and not frozen and node.model is not None
                    if not cfg.mig_enabled and not mode_ok:
                        reconf = False
                    slot = Slot(ns, gpu.index, node.model, kind, cfg, free, reconf, cfg.mig_enabled, order)
                    slot.around = where if reconf else None
                    ns.slots.append(slot)
                    order += 1
            else:
                free = Counter({k: v for k, v in node.mig_free.items() if v > 0})
                if node.whole_free > 0:
                    free[WHOLE_GPU] = node.whole_free
                ns.slots.append(Slot(ns, None, node.model, kind, None, free, False, True, order))
                order += 1
            self.nodes.append(ns)
            self.slots.extend(ns.slots)
        self.order_span = order + 1
        self.node_index = NodeIndex([ns.node for ns in self.nodes])  # which nodes a signature may use, and why not
