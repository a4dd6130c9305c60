"""The SELECT list of a store's rows as the gateway serves them: key, [window_start,] then
Store.columns, with each avg computed from the parts its snapshot keeps."""

from __future__ import annotations

from contracts.project import Aggregate, Store


def columns(store: Store) -> list[str]:
    window = ['"window_start"'] if store.kind == "window" else []
    if store.kind == "table":
        return ['"key"', *window, *(f'"{name}"' for name in store.columns)]
    return ['"key"', *window, *(_aggregate_sql(a) for a in store.aggregates)]


def _aggregate_sql(aggregate: Aggregate) -> str:
    if aggregate.func != "avg":
        return f'"{aggregate.name}"'
    total, count = aggregate.parts()
    return f'CAST("{total.name}" AS DOUBLE) / NULLIF("{count.name}", 0) AS "{aggregate.name}"'
