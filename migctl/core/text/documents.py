"""What every reader of YAML and JSON documents shares: the YAML loader, and how deep a JSON text nests.

Snapshot files, mig-parted configs and catalog files are read with libyaml when it is present: about ten times
faster than PyYAML's own parser (a config with a thousand layouts; fifteen catalog files at every start).

Readers of untrusted JSON bound the nesting they accept, and tell it from the text itself. Walking the parsed
objects touches every value in Python (400,000 in a 1,000-node snapshot: two thirds of the C parse before it);
a few byte-string passes in C say the same. In a valid JSON text every bracket outside a string is structure,
and a string is delimited by the quotes that are not escaped. So: drop the escape pairs (`\\\\`, then `\\"`:
read left to right, as a JSON reader pairs a run of backslashes), keep only brackets and quotes, drop the
strings (two adjacent quotes first, which is nearly every string; then what lies between the remaining quote
pairs), and peel the innermost bracket pairs, one level per pass.
"""

from __future__ import annotations

import yaml

YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

_KEPT = b'[]{}"'
_DELETED = bytes(b for b in range(256) if b not in _KEPT)
_SQUARE = bytes.maketrans(b"{}", b"[]")


def json_deeper_than(text: str, limit: int) -> bool:
    """Whether the objects and arrays of `text` nest more than `limit` levels (the outermost is level 1).

    `text` must be valid JSON (parse it first): only then is every unescaped quote a string's delimiter."""
    data = text.encode()
    first, last = data.find(b"\\"), data.rfind(b"\\")
    if first >= 0:  # only where there are backslashes (a kubectl dump has them in a few annotations)
        escaped = data[first : last + 2].replace(b"\\\\", b"").replace(b'\\"', b"")
        data = data[:first] + escaped + data[last + 2 :]
    data = data.translate(None, _DELETED).replace(b'""', b"")  # a string without brackets is two quotes now
    if b'"' in data:  # strings holding brackets (a JSON document inside an annotation): what is outside them
        data = b"".join(data.split(b'"')[::2])
    data = data.translate(_SQUARE)
    for _ in range(limit):
        if not data:
            return False
        data = data.replace(b"[]", b"")  # the innermost level: pairs with nothing left inside
    return bool(data)
