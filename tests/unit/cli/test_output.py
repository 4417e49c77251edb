"""The compact JSON writer: rows that share a dict are written once per dict and spliced, the same text as
`json.dumps` of the merged rows."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from migctl.cli.output import SharedRow, compact_json


def _merged(data: dict[str, Any], rows: dict[str, list[SharedRow]]) -> str:
    return json.dumps({**data, **{k: [{**o, **s} for o, s in v] for k, v in rows.items()}})


def _value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(7 if depth < 2 else 4)
    if kind == 0:
        return rng.choice([0, -3, 2**40, 1.5, True, False, None])
    if kind in (1, 2, 3):
        return rng.choice(["", "a", 'quote " and \\ backslash', "snow ☃ and 2×1g.5gb", "\n\t"])
    if kind == 4:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    return {f"k{rng.randrange(5)}": _value(rng, depth + 1) for _ in range(rng.randrange(4))}


@pytest.mark.parametrize("seed", range(200))
def test_the_text_equals_json_dumps_of_the_merged_rows(seed: int) -> None:
    rng = random.Random(seed)
    data = {f"d{i}": _value(rng) for i in range(rng.randrange(3))}
    pool = [{f"s{rng.randrange(4)}": _value(rng) for _ in range(rng.randrange(3))} for _ in range(3)]
    rows: dict[str, list[SharedRow]] = {}
    for key in ("r1", "r2")[: rng.randrange(1, 3)]:
        rows[key] = []
        for _ in range(rng.randrange(5)):
            own = {f"{rng.choice('os')}{rng.randrange(4)}": _value(rng) for _ in range(rng.randrange(3))}
            rows[key].append((own, rng.choice(pool)))  # an `s` key in both: the shared value wins
    assert compact_json(data, rows) == _merged(data, rows)
    assert json.loads(compact_json(data, rows)) == json.loads(_merged(data, rows))


def test_a_shared_dict_is_encoded_once_and_its_rows_keep_their_own_keys_first() -> None:
    shared = {"action": "rewrite", "model": "a100-80gb"}
    rows: dict[str, list[SharedRow]] = {"vram": [({"pod": f"ns/p{i}"}, shared) for i in range(3)]}
    text = compact_json({"version": "v1"}, rows)
    assert text == _merged({"version": "v1"}, rows)
    assert text.startswith('{"version": "v1", "vram": [{"pod": "ns/p0", "action": "rewrite"')


def test_rows_may_not_replace_a_key_of_the_data() -> None:
    with pytest.raises(ValueError, match="new top-level keys"):
        compact_json({"vram": 1}, {"vram": []})
