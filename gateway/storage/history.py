"""A versioned store's versions of one key, read from a snapshot's history table (format:
contracts/snapshot_file.py; how the pipeline keeps it: spark_pipeline/versions.py), from
the layers' indexes in memory, or with SQL where a layer has none (keys too wide).

Each layer holds rows by (key, valid_from), and a newer layer's row replaces an older one's
of the same identity (a version whose valid_to changed when a late record came in before
the next). No layer ever removes a version, so the version valid at a time is the one with
the newest valid_from at or before it over all layers. One statement asks every layer
(the base and the overlay's levels) for its rows of the key from that layer's version
valid at `from` up to `to`; the newest layer's row of each time wins.
"""

from __future__ import annotations

from typing import Any

import duckdb

from contracts.clock import EARLIEST_MS
from contracts.project import TOMBSTONE, VALID_FROM, VALID_TO, Store, history_of
from contracts.snapshot_file import quoted
from gateway.model.queries import Row, Versions
from gateway.storage.catalog.snapshots import Snapshot
from gateway.storage.memory.key_runs import Timed


def versions(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Versions
) -> list[Row]:
    """The versions of `query.key` valid at some time in [from, to], by valid_from, after
    `query.after`, at most `query.limit`: key, valid_from, valid_to, then the columns. From
    the layers' indexes in memory (storage/memory/key_runs.py) when every layer has one."""
    indexes = snapshot.runs(history_of(store).name)
    if indexes is None:
        return versions_by_sql(cursor, snapshot, store, query)
    since, found = _from(query), dict[int, Timed]()
    for index in indexes:  # oldest first: a newer layer's row of a time replaces an older's
        found.update((v[0], v) for v in index.versions(query.key, since, query.to_ms))
    return _valid(query, [found[start] for start in sorted(found)])


def versions_by_sql(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Versions
) -> list[Row]:
    """`versions` from the layers' tables: the rows of each from its version valid at
    `from` to `to`, in one statement; the newest layer's row of each time."""
    history, since = history_of(store), _from(query)
    tables = [f"{snapshot.base.alias}.{quoted(history.name)}"]
    if snapshot.overlay is not None:
        tables += snapshot.overlay.tables(cursor, history)
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
    return _valid(query, [found[start][:-1] for start in sorted(found)])


def _from(query: Versions) -> int:
    return EARLIEST_MS if query.from_ms is None else query.from_ms


def _valid(query: Versions, rows: list[Timed]) -> list[Row]:
    """Of a key's rows (valid_from, valid_to, tombstone, *columns) by valid_from, from the
    one valid at `from` on: the versions, tombstones left out, after `after`."""
    since = _from(query)
    starts = [i for i, row in enumerate(rows) if row[0] <= since]
    rows = rows[starts[-1] :] if starts else rows
    out: list[Row] = []
    for start, end, tombstone, *values in rows:
        if tombstone or (end is not None and end <= since):
            continue
        if query.after is not None and start <= query.after:
            continue
        out.append([query.key, start, end, *values])
        if len(out) == query.limit:
            break
    return out
