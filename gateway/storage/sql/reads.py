"""Answering a query with SQL on a snapshot: its base, and the levels of its overlay where it
has deltas (storage/catalog/layers.py), each a table of the hub; what memory does not answer.

Snapshots are sorted by key (and window start), so every statement below is a range
predicate DuckDB prunes with zone maps, and a scan reads only its page plus one row.
"""

from __future__ import annotations

from typing import Any

import duckdb

from contracts.conditions import KEY
from contracts.project import TOMBSTONE, VALID_FROM, VALID_TO, Store, history_of
from contracts.snapshot_file import DELETED, key_columns, quoted
from gateway.model.filters import Sort
from gateway.model.queries import (
    Get,
    Prefix,
    Range,
    Row,
    Select,
    Totals,
    Versions,
    Windows,
    WindowsOfKey,
)
from gateway.storage.catalog.layers import Overlay
from gateway.storage.catalog.snapshots import Snapshot
from gateway.storage.memory import history
from gateway.storage.memory.row_select import columns
from gateway.storage.sql import statements

Predicate = tuple[str, list[Any], str, int | None]  # WHERE, its arguments, ORDER BY, LIMIT


def get(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Get
) -> list[Row]:
    """The rows of these keys."""
    if len(query.keys) == 1:
        return keyed(cursor, snapshot, store, ("key = ?", list(query.keys), "", None))
    predicate = ("key IN (SELECT unnest(?))", [list(query.keys)], "", None)
    return keyed(cursor, snapshot, store, predicate)


def windows_of_key(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: WindowsOfKey
) -> list[Row]:
    """One key's windows, by start."""
    where = "key = ? AND window_start BETWEEN ? AND ?"
    args: list[Any] = [query.key, query.from_ms, query.to_ms]
    return keyed(cursor, snapshot, store, (where, args, "window_start", None))


def windows(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Windows
) -> list[Row]:
    """A page of every key's windows, by key and start."""
    terms = ["window_start BETWEEN ? AND ?"]
    args: list[Any] = [query.from_ms, query.to_ms]
    if query.after is not None:
        terms.append("(key > ? OR (key = ? AND window_start > ?))")
        args += [query.after[0], query.after[0], query.after[1]]
    predicate = (" AND ".join(terms), args, "key, window_start", query.limit)
    return keyed(cursor, snapshot, store, predicate)


def prefix(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Prefix
) -> list[Row]:
    """A page of the keys that start with a prefix."""
    terms, args = ["key >= ?", "starts_with(key, ?)"], [query.prefix, query.prefix]
    upper = prefix_upper_bound(query.prefix)
    if upper is not None:
        terms.append("key < ?")
        args.append(upper)
    predicate = (_after(terms, args, query.after), args, "key", query.limit)
    return keyed(cursor, snapshot, store, predicate)


def key_range(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Range
) -> list[Row]:
    """A page of the keys between two bounds."""
    terms, args = [], []
    for term, value in (("key >= ?", query.low), ("key <= ?", query.high)):
        if value is not None:
            terms.append(term)
            args.append(value)
    predicate = (_after(terms, args, query.after), args, "key", query.limit)
    return keyed(cursor, snapshot, store, predicate)


def keyed(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, predicate: Predicate
) -> list[Row]:
    """Rows by key from the snapshot's base and, when it has deltas, its overlay: the
    overlay's rows replace the base's of the same key.

    A page of n rows needs, of the overlay, its first n + D rows (D: its deleted rows), and of
    the base its first n + (overlay rows fetched): every row up to the page's last key is
    then in hand, and so is every overlay row that could shadow one of them (_changed)."""
    where, args, order, limit = predicate
    cols = ", ".join(columns(store))
    base = f'{snapshot.base.alias}."{store.name}"'
    if snapshot.overlay is None:
        return _fetch(cursor, base, cols, where, args, order, limit)
    changed = _changed(cursor, snapshot.overlay, store, cols, predicate)
    more = None if limit is None else limit + len(changed)
    rows = _fetch(cursor, base, cols, where, args, order, more)
    return layered(rows, changed, len(key_columns(store)), limit)


def select(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Select
) -> list[Row]:
    """An ordered page (storage/sql/statements.py); in key order with no filter, a page by
    key."""
    if query.where is None and query.order == (Sort(KEY),):
        last = None if query.after is None else query.after[0]
        return key_range(cursor, snapshot, store, Range(None, None, query.limit, last))
    sql, args = statements.select(store, _source(cursor, snapshot, store), query)
    return [list(row) for row in cursor.execute(sql, args).fetchall()]


def totals(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Totals
) -> list[Row]:
    """One row of partial totals (storage/sql/statements.py)."""
    sql, args = statements.totals(store, _source(cursor, snapshot, store), query)
    return [list(row) for row in cursor.execute(sql, args).fetchall()]


