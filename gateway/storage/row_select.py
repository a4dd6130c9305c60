"""The SELECT list of a store's rows as the gateway serves them: key, [window_start,] then
Store.columns, with each avg computed from the parts its snapshot keeps, and a double that
is not finite (a sum past the double range) as null."""

from __future__ import annotations

from contracts.project import Aggregate, Store
from contracts.snapshot_file import finite_or_null, quoted


def columns(store: Store) -> list[str]:
    window = ['"window_start"'] if store.kind == "window" else []
    values = {name: quoted(name) for name in store.columns}
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
