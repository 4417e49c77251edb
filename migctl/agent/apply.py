"""Apply a per-GPU target in place: the engine of `migctl agent apply` and of the agent's in-place loop.

Per GPU it is all or nothing. The instances in use (the kubelet lists the MIG UUID for a pod, NVML lists a process
on it, or either cannot say) are never destroyed or moved; the steps come from `core/inplace/steps.py`. Before each
mutation the journal records it; after each destroy the GPU and the kubelet's allocations are read again. A
destroy refused with IN_USE is retried with a bounded exponential backoff (tenacity); if it never clears, or a
create fails, the GPU is rolled back to the instances it had and the journal entry is closed. MIG mode is never
changed. New instances get their /dev/nvidia-caps device nodes through the injected `caps` command; `caps_ready`
says beforehand whether it can run, so a target that creates instances stops before its first change, not after
its last (a host without the DaemonSet's /host used to get its instances and then the error).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from migctl.adapters.nvml import NvmlError
from migctl.adapters.nvml_mig import InstanceInUseError, MigGpu, MigNvml
from migctl.adapters.podresources import Holder, PodResourcesError
from migctl.agent.journal import Entry, Journal, LayoutRecord, Spot
from migctl.core.hardware.catalog import Catalog
from migctl.core.hardware.geometry import ModelGeometry, geometry
from migctl.core.inplace.steps import Found, Op, plan_gpu, restore_ops, target_problem
from migctl.errors import InputError, MigctlError, Problem

log = logging.getLogger(__name__)
State = Literal["unchanged", "planned", "applied", "blocked", "failed"]
OK, FAILED, BAD_INPUT, BLOCKED = 0, 1, 2, 3


class Kubelet(Protocol):
    def holders(self) -> Mapping[str, Holder]: ...


class StepError(MigctlError):
    """A step of one GPU's change failed; the GPU is rolled back."""

    def __init__(self, message: str, state: State) -> None:
        super().__init__(message)
        self.state = state


@dataclass(frozen=True)
class Retry:
    """How long a destroy refused with IN_USE is retried (NVML gives no guidance: DCGM can hold an instance)."""

    attempts: int = 5
    wait_s: float = 0.5
    max_wait_s: float = 4.0


@dataclass(frozen=True)
class GpuResult:
    index: int
    state: State
    ops: tuple[Op, ...] = ()
    message: str = ""
    instances: tuple[Found, ...] = ()


