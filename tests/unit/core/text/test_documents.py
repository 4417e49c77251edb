"""The nesting of a JSON text told from the text: the same answer as a walk over the parsed objects."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from migctl.core.text.documents import json_deeper_than

# Characters that could confuse a reader of the text: brackets, quotes and backslashes inside strings.
_TRICKY = '[]{}"\\ab\n\t\u00e9\u2028'


def _depth(text: str) -> int:
    return next(n for n in range(200) if not json_deeper_than(text, n))


def _random_doc(rng: random.Random, depth: int) -> Any:
    r = rng.random()
    word = "".join(rng.choice(_TRICKY) for _ in range(rng.randint(0, 6)))
    if depth > 0 and r < 0.35:
        return [_random_doc(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    if depth > 0 and r < 0.7:
        return {word + str(i): _random_doc(rng, depth - 1) for i in range(rng.randint(0, 3))}
    return rng.choice([1, 2.5, None, True, word])


def _nesting(doc: Any) -> int:
    if isinstance(doc, dict):
        return 1 + max((_nesting(v) for v in doc.values()), default=0)
    if isinstance(doc, list):
        return 1 + max((_nesting(v) for v in doc), default=0)
    return 0


def test_random_documents_with_brackets_quotes_and_backslashes_in_their_strings() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        doc = _random_doc(rng, rng.randint(0, 10))
        want = _nesting(doc)
        for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False), json.dumps(doc, indent=1)):
            assert _depth(text) == want, text


@pytest.mark.parametrize(
    ("text", "depth"),
    [
        ("1", 0),
        ('"[[[["', 0),  # brackets in a string are not structure
        ('{"a": "\\"[[", "b": [1]}', 2),  # an escaped quote does not end the string
        ('{"a": "\\\\", "b": [[2]]}', 3),  # an escaped backslash does not escape the quote after it
        ('["\\\\\\"]]]", {}]', 2),  # a backslash pair, then an escaped quote, inside one string
        ('[{"k": "{\\"x\\": [1]}"}]', 2),  # a JSON document inside a string (an annotation)
        ("[" * 65 + "]" * 65, 65),
    ],
)
def test_cases_a_text_reader_could_get_wrong(text: str, depth: int) -> None:
    assert _nesting(json.loads(text)) == depth
    assert _depth(text) == depth
    assert json_deeper_than(text, depth - 1) if depth else not json_deeper_than(text, 0)
    assert not json_deeper_than(text, depth)
