"""A filter read over a table's columns a chunk of rows at a time (numpy masks), so that an
ordered walk (gateway/storage/memory/ordered.py) builds Python rows only for the rows that pass.

Numbers and booleans compare in numpy under their null mask; a string column kept as codes
tests each distinct value once and looks the codes up; other strings, and the key, are
tested value by value with the row predicate (gateway/model/filters.py), whose rules these
follow exactly: a null value fails every condition but isNull, `not` negates.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from contracts.conditions import KEY, AllOf, AnyOf, Condition, Filter, Not
from contracts.project import Store
from gateway.model.filters import predicate
from gateway.storage.memory.columns import CodedColumn, NumberColumn
from gateway.storage.memory.lookup_table import LookupTable

Mask = Callable[[np.ndarray], np.ndarray]  # row numbers -> which of them pass
_NUMPY: dict[str, Callable[[np.ndarray, Any], np.ndarray]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "lte": np.less_equal,
    "gt": np.greater,
    "gte": np.greater_equal,
}


def mask(where: Filter, table: LookupTable, store: Store) -> Mask:
    match where:
        case Condition(field, _, _) if field == KEY:
            return _by_value(where, table.keys_at)
        case Condition(field, op, value):
            column = table.column(list(store.columns).index(field))
            if isinstance(column, NumberColumn) and op != "startsWith":
                return _numbers(column, op, value)
            if isinstance(column, CodedColumn):
                return _codes(column, where)
            return _by_value(where, column.values)
        case AllOf(parts):
            masks = [mask(part, table, store) for part in parts]
            return lambda rows: _all(rows, masks)
        case AnyOf(parts):
            masks = [mask(part, table, store) for part in parts]
            return lambda rows: _any(rows, masks)
        case Not(part):
            inner = mask(part, table, store)
            return lambda rows: ~inner(rows)


def vectorized(where: Filter | None, table: LookupTable, store: Store) -> bool:
    """Whether numpy tests the whole filter (no value tested by value in Python): then a
    walk of WALK_LIMIT rows takes well under a millisecond."""
    match where:
        case None:
            return True
        case Condition(field, op, _) if field != KEY:
            column = table.column(list(store.columns).index(field))
            return isinstance(column, CodedColumn) or (
                isinstance(column, NumberColumn) and op != "startsWith"
            )
        case Condition():
            return False
        case AllOf(parts) | AnyOf(parts):
            return all(vectorized(part, table, store) for part in parts)
        case Not(part):
            return vectorized(part, table, store)


def _numbers(column: NumberColumn, op: str, value: Any) -> Mask:
    def test(rows: np.ndarray) -> np.ndarray:
        nulls: np.ndarray = (
            column.mask[rows] if column.mask is not None else np.zeros(len(rows), bool)
        )
        if op == "isNull":
            return nulls if value else ~nulls
        data = column.data[rows]
        passed = np.isin(data, list(value)) if op == "in" else _NUMPY[op](data, value)
        kept: np.ndarray = np.asarray(passed, dtype=bool) & ~nulls
        return kept

    return test


def _codes(column: CodedColumn, where: Condition) -> Mask:
    """Each distinct value tested once (the last entry, code -1, is null)."""
    test = predicate(where, lambda field: 0)
    table = np.array([test([name]) for name in column.names], dtype=bool)
    return lambda rows: table[column.codes[rows]]


def _by_value(where: Condition, values: Callable[[np.ndarray], list[Any]]) -> Mask:
    test = predicate(where, lambda field: 0)
    return lambda rows: np.fromiter((test([v]) for v in values(rows)), bool, len(rows))


def _all(rows: np.ndarray, masks: list[Mask]) -> np.ndarray:
    passed = np.ones(len(rows), bool)
    for each in masks:
        passed &= each(rows)
    return passed


def _any(rows: np.ndarray, masks: list[Mask]) -> np.ndarray:
    passed = np.zeros(len(rows), bool)
    for each in masks:
        passed |= each(rows)
    return passed
