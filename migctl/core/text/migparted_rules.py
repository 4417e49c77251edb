"""mig-parted's own reading rules, per release: the profile-name grammar and device-filter matching.

Reproduced from NVIDIA's code so migctl reads a config exactly as the mig-manager it drives (facts and sources:
docs/profiles.md, "How migctl reads mig-parted configs"):

* names: go-nvlib `parseMigProfile` (pkg/nvlib/device/mig_profile.go). go-nvlib v0.7.4, first vendored by
  mig-parted v0.12.3, added `-attr` lists and dotted attributes (`+me.all`); older releases (v0.7.0..v0.7.3,
  mig-parted up to v0.12.2) accept only `+attr[,attr]` with purely alphanumeric attributes.
* device filters: mig-parted pkg/types/device.go and api/spec/v1/helpers.go. v0.15.0 parses
  `0xDDDDVVVV[:0xSSSSVVVV]` with `strconv.ParseUint(s, 0, 32)` and a subsystem half demands an exact
  four-part match; earlier releases use `strconv.ParseInt(s, 0, 32)` and compare the whole 32-bit id, so a
  subsystem-qualified filter never matches there. Both read any Go integer literal (`0x`, `0o`, `0b`, a
  leading `0` for octal, decimal, `_` separators). A filter that does not parse matches no GPU; an empty
  filter (absent, `""` or `[]`) matches every GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

Version = tuple[int, int, int]

NEWEST: Version = (0, 15, 0)  # the newest mig-parted release whose rules are reproduced here
NEG_AND_DOTTED_ATTRIBUTES: Version = (0, 12, 3)  # go-nvlib v0.7.4: `-me`, `+me.all`
SUBSYSTEM_FILTERS: Version = (0, 15, 0)

_VERSION_RE = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)$")


def parse_version(text: str) -> Version:
    """`v0.12.2` or `0.12.2` -> (0, 12, 2); ValueError otherwise."""
    m = _VERSION_RE.match(text.strip())
    if not m:
        raise ValueError(f"{text!r} is not a release version like v0.15.0")
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


def format_version(version: Version) -> str:
    return "v" + ".".join(map(str, version))


# ---------------------------------------------------------------------------------------------------------
# Profile names


def _field(s: str, suffix: str) -> int:
    """go-nvlib parseMigProfileField: no surrounding space, the suffix, then Go's strconv.Atoi."""
    if s.strip() != s:
        raise ValueError(f"leading or trailing spaces on '%d{suffix}'")
    if not s.endswith(suffix):
        raise ValueError(f"missing '{suffix}' from '%d{suffix}'")
    return _atoi(s[: -len(suffix)], suffix)


def _atoi(s: str, suffix: str) -> int:
    # strconv.Atoi: optional sign, then ASCII decimal digits only (no spaces, no underscores), fits in int64.
    if not re.fullmatch(r"[+-]?[0-9]+", s) or not -(2**63) <= int(s) < 2**63:
        raise ValueError(f"malformed number in '%d{suffix}'")
    return int(s)


def _fields(s: str) -> tuple[int, int, int]:
    parts = s.split(".", 2)
    if len(parts) == 3:
        return _field(parts[0], "c"), _field(parts[1], "g"), _field(parts[2], "gb")
    if len(parts) == 2:
        g = _field(parts[0], "g")
        return g, g, _field(parts[1], "gb")
    raise ValueError("parsed wrong number of fields, expected 2 or 3")


def _attributes(s: str, dotted: bool) -> tuple[str, ...]:
    attrs = s.split(",")
    seen: set[str] = set()
    for a in attrs:
        if a in seen:
            raise ValueError("non unique attribute in list")
        if a == "":
            raise ValueError("empty attribute in list")
        if a.strip() != a:
            raise ValueError("leading or trailing spaces in attribute")
        if "0" <= a[0] <= "9":
            raise ValueError("attribute begins with a number")
        if dotted and (a[0] == "." or a[-1] == "."):
            raise ValueError("attribute begins/ends with a dot")
        allowed = r"[A-Za-z0-9.]+" if dotted else r"[A-Za-z0-9]+"
        if not re.fullmatch(allowed, a):
            raise ValueError("non alpha-numeric character or digit in attribute")
        seen.add(a)
    return tuple(attrs)


@dataclass(frozen=True, slots=True)
class ParsedName:
    """A profile name as go-nvlib reads it."""

    c: int
    g: int
    gb: int
    attributes: tuple[str, ...] = ()
    negative: tuple[str, ...] = ()


