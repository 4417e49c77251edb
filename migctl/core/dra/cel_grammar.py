"""The grammar and evaluation of migctl's CEL subset (`cel.py` is the public side: `parse`, `Selector`, `meaning`).

A selector reads into a small typed tree (`Node`); every node evaluates on a device as Kubernetes' DRA CEL
environment does (k8s.io/dynamic-resource-allocation/cel, compile.go): an unknown domain is an empty map, an
unknown key a runtime error (an `Err` value, so `&&` and `||` can absorb it as CEL's commutative operators do), and
`==` between different types is false. The reader fails with a `GrammarError` (why, position) on anything outside
the subset; static types catch what can never hold (`'a' == 1`) or is not a bool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Literal, Protocol

from migctl.core.dra.devices import AttrValue
from migctl.core.text.quantity import parse_quantity

MAX_DEPTH = 64


class GrammarError(ValueError):
    """Why an expression is outside the subset, and where."""

    def __init__(self, why: str, position: int | None) -> None:
        self.why, self.position = why, position
        super().__init__(why)


class Evaluable(Protocol):
    """What a selector sees of a device (a `Device` record, or an offer of the catalog)."""

    @property
    def driver(self) -> str: ...
    @property
    def attributes(self) -> Mapping[str, AttrValue]: ...
    @property
    def capacity(self) -> Mapping[str, Decimal]: ...


@dataclass(frozen=True, slots=True)
class Err:
    message: str


Value = str | int | bool | Decimal | AttrValue | tuple[object, ...] | Err
Type = Literal["bool", "int", "string", "quantity", "list", "dyn"]


# -- the tree ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Node:
    kind: str  # lit, list, driver, attr, cap, qty, call, not, and, or, cmp, in
    type: Type
    value: object = None  # literal value, op name, (domain, id) or method name
    args: tuple[Node, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        """(domain, id) of an attribute or capacity lookup."""
        assert isinstance(self.value, tuple)
        return (str(self.value[0]), str(self.value[1]))

    def eval(self, dev: Evaluable) -> Value:
        k = self.kind
        if k in ("lit", "qty"):
            return self.value  # type: ignore[return-value]
        if k == "list":
            return tuple(a.value for a in self.args)
        if k == "driver":
            return dev.driver
        if k in ("attr", "cap"):
            domain, ident = self.key
            found: Value | None = (dev.attributes if k == "attr" else dev.capacity).get(f"{domain}/{ident}")
            return Err(f"no such key: {ident}") if found is None else found
        if k == "not":
            v = truth(self.args[0].eval(dev))
            return v if isinstance(v, Err) else not v
        if k in ("and", "or"):
            return _logic(k, truth(self.args[0].eval(dev)), truth(self.args[1].eval(dev)))
        left, right = (a.eval(dev) for a in self.args)
        if isinstance(left, Err):
            return left
        if isinstance(right, Err):
            return right
        if k == "call":
            return _quantity_call(str(self.value), left, right)
        if k == "in":
            assert isinstance(right, tuple)
            return any(_equal(left, item) for item in right)
        return _compare(str(self.value), left, right)


def truth(v: Value) -> bool | Err:
    if isinstance(v, bool | Err):
        return v
    return Err(f"no such overload: a {type(v).__name__} where a bool is needed")


def _logic(op: str, a: bool | Err, b: bool | Err) -> bool | Err:
    decisive = op == "or"  # true decides ||, false decides &&
    if a is decisive or b is decisive:
        return decisive
    if isinstance(a, Err):
        return a
    if isinstance(b, Err):
        return b
    return not decisive


def _equal(a: Value, b: object) -> bool:
    if isinstance(a, bool) != isinstance(b, bool):
        return False  # CEL: true != 1 (Python: True == 1)
    return a == b  # a str is never equal to an int or a Version; quantities are not compared with ==


def _compare(op: str, a: Value, b: Value) -> Value:
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if not (type(a) is int and type(b) is int):
        return Err(f"no such overload: {op} on {type(a).__name__} and {type(b).__name__}")
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _quantity_call(method: str, a: Value, b: Value) -> Value:
    if not (isinstance(a, Decimal) and isinstance(b, Decimal)):
        return Err(f"no such overload: {method} on {type(a).__name__}")
    if method == "isGreaterThan":
        return a > b
    if method == "isLessThan":
        return a < b
    return (a > b) - (a < b)  # compareTo


# -- the reader -------------------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")|(?P<int>[0-9]+)(?![0-9A-Za-z_.])"
    r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>&&|\|\||==|!=|>=|<=|[<>!()\[\],.\-]))"
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_QUANTITY_METHODS = {"isGreaterThan": "bool", "isLessThan": "bool", "compareTo": "int"}
_KNOWN_FUNCTIONS = (
    "has",
    "size",
    "matches",
    "semver",
    "isSemver",
    "isQuantity",
    "string",
    "int",
    "cel",
    "all",
    "exists",
    "exists_one",
    "map",
    "filter",
)


@dataclass
class _Reader:
    text: str
    tokens: list[tuple[str, str, int]] = field(default_factory=list)
    i: int = 0
    depth: int = 0

    def fail(self, why: str, pos: int | None = None) -> GrammarError:
        return GrammarError(why, self.pos if pos is None else pos)

    @property
    def pos(self) -> int:
        return self.tokens[self.i][2] if self.i < len(self.tokens) else len(self.text)

    def peek(self) -> str:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else ""

    def take(self, want: str | None = None) -> tuple[str, str, int]:
        if self.i >= len(self.tokens):
            raise self.fail(f"expected {want!r}, the expression ended" if want else "the expression ended early")
        tok = self.tokens[self.i]
        if want is not None and tok[1] != want:
            raise self.fail(f"expected {want!r}, found {tok[1]!r}")
        self.i += 1
        return tok

    def tokenize(self) -> None:
        pos, text = 0, self.text
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            m = _TOKEN.match(text, pos)
            if not m:
                at = len(text) - len(text[pos:].lstrip())
                raise GrammarError(f"unexpected character {text[at]!r}", at)
            kind = m.lastgroup or ""
            self.tokens.append((kind, m.group(kind), m.start(kind)))
            pos = m.end()

    def expression(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.fail(f"nested deeper than {MAX_DEPTH} levels")
        node = self.binary("||", lambda: self.binary("&&", self.unary))
        self.depth -= 1
        return node

    def binary(self, op: str, operand: Callable[[], Node]) -> Node:
        node = operand()
        while self.peek() == op:
            pos = self.take()[2]
            right = operand()
            for side in (node, right):
                if side.type not in ("bool", "dyn"):
                    raise self.fail(f"{op} needs bool operands, got a {side.type}", pos)
            node = Node("and" if op == "&&" else "or", "bool", args=(node, right))
        return node

    def unary(self) -> Node:
        if self.peek() == "!":
            pos = self.take()[2]
            inner = self.unary()
            if inner.type not in ("bool", "dyn"):
                raise self.fail(f"! needs a bool operand, got a {inner.type}", pos)
            return Node("not", "bool", args=(inner,))
        return self.relation()

    def relation(self) -> Node:
        left = self.operand()
        op = self.peek()
        if op == "in":
            self.take()
            right = self.operand()
            if right.kind != "list" or left.type not in ("string", "int", "dyn"):
                raise self.fail("`in` is read only as <attribute or driver> in [<literals>]")
            return Node("in", "bool", args=(left, right))
        if op not in ("==", "!=", "<", "<=", ">", ">="):
            return left
        pos = self.take()[2]
        right = self.operand()
        if self.peek() in ("==", "!=", "<", "<=", ">", ">=", "in"):
            raise self.fail("chained comparisons are not CEL; use parentheses and && or ||")
        types = {left.type, right.type}
        if "quantity" in types:
            raise self.fail("quantities compare with isGreaterThan, isLessThan or compareTo, not " + op, pos)
        if "list" in types:
            raise self.fail(f"a list on one side of {op} is outside the subset", pos)
        if op not in ("==", "!=") and not types <= {"int", "dyn"}:
            raise self.fail(f"{op} is read on ints only (compareTo(...) {op} 0), not on a {'/'.join(sorted(types))}")
        if len(types - {"dyn"}) > 1:
            raise self.fail(f"{left.type} {op} {right.type} can never hold", pos)
        return Node("cmp", "bool", op, (left, right))

    def operand(self) -> Node:
        kind, text, pos = self.take()
        if text == "(":
            inner = self.expression()
            self.take(")")
            return self.methods(inner)
        if text == "[":
            return self.list_literal(pos)
        if kind == "str":
            return Node("lit", "string", _unquote(text))
        if kind == "int" or text == "-":
            return self.integer(text, pos)
        if text in ("true", "false"):
            return Node("lit", "bool", text == "true")
        if text == "device":
            return self.methods(self.device_path())
        if text == "quantity":
            return self.methods(self.quantity_literal())
        if kind == "id" and text in ("r", "R", "b", "B", "rb", "br") and self.peek()[:1] in ("'", '"'):
            raise self.fail("raw and bytes string literals are outside the subset", pos)
        if kind == "id" and (self.peek() in ("(", ".") or text in _KNOWN_FUNCTIONS):
            raise self.fail(f"function or macro {text!r} is outside the subset (migctl reads quantity() only)", pos)
        if kind == "id":
            raise self.fail(f"unknown name {text!r} (the only variable is `device`)", pos)
        raise self.fail(f"unexpected {text!r}", pos)

    def integer(self, text: str, pos: int) -> Node:
        if text == "-":
            kind, text, _ = self.take()
            if kind != "int":
                raise self.fail("unary minus is read only before an integer literal", pos)
            text = "-" + text
        if len(text.lstrip("-")) > 18:
            raise self.fail(f"integer {text} is out of range", pos)
        return Node("lit", "int", int(text))

    def list_literal(self, pos: int) -> Node:
        items: list[Node] = []
        while self.peek() != "]":
            item = self.operand()
            if item.kind != "lit":
                raise self.fail("a list holds literals only", pos)
            items.append(item)
            if self.peek() != ",":
                break
            self.take(",")
        self.take("]")
        return Node("list", "list", args=tuple(items))

    def device_path(self) -> Node:
        self.take(".")
        _, field_name, pos = self.take()
        if field_name == "driver":
            return Node("driver", "string")
        if field_name not in ("attributes", "capacity"):
            raise self.fail(f"device.{field_name} is outside the subset (driver, attributes, capacity)", pos)
        if self.peek() != "[":
            raise self.fail(f"device.{field_name} is read only as device.{field_name}['<domain>'].<id>")
        domain = self.index_string()
        if self.peek() == ".":
            self.take(".")
            kind, ident, ipos = self.take()
            if kind != "id":
                raise self.fail(f"expected an attribute name after '.', found {ident!r}", ipos)
        elif self.peek() == "[":
            ident = self.index_string()
        else:
            raise self.fail(f"device.{field_name}['{domain}'] is read only with an attribute name after it")
        if field_name == "attributes":
            return Node("attr", "dyn", (domain, ident))
        return Node("cap", "quantity", (domain, ident))

    def index_string(self) -> str:
        self.take("[")
        kind, text, pos = self.take()
        if kind != "str":
            raise self.fail("a map index is read only as a string literal", pos)
        self.take("]")
        return _unquote(text)

    def quantity_literal(self) -> Node:
        self.take("(")
        kind, text, pos = self.take()
        if kind != "str":
            raise self.fail("quantity() is read only with a string literal", pos)
        self.take(")")
        try:
            return Node("qty", "quantity", parse_quantity(_unquote(text)))
        except ValueError as e:
            raise self.fail(f"quantity({text}): {e}", pos) from e

    def methods(self, node: Node) -> Node:
        while self.peek() == ".":
            pos = self.take()[2]
            _, name, npos = self.take()
            if node.type != "quantity":
                raise self.fail(
                    f"method {name}() on a {node.type} is outside the subset (migctl reads methods "
                    "of quantities only: isGreaterThan, isLessThan, compareTo)",
                    npos,
                )
            if name not in _QUANTITY_METHODS:
                raise self.fail(
                    f"quantity method {name!r} is outside the subset (isGreaterThan, isLessThan, compareTo)", npos
                )
            self.take("(")
            arg = self.operand()
            self.take(")")
            if arg.type != "quantity":
                raise self.fail(f"{name}() takes a quantity, got a {arg.type}", pos)
            node = Node("call", _QUANTITY_METHODS[name], name, (node, arg))  # type: ignore[arg-type]
        return node


def _unquote(text: str) -> str:
    body, out, i = text[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == "\\":
            nxt = body[i + 1]
            if nxt not in _ESCAPES:
                raise ValueError(f"escape \\{nxt} is outside the subset")
            out.append(_ESCAPES[nxt])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def read(text: str) -> Node:
    """The tree of one expression; GrammarError when it is outside the subset."""
    reader = _Reader(text)
    reader.tokenize()
    try:
        root = reader.expression()
    except ValueError as e:
        if isinstance(e, GrammarError):
            raise
        raise reader.fail(str(e)) from e  # a string escape outside the subset
    if reader.i < len(reader.tokens):
        raise reader.fail(f"unexpected {reader.peek()!r} after a complete expression")
    if root.type not in ("bool", "dyn"):
        raise GrammarError(f"the expression yields a {root.type}, not a bool", None)
    return root


def driver_names(n: Node) -> frozenset[str] | None:
    """The drivers `device.driver == '...'` or `device.driver in [...]` admits; None for another node."""
    if n.kind == "cmp" and n.value == "==":
        a, b = n.args
        if a.kind == "driver" and b.kind == "lit":
            return frozenset({str(b.value)})
        if b.kind == "driver" and a.kind == "lit":
            return frozenset({str(a.value)})
    if n.kind == "in" and n.args[0].kind == "driver":
        return frozenset(str(i.value) for i in n.args[1].args)
    return None
