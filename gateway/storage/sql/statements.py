"""Asking a snapshot by value in SQL: the rows it serves (its base under its overlay) that
pass a filter, in an order, after a cursor (Select), or folded into partial totals (Totals).

Every value is a bound parameter; every identifier is a declared field, quoted. A test of
a null value fails (but isNull), and `not` reads its operand's unknowns as false: a row
whose price is null fails `price > 5` and passes `not (price > 5)`.
"""

from __future__ import annotations

from typing import Any

from contracts.conditions import AllOf, AnyOf, Condition, Filter, Not
from contracts.project import FieldType, Store
from contracts.snapshot_file import DELETED, finite_or_null, key_columns, quoted
from gateway.model.filters import NUMBERS, ORDERED, WINDOW_START, Sort
from gateway.model.queries import Select, Totals
from gateway.storage.memory.row_select import columns

Sql = tuple[str, list[Any]]
_COMPARE = {"eq": "=", "ne": "<>", "lt": "<", "lte": "<=", "gt": ">", "gte": ">="}


class UnknownField(ValueError):
    """A filter or order names a field the store does not have (a peer's other project)."""


def source(store: Store, base: str, overlay: str | None) -> str:
    """The rows served, as a SELECT: the base's rows no overlay row replaces, and the
    overlay's rows not deleted. `base` and `overlay` name the store's tables."""
    served = ", ".join(columns(store))
    if overlay is None:
        return f"SELECT {served} FROM {base}"
    replaced = ", ".join(quoted(name) for name in key_columns(store))
    return (
        f"SELECT {served} FROM {base} ANTI JOIN {overlay} USING ({replaced}) "
        f"UNION ALL SELECT {served} FROM {overlay} WHERE NOT {DELETED}"
    )


def select(store: Store, rows: str, query: Select) -> Sql:
    where, args = _bounded(store, query.where, query.window)
    if query.after is not None:
        beyond, more = after(store, query.order, query.after)
        where, args = f"({where}) AND ({beyond})", [*args, *more]
    order = ", ".join(
        f"{_column(store, s.field)} {'DESC' if s.descending else 'ASC'} NULLS LAST"
        for s in query.order
    )
    sql = f"SELECT * FROM ({rows}) WHERE {where} ORDER BY {order} LIMIT {int(query.limit)}"
    return sql, args


def totals(store: Store, rows: str, query: Totals) -> Sql:
    parts = ["count(*)"]
    for name, kind in store.columns.items():
        column = quoted(name)
        parts += [f"count({column})", _sum(column, kind)]
        parts += [f"{f}({column})" if kind in ORDERED else "NULL" for f in ("min", "max")]
    where, args = _bounded(store, query.where, query.window)
    return f"SELECT {', '.join(parts)} FROM ({rows}) WHERE {where}", args


def _bounded(store: Store, where: Filter | None, window: tuple[int, int] | None) -> Sql:
    """The filter, and a window store's bounds on the window start."""
    sql, args = condition(store, where)
    if window is None:
        return sql, args
    return f"({sql}) AND {quoted(WINDOW_START)} BETWEEN ? AND ?", [*args, *window]


def _sum(column: str, kind: FieldType) -> str:
    """A partial sum (queries.Totals): null when the column has no value or (doubles) when
    it is not finite, a partition's totals telling those apart by the column's count; an
    integer column's exact (DuckDB sums BIGINT as HUGEINT) as decimal text."""
    if kind == "double":
        return finite_or_null(f"sum({column})")
    if kind in NUMBERS:
        return f"CAST(sum({column}) AS VARCHAR)"
    return "NULL"


def condition(store: Store, where: Filter | None) -> Sql:
    match where:
        case None:
            return "true", []
        case Condition(field, op, value):
            return _test(_column(store, field), op, value)
        case AllOf(parts) | AnyOf(parts):
            if not parts:
                return ("true" if isinstance(where, AllOf) else "false"), []
            joined = [condition(store, part) for part in parts]
            glue = " AND " if isinstance(where, AllOf) else " OR "
            return glue.join(f"({sql})" for sql, _ in joined), [
                a for _, args in joined for a in args
            ]
        case Not(part):
            sql, args = condition(store, part)
            return f"NOT coalesce(({sql}), false)", args


def _test(column: str, op: str, value: Any) -> Sql:
    if op == "isNull":
        return f"{column} IS {'' if value else 'NOT '}NULL", []
    if op == "in":
        return (f"list_contains(?, {column})", [list(value)]) if value else ("false", [])
    if op == "startsWith":
        return f"starts_with({column}, ?)", [value]
    return f"{column} {_COMPARE[op]} ?", [value]


def after(store: Store, order: tuple[Sort, ...], last: tuple[Any, ...]) -> Sql:
    """Rows strictly after the row whose order values are `last`, in `order` with nulls
    last: past it on the first field, or level with it there and past it on the next..."""
    terms: list[str] = []
    args: list[Any] = []
    level: list[Sql] = []  # the fields so far, equal to the cursor's
    for sort, value in zip(order, last, strict=True):
        column = _column(store, sort.field)
        past = _past(column, sort.descending, value)
        terms.append(" AND ".join([*(sql for sql, _ in level), past[0]]))
        args += [a for _, more in level for a in more] + past[1]
        level.append((f"{column} IS NULL", []) if value is None else (f"{column} = ?", [value]))
    return " OR ".join(f"({term})" for term in terms), args


def _past(column: str, descending: bool, value: Any) -> Sql:
    if value is None:
        return "false", []  # nulls are last: nothing sorts past one on this field
    return f"({column} {'<' if descending else '>'} ? OR {column} IS NULL)", [value]


def _column(store: Store, field: str) -> str:
    if field not in key_columns(store) and field not in store.columns:
        raise UnknownField(f"store {store.name!r} has no field {field!r}")
    return quoted(field)
