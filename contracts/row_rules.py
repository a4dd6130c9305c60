"""Row rules: which rows of a store a role may read, as a condition over the row and the
token's claims ([auth.rows] in the project file; README: Row rules).

    key = claims.customer_id
    trip in claims.trips and price < 500
    not (trip starts with "Berlin") or seats >= 2

A rule is `or` of `and` of tests, `not` and parentheses; a test compares a field (`key` or
a column) with `=`, `!=`, `<`, `<=`, `>`, `>=`, `in`, `starts with` (strings) to a literal
("text", 12, 1.5, true, false, [list]) or a claim (`claims.name`), or is `field is null` /
`field is not null`. Parsed here, once, when the project file is read; a node binds the
claims of each request's token (gateway/model/visibility.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from contracts.conditions import AllOf, AnyOf, Condition, Filter, Not, Op

_OPS: dict[str, Op] = {"=": "eq", "!=": "ne", "<": "lt", "<=": "lte", ">": "gt", ">=": "gte"}
_ORDERED: tuple[str, ...] = ("string", "int", "long", "double")
_TOKEN = re.compile(
    r'\s*(?:(?P<string>"(?:[^"\\]|\\.)*")|(?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)'
    r"|(?P<op><=|>=|!=|=|<|>)|(?P<punct>[()\[\],])|(?P<word>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?))"
)
CLAIMS = "claims."
MAX_DEPTH = 16  # nested and/or/not levels, as a request's own filter (gateway/model/limits.py)


class RuleError(ValueError):
    """A rule that does not parse or does not fit its store; the message says where."""


@dataclass(frozen=True, slots=True)
class Claim:
    """A value the request's token carries: its claim `name`."""

    name: str


Rule = Filter  # whose values may be Claims, bound to the token's by the node


def parse(text: str, fields: Mapping[str, str]) -> Rule:
    """The rule `text` over a store whose fields (key first) have these types."""
    parser = _Parser(text, fields)
    rule = parser.either()
    if parser.peek() is not None:
        parser.fail(f"unexpected {parser.peek()!r}")
    if _depth(rule) > MAX_DEPTH:
        raise RuleError(f"the rule nests deeper than {MAX_DEPTH} levels of and, or and not")
    return rule


def _depth(rule: Rule) -> int:
    match rule:
        case Condition():
            return 0
        case AllOf(parts) | AnyOf(parts):
            return 1 + max(_depth(part) for part in parts)
        case Not(part):
            return 1 + _depth(part)


class _Parser:
    def __init__(self, text: str, fields: Mapping[str, str]) -> None:
        self.text, self.fields = text, fields
        self.tokens: list[tuple[str, str, int]] = []  # (kind, text, column)
        at = 0
        while text[at:].strip():
            found = _TOKEN.match(text, at)
            if found is None or found.lastgroup is None:
                column = len(text) - len(text[at:].lstrip()) + 1
                raise RuleError(f"column {column}: cannot read {text[column - 1 :][:12]!r}")
            kind = found.lastgroup
            self.tokens.append((kind, found.group(kind), found.start(kind) + 1))
            at = found.end()
        self.at = 0

    def peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def take(self) -> tuple[str, str, int]:
        if self.at >= len(self.tokens):
            self.fail("the rule ends too soon")
        token = self.tokens[self.at]
        self.at += 1
        return token

    def fail(self, message: str, at: int | None = None) -> NoReturn:
        """A RuleError at the token `at` (the next one by default)."""
        at = self.at if at is None else at
        column = self.tokens[at][2] if at < len(self.tokens) else len(self.text) + 1
        raise RuleError(f"column {column}: {message}")

    def expect(self, text: str) -> None:
        if self.peek() != text:
            self.fail(f"expected {text!r}, found {self.peek() or 'the end'!r}")
        self.at += 1

    def either(self) -> Rule:
        parts = [self.both()]
        while self.peek() == "or":
            self.at += 1
            parts.append(self.both())
        return parts[0] if len(parts) == 1 else AnyOf(tuple(parts))

    def both(self) -> Rule:
        parts = [self.unary()]
        while self.peek() == "and":
            self.at += 1
            parts.append(self.unary())
        return parts[0] if len(parts) == 1 else AllOf(tuple(parts))

    def unary(self) -> Rule:
        if self.peek() == "not":
            self.at += 1
            return Not(self.unary())
        if self.peek() == "(":
            self.at += 1
            rule = self.either()
            self.expect(")")
            return rule
        return self.test()

    def test(self) -> Condition:
        at = self.at
        kind, name, _ = self.take()
        if kind != "word" or name not in self.fields:
            self.fail(f"{name!r} is not a field of the store ({', '.join(self.fields)})", at)
        at = self.at
        kind, word, _ = self.take()
        if word == "is":
            negated = self.peek() == "not"
            self.at += negated
            self.expect("null")
            return Condition(name, "isNull", not negated)
        if word == "starts":
            self.expect("with")
            op: Op = "startsWith"
            if self.fields[name] != "string":
                self.fail(f"starts with needs a string field; {name} is {self.fields[name]}", at)
        elif word == "in":
            op = "in"
        elif kind == "op":
            op = _OPS[word]
            if op not in ("eq", "ne") and self.fields[name] not in _ORDERED:
                self.fail(f"{word} needs an ordered field; {name} is {self.fields[name]}", at)
        else:
            self.fail(f"expected a comparison after {name}, found {word!r}", at)
        return Condition(name, op, self.operand(name, many=op == "in"))

    def operand(self, field: str, many: bool) -> Any:
        if (self.peek() or "").startswith(CLAIMS):
            return Claim(self.take()[1][len(CLAIMS) :])
        if not many:
            return self.literal(field)
        self.expect("[")
        values = [self.literal(field)]
        while self.peek() == ",":
            self.at += 1
            values.append(self.literal(field))
        self.expect("]")
        return tuple(values)

    def literal(self, field: str) -> Any:
        kind, text, _ = self.take()
        value = _literal(kind, text)
        if value is None or not fits(value, self.fields[field]):
            self.fail(f"{text} is not a {self.fields[field]} value, as {field} is", self.at - 1)
        return value


def _literal(kind: str, text: str) -> Any:
    if kind == "string":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    if kind == "number":
        return float(text) if any(c in text for c in ".eE") else int(text)
    return {"true": True, "false": False}.get(text) if kind == "word" else None


INT32, INT64 = 2**31, 2**63


def fits(value: Any, kind: str) -> bool:
    """Whether a literal or a claim's value is one of a field's type (a whole number is a
    double too; a boolean is no number)."""
    if isinstance(value, bool):
        return kind == "boolean"
    if kind == "string":
        return isinstance(value, str)
    if kind in ("int", "long"):
        bound = INT32 if kind == "int" else INT64
        return isinstance(value, int) and -bound <= value < bound
    return kind == "double" and isinstance(value, int | float)
