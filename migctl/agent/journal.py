"""The in-place change's journal and the record of the last applied layout, under the agent's state directory.

The journal is written BEFORE each NVML mutation, so an agent killed between a destroy and a create can undo the
change when it starts again: per GPU (by parent GPU UUID, never by index alone) it holds the instances the GPU had
before the change and every step begun (profile id, placement, GPU- and compute-instance ids, MIG UUID).
It is empty (the file removed) after every completed apply or rollback. Every write is atomic (a temporary file,
fsync, rename, fsync of the directory), so a crash leaves the old or the new journal, never half of one.

The layout record keeps, per GPU UUID, the instances of the last change applied, so the agent can rebuild them
after a reboot or a driver reload (MIG instances do not survive either, and with mig-manager off nobody else
recreates them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migctl.core.hardware.geometry import Placement
from migctl.core.inplace.steps import Found
from migctl.errors import MigctlError
from migctl.wire.versions import VERSION, UnknownVersionError, check_version

JOURNAL = "in-place-journal.json"
LAYOUT = "in-place-layout.json"


class JournalError(MigctlError):
    """The journal or the layout record cannot be read or written: nothing is changed without it."""


@dataclass(frozen=True)
class Spot:
    """An instance's identity on its GPU: profile id and placement (with ids and UUID when known)."""

    profile: str
    profile_id: int
    start: int
    size: int
    gi: int | None = None
    ci: int | None = None
    uuid: str = ""

    @classmethod
    def of(cls, f: Found) -> Spot:
        return cls(f.profile, f.profile_id, f.start, f.size, f.gi, f.ci, f.uuid)

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.profile_id, self.start, self.size)

    @property
    def placement(self) -> Placement:
        return Placement(self.profile, self.start, self.size)


@dataclass(frozen=True)
class Entry:
    """One GPU's change in progress."""

    gpu_uuid: str
    index: int
    before: tuple[Spot, ...]
    steps: tuple[tuple[str, Spot], ...]  # ("destroy" | "create" | "created", the instance)

    @property
    def created(self) -> frozenset[tuple[int, int, int]]:
        """Where this change began a create: the only instances an undo may destroy."""
        return frozenset(s.key for kind, s in self.steps if kind in ("create", "created"))


def _write(path: Path, data: Any) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with tmp.open("w", encoding="utf-8") as f:
            json.dump(data, f, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as e:
        raise JournalError(f"cannot write {path}: {e.strerror or e}") from e


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JournalError(f"cannot read {path}: {e.strerror or e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise JournalError(f"{path} is not valid JSON ({e.msg}); move it aside only after checking the GPUs") from e
    if not isinstance(data, dict):
        raise JournalError(f"{path}: expected a JSON object, got {type(data).__name__}")
    try:
        check_version(data, str(path))  # the one rule of versions (unversioned reads as v1)
    except UnknownVersionError as e:
        raise JournalError(f"{e}; nothing is changed until it is resolved") from e
    return data


def _spot(raw: Any, where: str) -> Spot:
    try:
        return Spot(
            str(raw["profile"]),
            int(raw["profile_id"]),
            int(raw["start"]),
            int(raw["size"]),
            None if raw.get("gi") is None else int(raw["gi"]),
            None if raw.get("ci") is None else int(raw["ci"]),
            str(raw.get("uuid", "")),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise JournalError(f"{where}: a damaged instance record ({e})") from e


def _dump(s: Spot) -> dict[str, Any]:
    return {
        "profile": s.profile,
        "profile_id": s.profile_id,
        "start": s.start,
        "size": s.size,
        "gi": s.gi,
        "ci": s.ci,
        "uuid": s.uuid,
    }


class Journal:
    """The write-ahead journal of in-place changes, one entry per GPU being changed."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / JOURNAL

    def entries(self) -> list[Entry]:
        data = _read(self.path)
        if data is None:
            return []
        out = []
        for uuid, raw in sorted((data.get("gpus") or {}).items()):
            where = f"{self.path} gpus[{uuid}]"
            try:
                before = tuple(_spot(s, where) for s in raw["before"])
                steps = tuple((str(k), _spot(s, where)) for k, s in raw["steps"])
                out.append(Entry(uuid, int(raw["index"]), before, steps))
            except (KeyError, TypeError, ValueError) as e:
                raise JournalError(f"{where}: damaged ({e})") from e
        return out

    def _save(self, entries: Iterable[Entry]) -> None:
        gpus = {
            e.gpu_uuid: {
                "index": e.index,
                "before": [_dump(s) for s in e.before],
                "steps": [[k, _dump(s)] for k, s in e.steps],
            }
            for e in entries
        }
        if not gpus:
            try:
                self.path.unlink(missing_ok=True)
            except OSError as e:
                raise JournalError(f"cannot remove {self.path}: {e.strerror or e}") from e
            return
        _write(self.path, {"version": VERSION, "gpus": gpus})

    def begin(self, gpu_uuid: str, index: int, before: Sequence[Found]) -> None:
        others = [e for e in self.entries() if e.gpu_uuid != gpu_uuid]
        self._save([*others, Entry(gpu_uuid, index, tuple(Spot.of(f) for f in before), ())])

    def step(self, gpu_uuid: str, kind: str, spot: Spot) -> None:
        """Record a step; call it before the mutation it announces ('created' records a create's result)."""
        entries = self.entries()
        out = [
            e if e.gpu_uuid != gpu_uuid else Entry(e.gpu_uuid, e.index, e.before, (*e.steps, (kind, spot)))
            for e in entries
        ]
        if not any(e.gpu_uuid == gpu_uuid for e in entries):
            raise JournalError(f"{self.path}: no change begun on GPU {gpu_uuid}")
        self._save(out)

    def done(self, gpu_uuid: str) -> None:
        self._save([e for e in self.entries() if e.gpu_uuid != gpu_uuid])


class LayoutRecord:
    """Per GPU UUID, the instances the last applied change left: what a rebuild after a reboot recreates."""

    def __init__(self, state_dir: Path) -> None:
        self.path = Path(state_dir) / LAYOUT

    def read(self) -> dict[str, tuple[Spot, ...]]:
        data = _read(self.path)
        if data is None:
            return {}
        return {
            uuid: tuple(_spot(s, f"{self.path} gpus[{uuid}]") for s in spots)
            for uuid, spots in (data.get("gpus") or {}).items()
        }

    def write(self, gpu_uuid: str, instances: Sequence[Found]) -> None:
        gpus = {u: [_dump(s) for s in spots] for u, spots in self.read().items()}
        gpus[gpu_uuid] = [_dump(Spot.of(f)) for f in instances if f.ci is not None]
        _write(self.path, {"version": VERSION, "gpus": gpus})