@lru_cache(maxsize=4096)
def parse_name(name: str, version: Version = NEWEST) -> ParsedName:
    """Read a profile name exactly as the given mig-parted release does; ValueError with its reason."""
    if name == "":
        raise ValueError("profile is the empty string")
    new = version >= NEG_AND_DOTTED_ATTRIBUTES
    plus = name.split("+", 1)
    minus = name.split("-", 1) if new else [name]
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError(f"profile '{name}' contains both '+/-' attributes")
    split = plus if len(plus) == 2 else minus
    try:
        c, g, gb = _fields(split[0])
    except ValueError as e:
        raise ValueError(f"cannot parse fields of '{name}': {e}") from None
    if len(split) == 1:
        return ParsedName(c, g, gb)
    try:
        attrs = _attributes(split[1], dotted=new)
    except ValueError as e:
        raise ValueError(f"cannot parse attributes of '{name}': {e}") from None
    if split is minus:
        return ParsedName(c, g, gb, negative=attrs)
    return ParsedName(c, g, gb, attributes=attrs)


def name_problem(name: str, version: Version = NEWEST) -> str | None:
    """Why the given mig-parted release cannot read `name`, or None when it can."""
    try:
        parse_name(name, version)
    except ValueError as e:
        return f"invalid format for '{name}' (mig-parted {format_version(version)}): {e}"
    return None


# ---------------------------------------------------------------------------------------------------------
# Device filters and PCI ids

_GO_INT = re.compile(
    r"[+-]?(?:0[xX]_?[0-9a-fA-F]+(?:_[0-9a-fA-F]+)*|0[oO]_?[0-7]+(?:_[0-7]+)*|0[bB]_?[01]+(?:_[01]+)*"
    r"|0_?[0-7]+(?:_[0-7]+)*|[1-9](?:_?[0-9])*|0)"
)


def _go_parse(s: str, signed: bool) -> int | None:
    """strconv.Parse{Int,Uint}(s, 0, 32): Go integer literal syntax; None where Go returns an error."""
    if not _GO_INT.fullmatch(s) or (not signed and s[0] in "+-"):
        return None
    sign = -1 if s[0] == "-" else 1
    body = s.lstrip("+-").replace("_", "")
    octal = len(body) > 1 and body[0] == "0" and body[1] in "0123456789"  # Go's legacy `0755`
    value = int(body, 8) if octal else int(body, 0)
    value *= sign
    if signed:
        return value if -(2**31) <= value < 2**31 else None
    return value if value < 2**32 else None


@dataclass(frozen=True, slots=True)
class DeviceId:
    """A GPU's PCI id: device and vendor (`0x233010DE`), optionally the subsystem (`0x16C010DE`)."""

    primary: int
    subsystem: int | None = None

    def __str__(self) -> str:
        text = f"0x{self.primary:08X}"
        return text if self.subsystem is None else f"{text}:0x{self.subsystem:08X}"


def parse_pci_id(text: str) -> DeviceId:
    """`0x233010DE` or `0x233010DE:0x16C010DE` (how migctl's catalog and inventory write ids); ValueError."""
    parsed = parse_filter(text, NEWEST)
    if parsed is None:
        raise ValueError(f"{text!r} is not a PCI id of the form 0xDDDDVVVV[:0xSSSSVVVV]")
    return parsed


@lru_cache(maxsize=1024)
def parse_filter(text: str, version: Version = NEWEST) -> DeviceId | None:
    """One device-filter string as the release reads it; None when it cannot (such a filter matches no GPU)."""
    if version >= SUBSYSTEM_FILTERS:
        parts = text.split(":")
        if len(parts) > 2:
            return None
        primary = _go_parse(parts[0], signed=False)
        if primary is None:
            return None
        if len(parts) == 1:
            return DeviceId(primary)
        sub = _go_parse(parts[1], signed=False)
        return None if sub is None else DeviceId(primary, sub)
    value = _go_parse(text, signed=True)
    return None if value is None else DeviceId(value & 0xFFFFFFFF)


def filters_match(filters: tuple[str, ...], device: DeviceId, version: Version = NEWEST) -> bool | None:
    """Whether an entry whose `device-filter` lists `filters` applies to a GPU with id `device`; None when
    that depends on a subsystem id the caller does not know (`device.subsystem` None).

    `filters` is what the entry holds: `()` for an absent filter, an empty string or an empty list (all three
    match every GPU); `("",)` only for a one-element list holding an empty string, which matches none."""
    if not filters:
        return True
    undecided = False
    for f in filters:
        wanted = parse_filter(f, version)
        if wanted is None or wanted.primary != device.primary:
            continue
        if version < SUBSYSTEM_FILTERS or wanted.subsystem is None or wanted.subsystem == device.subsystem:
            return True
        undecided = undecided or device.subsystem is None
    return None if undecided else False
