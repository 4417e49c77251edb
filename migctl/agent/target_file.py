"""The `--layout` file of `migctl agent apply`: per GPU index, the target instances as profile counts.

    gpus:
      0: {1g.10gb: 1, 1g.20gb: 1, 3g.40gb: 1}
      "1": {}            # an empty target: every free instance of GPU 1 is destroyed

YAML or JSON (JSON is YAML). GPUs not listed are left alone. Every problem is reported at once, naming the field.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from migctl.core.text.documents import YAML_LOADER
from migctl.errors import InputError, Problem
from migctl.wire.values import gpu_index

MAX_COUNT = 64


def read_target(path: Path) -> dict[int, dict[str, int]]:
    """The target of the file at `path`; InputError naming the file and each bad field."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(source, f"cannot read the file: {getattr(e, 'strerror', None) or e}") from e
    try:
        data = yaml.load(text, Loader=YAML_LOADER)
    except yaml.YAMLError as e:
        raise InputError(source, f"not valid YAML or JSON: {getattr(e, 'problem', None) or e}") from e
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict):
        raise InputError(source, [Problem("gpus", "expected a mapping of GPU index to {profile: count}")])
    extra = sorted(str(k) for k in data if k != "gpus")
    problems = [Problem(k, "unknown field; the file has only `gpus`") for k in extra]
    out: dict[int, dict[str, int]] = {}
    for key, raw in data["gpus"].items():
        where = f"gpus.{key}"
        try:
            index = gpu_index(key)
        except ValueError as e:
            problems.append(Problem(where, f"not a GPU index: {e}"))
            continue
        counts = {} if raw is None else raw
        if not isinstance(counts, dict):
            problems.append(Problem(where, f"expected a mapping of profile to count, got {type(counts).__name__}"))
            continue
        out[index] = {}
        for profile, count in counts.items():
            field = f"{where}.{profile}"
            if not isinstance(profile, str) or not profile:
                problems.append(Problem(field, "expected a profile name such as 1g.10gb"))
            elif not isinstance(count, int) or isinstance(count, bool):
                problems.append(Problem(field, f"expected a whole number of instances, got {count!r:.40}"))
            elif count < 0:
                problems.append(Problem(field, f"negative count {count}; expected 0..{MAX_COUNT}"))
            elif count > MAX_COUNT:
                problems.append(Problem(field, f"{count} instances; expected 0..{MAX_COUNT}"))
            else:
                out[index][profile] = count
    if problems:
        raise InputError(source, problems)
    return out
