"""Equality-based label selectors (`a=b,c!=d,e,!f`), the subset `kubectl -l` and node selectors in settings use.

Settings such as `controller.in_place_node_selector` are matched by migctl itself against labels it already has
(not sent to the API server), so they are parsed once, strictly, at start: a typo fails the config with the
selector and the term named, instead of silently selecting nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_KEY = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "exists", "!exists"
    value: str = ""

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.op == "exists":
            return self.key in labels
        if self.op == "!exists":
            return self.key not in labels
        if self.op == "=":
            return labels.get(self.key) == self.value
        return labels.get(self.key) != self.value


@dataclass(frozen=True)
class LabelSelector:
    """All requirements must hold; the empty selector selects nothing (`matches_all` says otherwise)."""

    requirements: tuple[Requirement, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.requirements

    def matches(self, labels: Mapping[str, str]) -> bool:
        return bool(self.requirements) and all(r.matches(labels) for r in self.requirements)

    @staticmethod
    def parse(text: str) -> LabelSelector:
        """ValueError naming the term for anything but `key`, `!key`, `key=value`, `key==value`, `key!=value`."""
        out: list[Requirement] = []
        for raw in text.split(",") if text.strip() else ():
            term = raw.strip()
            if "!=" in term:
                key, _, value = term.partition("!=")
                req = Requirement(key.strip(), "!=", value.strip())
            elif "=" in term:
                key, _, value = term.partition("==" if "==" in term else "=")
                req = Requirement(key.strip(), "=", value.strip())
            elif term.startswith("!"):
                req = Requirement(term[1:].strip(), "!exists")
            else:
                req = Requirement(term, "exists")
            if not _KEY.fullmatch(req.key) or len(req.key) > 316:
                raise ValueError(f"selector {text!r}: term {term!r}: expected a label key such as example.com/pool")
            if not _VALUE.fullmatch(req.value) or len(req.value) > 63:
                raise ValueError(f"selector {text!r}: term {term!r}: expected a label value (63 characters at most)")
            out.append(req)
        return LabelSelector(tuple(out))
