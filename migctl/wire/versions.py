"""The version of every document migctl writes, so that an upgrade can change their shape safely: the node
annotations (`layout`, `target`, `rollback`, the in-place target and status, the agent's inventory `gpus`), the
pod's `vram-choice`, and the agent's own files (its journal and layout record).

One rule, `check_version`, for all of them. Writers write `"version": "v1"`. Readers accept it, and the
unversioned form every earlier migctl wrote as the same v1 (nothing else changed; a document born versioned
reads the same way, so no reader has a dialect of its own). A value of another version was written by a migctl
this one does not know (a newer one mid-upgrade, or an older one after a rollback of the upgrade): its reader
raises `UnknownVersionError`, and the caller says so and leaves the node alone. It never reads such a value as
unreadable, which would roll back a change the other migctl may still be driving.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

VERSION = "v1"


class UnknownVersionError(ValueError):
    """A value written by a migctl of another version: leave its node alone and report it (never roll back)."""


def check_version(data: Mapping[str, Any], what: str) -> None:
    """Raise UnknownVersionError unless `data` is of this version (or unversioned: the legacy v1)."""
    version = data.get("version", VERSION)
    if version != VERSION:
        shown = repr(version) if len(repr(version)) <= 40 else repr(version)[:37] + "..."
        raise UnknownVersionError(
            f"{what}: version {shown} was written by another migctl version (this one reads {VERSION!r}, and "
            "the unversioned form as it)"
        )