def _source(cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store) -> str:
    """The rows the snapshot serves of a store, as a relation: its base under its overlay."""
    overlay = None if snapshot.overlay is None else snapshot.overlay.table(cursor, store)
    return statements.source(store, f'{snapshot.base.alias}."{store.name}"', overlay)


def versions(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Versions
) -> list[Row]:
    """A versioned store's versions of a key (storage/memory/history.py) from the layers'
    tables: the rows of each from its version valid at `from` to `to`, in one statement; the
    newest layer's row of each time."""
    kept, since = history_of(store), history.since(query)
    tables = [f"{snapshot.base.alias}.{quoted(kept.name)}"]
    if snapshot.overlay is not None:
        tables += snapshot.overlay.tables(cursor, kept)
    names = ", ".join(quoted(n) for n in (VALID_FROM, VALID_TO, TOMBSTONE, *store.columns))
    branches, args = [], []
    for layer, table in enumerate(tables):
        valid_then = (
            f"coalesce((SELECT max({VALID_FROM}) FROM {table} "
            f"WHERE key = ? AND {VALID_FROM} <= ?), ?)"
        )
        branches.append(
            f"SELECT {names}, {layer} AS _layer FROM {table} "
            f"WHERE key = ? AND {VALID_FROM} <= ? AND {VALID_FROM} >= {valid_then}"
        )
        args += [query.key, query.to_ms, query.key, since, since]
    found: dict[int, tuple[Any, ...]] = {}
    for row in cursor.execute(" UNION ALL ".join(branches), args).fetchall():
        held = found.get(row[0])
        if held is None or held[-1] < row[-1]:
            found[row[0]] = row
    return history.valid(query, [found[start][:-1] for start in sorted(found)])


def _changed(
    cursor: duckdb.DuckDBPyConnection,
    overlay: Overlay,
    store: Store,
    cols: str,
    predicate: Predicate,
) -> list[Row]:
    """The overlay's rows that pass `where` (the newest of each key, `_deleted` last): its
    first n + D in `order`, D the deleted rows of all its levels.

    A row of the merged levels ranks no higher in its own level than among them, so each
    level's first n + D rows hold the first n + D of the merge, and every newer row of
    their keys."""
    where, args, order, limit = predicate
    n = None if limit is None else limit + overlay.deleted(store.name)
    tables = overlay.tables(cursor, store)
    if len(tables) == 1:
        return _fetch(cursor, tables[0], f"{cols}, {DELETED}", where, args, order, n)
    page = "" if n is None else f" ORDER BY {order} LIMIT {int(n)}"
    branches = " UNION ALL ".join(
        f"SELECT * FROM (SELECT {cols}, {DELETED}, {i} AS _layer FROM {table} WHERE {where}{page})"
        for i, table in enumerate(tables)
    )
    by = f"{order}, " if order else ""
    sql = f"SELECT * FROM ({branches}) ORDER BY {by}_layer DESC"
    width = len(key_columns(store))
    newest: list[Row] = []
    seen: set[tuple[Any, ...]] = set()
    for row in cursor.execute(sql, args * len(tables)).fetchall():
        identity = row[:width]
        if identity not in seen:
            seen.add(identity)
            newest.append(list(row[:-1]))
    return newest if n is None else newest[:n]


def layered(rows: list[Row], changed: list[Row], width: int, limit: int | None) -> list[Row]:
    """Base rows under the overlay's `changed` rows (`_deleted` last), in key order."""
    if not changed:
        return rows if limit is None else rows[:limit]
    replaced = {tuple(row[:width]) for row in changed}
    merged = [row for row in rows if tuple(row[:width]) not in replaced]
    merged.extend(row[:-1] for row in changed if not row[-1])
    merged.sort(key=lambda row: tuple(row[:width]))
    return merged if limit is None else merged[:limit]


def _fetch(
    cursor: duckdb.DuckDBPyConnection,
    table: str,
    cols: str,
    where: str,
    args: list[Any],
    order: str,
    limit: int | None,
) -> list[Row]:
    sql = f"SELECT {cols} FROM {table} WHERE {where}"
    if order:
        sql += f" ORDER BY {order}"
    if limit is not None:
        sql += f" LIMIT {int(limit)}"
    return [list(row) for row in cursor.execute(sql, args).fetchall()]


def _after(terms: list[str], args: list[Any], after: object) -> str:
    if after is not None:
        terms.append("key > ?")
        args.append(after)
    return " AND ".join(terms) or "true"


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (None: none)."""
    stripped = prefix.rstrip("\U0010ffff")
    if not stripped:
        return None
    last = ord(stripped[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # skip surrogates, which UTF-8 cannot encode
        last = 0xE000
    return stripped[:-1] + chr(last)
