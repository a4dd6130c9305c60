"""Asking by value: the order rows come in, where a field sits in a row, and a filter
(contracts/conditions.py) as a function of a row, by the rules storage's SQL follows (its
values bound as parameters, never spliced)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from contracts.conditions import KEY, AllOf, AnyOf, Condition, Filter, Not
from contracts.project import FieldType, Store
from contracts.snapshot_file import key_columns

WINDOW_START = "window_start"  # a window store's rows: as snapshots name it
NUMBERS: tuple[FieldType, ...] = ("int", "long", "double")  # what sum and avg are defined on
ORDERED: tuple[FieldType, ...] = (*NUMBERS, "string")  # what min and max are defined on


@dataclass(frozen=True, slots=True)
class Sort:
    """One term of an order: nulls come last whatever the direction."""

    field: str
    descending: bool = False


def with_tie_breaker(order: tuple[Sort, ...], store: Store) -> tuple[Sort, ...]:
    """The order rows come in: as asked, up to the term that completes the row's identity
    (key_columns: the key, and a window's start), then those of its fields not yet in it,
    ascending."""
    named: list[str] = []
    for at, sort in enumerate(order):
        named.append(sort.field)
        if all(field in named for field in key_columns(store)):
            return order[: at + 1]
    return (*order, *(Sort(field) for field in key_columns(store) if field not in named))


def field_index(store: Store, field: str) -> int:
    """Where a field sits in a store's rows: the key, [the window's start,] then the columns."""
    if field == KEY:
        return 0
    if field == WINDOW_START and store.kind == "window":
        return 1
    return len(key_columns(store)) + list(store.columns).index(field)


def type_of(store: Store, field: str) -> FieldType:
    if field == KEY:
        return store.key_type
    return "long" if field == WINDOW_START else store.columns[field]


Row = list[Any]  # a stored row: the key, [window_start,] then the store's columns in order
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
    "startsWith": str.startswith,
}


def predicate(where: Filter, index_of: Callable[[str], int]) -> Callable[[Row], bool]:
    """The filter as a function of a row (`index_of` places a field in it), by the same
    rules as storage's SQL: a null value fails all but isNull, `not` negates."""
    match where:
        case Condition(field, op, value):
            at = index_of(field)
            if op == "isNull":
                return lambda row: (row[at] is None) is value
            if op == "in":
                among = frozenset(value)
                return lambda row: row[at] is not None and row[at] in among
            compare = _COMPARE[op]
            return lambda row: row[at] is not None and compare(row[at], value)
        case AllOf(parts):
            tests = [predicate(part, index_of) for part in parts]
            return lambda row: all(test(row) for test in tests)
        case AnyOf(parts):
            tests = [predicate(part, index_of) for part in parts]
            return lambda row: any(test(row) for test in tests)
        case Not(part):
            test = predicate(part, index_of)
            return lambda row: not test(row)
