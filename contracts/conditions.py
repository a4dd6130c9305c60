"""The conditions a row must meet, as a tree: what a request's `where` becomes (the GraphQL
layer builds it, the internal protocol carries it, storage compiles it: gateway/model/filters.py)
and what a row rule is (contracts/row_rules.py, whose values may still be claims to bind).

A field is "key", "window_start" (window stores) or one of the store's columns. A condition
on a null value is false, except `isNull`: a null matches only `isNull: true` (SQL's rule,
PostGraphile's and Hasura's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Op = Literal["eq", "ne", "lt", "lte", "gt", "gte", "in", "isNull", "startsWith"]
OPS: tuple[Op, ...] = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "isNull", "startsWith")
KEY = "key"


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition on one field: `value` is a tuple for `in`, a bool for `isNull`."""

    field: str
    op: Op
    value: Any


@dataclass(frozen=True, slots=True)
class AllOf:
    parts: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class AnyOf:
    parts: tuple[Filter, ...]


@dataclass(frozen=True, slots=True)
class Not:
    part: Filter


Filter = Condition | AllOf | AnyOf | Not
