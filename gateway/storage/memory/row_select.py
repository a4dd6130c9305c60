"""A store's rows as the gateway serves them: key, [window_start,] then Store.columns, with
each avg computed from the parts its snapshot keeps, and a double that is not finite (a sum
past the double range) as null. In SQL (`columns`, for DuckDB's reads of the snapshot files)
and in Arrow (`served`, for a delta's tables in memory): tests/unit/test_row_select.py holds
them equal."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from contracts.project import Aggregate, Store
from contracts.snapshot_file import finite_or_null, key_columns, quoted


def columns(store: Store) -> list[str]:
    window = [quoted(name) for name in key_columns(store)[1:]]
    values = {name: quoted(name) for name in store.columns}
    if store.kind == "versions":  # a history's rows are read as they are kept
        return ['"key"', *window, *(quoted(name) for name in store.stored_columns)]
    if store.kind != "table":
        values = {a.name: _aggregate_sql(a) for a in store.aggregates}
    served = [
        f"{finite_or_null(sql)} AS {quoted(name)}" if store.columns[name] == "double" else sql
        for name, sql in values.items()
    ]
    return ['"key"', *window, *served]


def _aggregate_sql(aggregate: Aggregate) -> str:
    if aggregate.func != "avg":
        return quoted(aggregate.name)
    total, count = aggregate.parts()
    return f"CAST({quoted(total.name)} AS DOUBLE) / NULLIF({quoted(count.name)}, 0)"


def served(store: Store, frame: pa.Table) -> pa.Table:
    """`columns` computed on a table of the store's stored columns; its other columns (a
    delta's `_deleted`) follow unchanged."""
    names = ["key", *(["window_start"] if store.kind == "window" else [])]
    values = {name: frame.column(name) for name in store.columns if store.kind == "table"}
    if store.kind != "table":
        values = {a.name: _aggregate(a, frame) for a in store.aggregates}
    for name, kind in store.columns.items():
        if kind == "double":
            column = values[name]
            values[name] = pc.if_else(pc.is_finite(column), column, None)
    rest = [c for c in frame.column_names if c not in names and c not in store.stored_columns]
    arrays = [frame.column(n) for n in names] + list(values.values())
    arrays += [frame.column(c) for c in rest]
    return pa.table(arrays, names=[*names, *values, *rest])


def _aggregate(aggregate: Aggregate, frame: pa.Table) -> pa.ChunkedArray:
    if aggregate.func != "avg":
        return frame.column(aggregate.name)
    total, count = (frame.column(part.name) for part in aggregate.parts())
    counted = pc.if_else(pc.equal(count, 0), None, count)
    as_double = pc.CastOptions(pa.float64(), allow_float_truncate=True)
    return pc.divide(pc.cast(total, options=as_double), pc.cast(counted, options=as_double))