@dataclass
class Result:
    gpus: list[GpuResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    caps_error: str = ""

    @property
    def exit_code(self) -> int:
        states = {g.state for g in self.gpus}
        if "failed" in states or self.caps_error:
            return FAILED
        return BLOCKED if "blocked" in states else OK

    @property
    def changed(self) -> bool:
        return any(g.state == "applied" or (g.state == "failed" and g.ops) for g in self.gpus)


class Applier:
    def __init__(
        self,
        nvml: MigNvml,
        kubelet: Kubelet,
        journal: Journal,
        catalog: Catalog,
        caps: Callable[[], None],
        retry: Retry | None = None,
        layouts: LayoutRecord | None = None,
        caps_ready: Callable[[], str] | None = None,
    ) -> None:
        self.nvml, self.kubelet, self.journal, self.catalog, self.caps = nvml, kubelet, journal, catalog, caps
        self.retry = retry or Retry()
        self.layouts = layouts
        self.caps_ready = caps_ready  # "" when the caps command can run, else why not

    # -- reading --------------------------------------------------------------------------------------------

    def _geometry(self, gpu: MigGpu) -> ModelGeometry | None:
        model = self.catalog.match_product(gpu.name, gpu.memory_mib)
        if model is None:
            return None
        live = {p.name: p.memory_mib for p in gpu.profiles.values()}
        return geometry(model.with_live_memory(live, gpu.memory_mib))

    def _read(self, index: int, holders: Mapping[str, Holder]) -> MigGpu:
        """The GPU with the kubelet's allocations added to what NVML says holds each instance."""
        gpu = self.nvml.gpu(index)
        marked = []
        for f in gpu.instances:
            pod = holders.get(f.uuid) if f.uuid else None
            pod = pod or holders.get(f"MIG-{gpu.uuid}/{f.gi}/{f.ci}")  # the pre-R470 MIG device id
            holder = "; ".join(h for h in (str(pod) if pod else "", f.holder) if h)
            marked.append(replace(f, holder=holder))
        return replace(gpu, instances=tuple(marked))

    # -- the command ----------------------------------------------------------------------------------------

    def apply(self, target: Mapping[int, Mapping[str, int]], dry_run: bool = False) -> Result:
        """Validate everything first (InputError: nothing changed), check that the device-node step can run when
        the target creates instances (MigctlError: nothing changed), read the kubelet (PodResourcesError: nothing
        changed), then change GPU after GPU."""
        result = Result()
        if self.caps_ready is not None and any(n for counts in target.values() for n in counts.values()):
            unready = self.caps_ready()
            if unready:
                raise MigctlError(
                    f"the device-node step after creating instances cannot run: {unready}; nothing was changed "
                    "(set agent.caps_command: docs/in-place.md)"
                )
        with self.nvml.session():
            if self.journal.entries():
                if dry_run:
                    raise MigctlError(f"{self.journal.path} holds an interrupted change; run without --dry-run first")
                result.notes.extend(self._recover())
            count = self.nvml.count()
            problems: list[Problem] = []
            gpus: dict[int, tuple[MigGpu, ModelGeometry]] = {}
            for index, counts in sorted(target.items()):
                where = f"gpus.{index}"
                if not 0 <= index < count:
                    problems.append(
                        Problem(where, f"GPU index {index} does not exist (this node has GPUs 0..{count - 1})")
                    )
                    continue
                gpu = self.nvml.gpu(index)
                geo = self._geometry(gpu)
                if geo is None:
                    problems.append(Problem(where, f"GPU {index} ({gpu.name}) is not a MIG model the catalog knows"))
                    continue
                problem = target_problem(geo, counts)
                if problem:
                    problems.append(Problem(where, problem))
                gpus[index] = (gpu, geo)
            if problems:
                raise InputError("--layout", problems)
            holders = self.kubelet.holders()  # fail closed: PodResourcesError before any change
            created = False
            for index, (_, geo) in sorted(gpus.items()):
                try:
                    res = self._one(self._read(index, holders), geo, target[index], dry_run, holders)
                except (NvmlError, PodResourcesError) as e:  # a read outside a change: this GPU is as it was
                    res = GpuResult(index, "failed", message=f"GPU {index}: {e}")
                created |= any(o.kind == "create" for o in res.ops) and res.state in ("applied", "failed")
                result.gpus.append(res)
            if created:
                result.caps_error = self._caps()
        return result

    def _one(
        self, gpu: MigGpu, geo: ModelGeometry, counts: Mapping[str, int], dry_run: bool, holders: Mapping[str, Holder]
    ) -> GpuResult:
        wanted = {p: n for p, n in counts.items() if n}
        if not gpu.mig_enabled:
            if not wanted:
                return GpuResult(gpu.index, "unchanged")
            reason = (
                f"GPU {gpu.index}: MIG mode is off; migctl never changes MIG mode (nvidia-smi -i {gpu.index} -mig 1)"
            )
            return GpuResult(gpu.index, "blocked", message=reason)
        plan = plan_gpu(geo, gpu.index, gpu.instances, wanted)
        if plan.blocked:
            return GpuResult(gpu.index, "blocked", message=plan.blocked, instances=gpu.instances)
        if not plan.ops:
            if not dry_run:
                self._record(gpu.uuid, gpu.instances)  # at target: what a rebuild after a reboot must recreate
            return GpuResult(gpu.index, "unchanged", instances=gpu.instances)
        if dry_run:
            return GpuResult(gpu.index, "planned", plan.ops, instances=gpu.instances)
        self.journal.begin(gpu.uuid, gpu.index, gpu.instances)
        try:
            self._run(gpu, plan.ops)
        except (StepError, NvmlError, PodResourcesError) as e:
            state: State = e.state if isinstance(e, StepError) else "failed"
            log.warning("GPU %d: %s; rolling back", gpu.index, e)
            entry = next(x for x in self.journal.entries() if x.gpu_uuid == gpu.uuid)
            undo = self._undo(entry)
            message = f"{e}; " + ("rolled back" if not undo else f"rollback incomplete: {undo}")
            now = self._read(gpu.index, holders).instances
            return GpuResult(gpu.index, state if not undo else "failed", plan.ops, message, now)
        self.journal.done(gpu.uuid)
        after = self._read(gpu.index, holders).instances  # the new instances are nobody's yet
        self._record(gpu.uuid, after)
        return GpuResult(gpu.index, "applied", plan.ops, instances=after)

    def _record(self, gpu_uuid: str, instances: Sequence[Found]) -> None:
        if self.layouts is not None:
            self.layouts.write(gpu_uuid, instances)

    # -- steps ----------------------------------------------------------------------------------------------

    def _run(self, gpu: MigGpu, ops: Sequence[Op], holders: bool = True) -> None:
        for op in ops:
            if op.kind == "destroy":
                assert op.found is not None
                self._destroy(gpu, op.found, holders)
            else:
                pid = gpu.profile_id(op.profile)
                if pid is None:
                    raise StepError(f"GPU {gpu.index} lists no profile {op.profile}", "failed")
                spot = Spot(op.profile, pid, op.start, op.size)
                self.journal.step(gpu.uuid, "create", spot)
                gi, ci, uuid = self.nvml.create(gpu.index, pid, op.start, op.size)
                self.journal.step(gpu.uuid, "created", replace(spot, gi=gi, ci=ci, uuid=uuid))

    def _destroy(self, gpu: MigGpu, found: Found, holders: bool) -> None:
        """Destroy one free instance: checked free again just before, retried on IN_USE, checked gone after."""
        now = self._read(gpu.index, self.kubelet.holders() if holders else {})
        same = [f for f in now.instances if Spot.of(f).key == Spot.of(found).key and f.uuid == found.uuid]
        if not same:
            return  # gone already
        if same[0].in_use:
            raise StepError(f"GPU {gpu.index}: {same[0]} became in use ({same[0].holder})", "blocked")
        self.journal.step(gpu.uuid, "destroy", Spot.of(found))
        r = self.retry
        try:
            for attempt in Retrying(
                stop=stop_after_attempt(r.attempts),
                wait=wait_exponential(multiplier=r.wait_s, max=r.max_wait_s),
                retry=retry_if_exception_type(InstanceInUseError),
                reraise=True,
            ):
                with attempt:
                    self.nvml.destroy(gpu.index, found)
        except InstanceInUseError as e:
            raise StepError(
                f"GPU {gpu.index}: {found} stayed in use after {r.attempts} attempts (NVML IN_USE: a process or "
                "another NVML client such as DCGM holds it)",
                "blocked",
            ) from e
        left = [f for f in self.nvml.gpu(gpu.index).instances if Spot.of(f).key == Spot.of(found).key]
        if any(f.uuid == found.uuid for f in left):
            raise StepError(f"GPU {gpu.index}: {found} is still there after its destroy succeeded", "failed")

    def _undo(self, entry: Entry) -> str:
        """Back to the instances the GPU had before `entry`'s change; '' when done (the entry is closed)."""
        try:
            gpu = self.nvml.gpu(entry.index)
            if gpu.uuid != entry.gpu_uuid:
                return f"GPU {entry.index} is now {gpu.uuid}, not {entry.gpu_uuid}"
            created = entry.created
            # removable: what this change began creating, and a GPU instance a killed destroy left without its
            # compute instance (never usable, holds no process; it would block the recreate on its span)
            ops = restore_ops(
                gpu.instances, [s.placement for s in entry.before], lambda f: f.ci is None or Spot.of(f).key in created
            )
            self._run(gpu, ops, holders=False)  # only instances this change created are destroyed: no pod has them
        except (StepError, NvmlError) as e:
            return str(e)
        self.journal.done(entry.gpu_uuid)
        return ""

    def _recover(self) -> list[str]:
        """Undo every change an earlier run left half done."""
        notes = []
        for entry in self.journal.entries():
            problem = self._undo(entry)
            if problem:
                raise MigctlError(f"cannot undo the interrupted change of GPU {entry.index}: {problem}")
            notes.append(f"GPU {entry.index}: undid an interrupted change ({len(entry.steps)} steps journaled)")
        return notes

    def recover(self) -> list[str]:
        with self.nvml.session():
            return self._recover()

    def rebuild(self) -> list[str]:
        """After a reboot: recreate the last applied instances on every recorded GPU that came back empty."""
        if self.layouts is None:
            return []
        record = self.layouts.read()
        notes = []
        created = False
        with self.nvml.session():
            for index in range(self.nvml.count()):
                gpu = self.nvml.gpu(index)
                spots = record.get(gpu.uuid)
                if not spots or not gpu.mig_enabled or gpu.instances:
                    continue
                ops = restore_ops((), [s.placement for s in spots], lambda f: False)
                self.journal.begin(gpu.uuid, index, ())
                try:
                    self._run(gpu, ops, holders=False)
                except (StepError, NvmlError) as e:
                    entry = next(x for x in self.journal.entries() if x.gpu_uuid == gpu.uuid)
                    notes.append(f"GPU {index}: rebuild failed ({e}); {self._undo(entry) or 'rolled back'}")
                    continue
                self.journal.done(gpu.uuid)
                created = True
                notes.append(f"GPU {index}: rebuilt {len(ops)} instances of the last applied layout")
            if created:
                error = self._caps()
                if error:
                    notes.append(error)
        return notes

    def _caps(self) -> str:
        """Create the new instances' /dev/nvidia-caps nodes on the host; '' on success, else what failed."""
        try:
            self.caps()
        except (OSError, MigctlError) as e:
            return f"instances created, but their /dev/nvidia-caps device nodes were not: {e}"
        return ""
