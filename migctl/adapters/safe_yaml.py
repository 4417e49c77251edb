"""Reading snapshot files (YAML or JSON) with bounded work: no anchor bombs, no runaway nesting, no huge files.

A snapshot is input anyone could hand to `migctl plan`. YAML aliases let a few hundred bytes stand for billions
of nodes (the "billion laughs"), and deep nesting overflows the recursion of every loader. The file is composed
into YAML's node graph first (aliases stay shared there, so composing is cheap), the graph is measured with
aliases expanded, and only a graph within the limits is constructed into Python objects.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from migctl.core.text.documents import YAML_LOADER as _LOADER
from migctl.core.text.documents import json_deeper_than

MAX_BYTES = 1 << 30  # a kubectl dump of 10,000 nodes and 100,000 pods is a few hundred MB
MAX_DEPTH = 64  # Kubernetes objects nest about 10 deep
MAX_ALIASES = 1_000  # kubectl writes none
MAX_EXPANDED_NODES = 20_000_000  # scalars and collections after alias expansion


class UnsafeInputError(ValueError):
    """The file breaks one of the limits above (the message says which and by how much)."""


def load_documents(text: str) -> list[Any]:
    """All documents of a YAML (or JSON) text, within the limits; raises UnsafeInput or yaml/json errors."""
    if len(text) > MAX_BYTES:
        raise UnsafeInputError(f"{len(text)} characters; at most {MAX_BYTES} are read")
    if text.lstrip().startswith("{"):
        try:
            doc = json.loads(text)
        except RecursionError as e:
            raise UnsafeInputError(f"JSON nested deeper than this reader allows (at most {MAX_DEPTH} levels)") from e
        if json_deeper_than(text, MAX_DEPTH):
            raise UnsafeInputError(f"nested deeper than {MAX_DEPTH} levels")
        return [doc]
    out = []
    try:
        for node in yaml.compose_all(text, Loader=_LOADER):
            if node is None:
                out.append(None)
                continue
            _measure(node)
            loader = _LOADER("")
            try:
                out.append(loader.construct_document(node))
            finally:
                loader.dispose()
    except RecursionError as e:
        raise UnsafeInputError(f"YAML nested deeper than this reader allows (at most {MAX_DEPTH} levels)") from e
    return out


def _measure(root: yaml.Node) -> None:
    """Depth, aliases and expanded size of one document's node graph (iterative: no recursion limit)."""
    size: dict[int, int] = {}
    aliases = 0
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise UnsafeInputError(f"nested deeper than {MAX_DEPTH} levels (line {node.start_mark.line + 1})")
        children = _children(node)
        if done:
            total = 1 + sum(size[id(c)] for c in children)
            size[id(node)] = total
            if total > MAX_EXPANDED_NODES:
                raise UnsafeInputError(
                    f"aliases expand to more than {MAX_EXPANDED_NODES} values (an anchor bomb?); "
                    f"line {node.start_mark.line + 1}"
                )
            continue
        if id(node) in seen:
            aliases += 1  # the composer shares an aliased node: a second visit is an alias
            if aliases > MAX_ALIASES:
                raise UnsafeInputError(f"more than {MAX_ALIASES} aliases (line {node.start_mark.line + 1})")
            if id(node) in size:
                continue
        seen.add(id(node))
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in size)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [x for pair in node.value for x in pair]
    return []
