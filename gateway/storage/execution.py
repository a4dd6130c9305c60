"""Answering sub-queries from this node's snapshots: lookups, pages by key, ordered pages,
totals, a key's windows and versions from memory where it holds them; everything else with
one SQL statement per sub-query.

Snapshots are sorted by key (and window start), so every statement below is a range
predicate DuckDB prunes with zone maps, and a scan reads only its page plus one row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import duckdb

from contracts import chains
from contracts.clock import duration, instant, now_ms
from contracts.errors import Failure
from contracts.positions import satisfies
from contracts.project import Project, Store, history_of
from contracts.snapshot_file import DELETED, key_columns
from contracts.topology import Topology
from gateway.model.filters import KEY, Sort
from gateway.model.queries import (
    Answer,
    Get,
    Prefix,
    Query,
    Range,
    Row,
    Select,
    SubQuery,
    Totals,
    Versions,
    Windows,
    WindowsOfKey,
)
from gateway.storage import history, windows
from gateway.storage.catalog.layers import Overlay
from gateway.storage.catalog.snapshots import Snapshot, SnapshotCatalog
from gateway.storage.memory.masks import vectorized
from gateway.storage.memory.ordered import indexed
from gateway.storage.memory.row_select import columns
from gateway.storage.sql import statements


def execute(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    subqueries: Sequence[SubQuery],
) -> list[Answer]:
    """Run a batch of sub-queries on this node (blocking); an answer says whether the node
    is its partition's active in `topology`."""
    return [_answer(catalog, project, topology, node_id, q) for q in subqueries]


def execute_in_memory(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    subqueries: Sequence[SubQuery],
) -> list[Answer | None]:
    """Like execute, for sub-queries that are in_memory: None for one that turned out to
    need SQL (an ordered walk that gave up), for the caller to run off the event loop."""
    answers: list[Answer | None] = []
    for q in subqueries:
        try:
            answers.append(_answer(catalog, project, topology, node_id, q, memory_only=True))
        except _NeedsSql:
            answers.append(None)
    return answers


class _NeedsSql(Exception):
    """Memory could not answer a sub-query that was to run on the event loop."""


def in_memory(catalog: SnapshotCatalog, project: Project, q: SubQuery) -> bool:
    """Whether a sub-query is one the current snapshot answers from memory, so that it can
    run on the event loop (microseconds, no thread hop): a lookup, a page by key, a key's
    versions or windows, or a page ordered by an indexed column whose filter numpy tests
    whole (a walk bounded by ordered.WALK_LIMIT)."""
    store = project.stores.get(q.store)
    snapshot = None if store is None else catalog.get(chains.of(project, store, q.partition))
    if snapshot is None or store is None:
        return False
    if isinstance(q.query, Versions):
        return snapshot.runs(history_of(store).name) is not None
    if isinstance(q.query, WindowsOfKey):
        return snapshot.runs(store.name) is not None
    table = snapshot.tables.get(q.store)
    if table is None:
        return False
    if isinstance(q.query, Get | Range | Prefix):
        return True  # a scan memory cannot answer falls to SQL off the event loop
    return (
        isinstance(q.query, Select)
        and indexed(store, q.query) is not None
        and vectorized(q.query.where, table.base, store)
    )


def _answer(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    q: SubQuery,
    memory_only: bool = False,
) -> Answer:
    store = project.stores.get(q.store)
    # every node holds all of a global store: none is a standby for it
    active = topology.active(q.partition) == node_id or (store is not None and store.is_global)
    answer = Answer(id=q.id, node=node_id, active=active)
    if store is None:
        return answer.fail(Failure.DOES_NOT_EXIST, f"no store {q.store!r} on node {node_id}")
    if q.require_active and not active:
        return answer.fail(Failure.NOT_ACTIVE, _standby(topology, node_id, q.partition))
    with catalog.lease(chains.of(project, store, q.partition)) as snapshot:
        if snapshot is None:
            return answer.fail(Failure.NOT_PRESENT, f"{node_id} has no snapshot of {q.partition}")
        answer.version, answer.offsets = snapshot.version, snapshot.offsets
        answer.appended_ms = snapshot.appended_ms
        if not satisfies(snapshot.offsets, q.bound):
            return answer.fail(
                Failure.NOT_UP_TO_BOUND,
                f"partition {q.partition} on {node_id} is at {snapshot.offsets}, "
                f"the bound asks for {q.bound}",
            )
        if q.max_age_ms is not None:
            age_ms = now_ms() - snapshot.created_ms
            if age_ms > q.max_age_ms:
                return answer.fail(
                    Failure.NOT_UP_TO_BOUND,
                    f"partition {q.partition} on {node_id} is a snapshot {age_ms} ms old, "
                    f"maxAgeMs is {q.max_age_ms}",
                )
        if isinstance(q.query, Versions):
            return _versions(catalog, snapshot, store, q, answer)
        if isinstance(q.query, WindowsOfKey):
            indexed = windows.of_key(snapshot, store.name, q.query)
            if indexed is not None:
                answer.rows = indexed
                return answer
        table = snapshot.tables.get(store.name)
        if table is not None and isinstance(q.query, Get):
            answer.rows = table.get(q.query.keys)
            return answer
        if table is not None and isinstance(q.query, Range | Prefix):
            answer.rows = table.scan(q.query)
            if answer.rows is not None:
                return answer
            if memory_only:
                raise _NeedsSql
        if table is not None and isinstance(q.query, Select):
            answer.rows = table.select(store, q.query)
            if answer.rows is not None:
                return answer
            if memory_only:
                raise _NeedsSql
        if table is not None and isinstance(q.query, Totals):
            answer.rows = [table.totals(store, q.query)]
            return answer
        try:
            answer.rows = run(catalog.cursor(), snapshot, store, q.query)
        except duckdb.Error as exc:
            return answer.fail(Failure.STORE_EXCEPTION, f"{type(exc).__name__}: {exc}")
        except statements.UnknownField as exc:
            return answer.fail(Failure.UNKNOWN_QUERY_TYPE, str(exc))
    return answer


def _versions(
    catalog: SnapshotCatalog, snapshot: Snapshot, store: Store, q: SubQuery, answer: Answer
) -> Answer:
    """A versioned store's versions of a key (storage/history.py), for times its history
    still holds."""
    assert isinstance(q.query, Versions)
    if not store.versioned:
        return answer.fail(Failure.UNKNOWN_QUERY_TYPE, f"{store.name} keeps no history")
    horizon, asked = snapshot.horizon(store), q.query
    if asked.from_ms is None and horizon is not None:  # from the oldest time it holds
        asked = replace(asked, from_ms=horizon)
    if horizon is not None and asked.from_ms is not None and asked.from_ms < horizon:
        return answer.fail(
            Failure.OUTSIDE_HISTORY,
            f"{store.name} keeps {duration(store.history_ms)} of history by event time: "
            f"partition {q.partition} on {answer.node} answers for {instant(horizon)} and "
            f"later, not {instant(asked.from_ms)}",
        )
    try:
        answer.rows = history.versions(catalog.cursor(), snapshot, store, asked)
    except duckdb.Error as exc:
        return answer.fail(Failure.STORE_EXCEPTION, f"{type(exc).__name__}: {exc}")
    return answer


def run(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Query
) -> list[Row]:
    """Answer a query from the snapshot's base and, when it has deltas, its overlay: the
    overlay's rows replace the base's of the same key.

    A page of n rows needs, of the overlay, its first n + D rows (D: its deleted rows), and of
    the base its first n + (overlay rows fetched): every row up to the page's last key is
    then in hand, and so is every overlay row that could shadow one of them (_changed)."""
    if isinstance(query, Select) and query.where is None and query.order == (Sort(KEY),):
        last = None if query.after is None else query.after[0]
        query = Range(None, None, query.limit, last)
    if isinstance(query, Select | Totals):
        return _by_value(cursor, snapshot, store, query)
    if isinstance(query, Versions):
        return history.versions(cursor, snapshot, store, query)
    predicate = _predicate(query)
    where, args, order, limit = predicate
    cols = ", ".join(columns(store))
    base = f'{snapshot.base.alias}."{store.name}"'
    if snapshot.overlay is None:
        return _fetch(cursor, base, cols, where, args, order, limit)
    changed = _changed(cursor, snapshot.overlay, store, cols, predicate)
    more = None if limit is None else limit + len(changed)
    rows = _fetch(cursor, base, cols, where, args, order, more)
    return layered(rows, changed, len(key_columns(store)), limit)


Predicate = tuple[str, list[Any], str, int | None]  # WHERE, its arguments, ORDER BY, LIMIT


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


def _by_value(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Select | Totals
) -> list[Row]:
    overlay = None if snapshot.overlay is None else snapshot.overlay.table(cursor, store)
    rows = statements.source(store, f'{snapshot.base.alias}."{store.name}"', overlay)
    if isinstance(query, Select):
        sql, args = statements.select(store, rows, query)
    else:
        sql, args = statements.totals(store, rows, query)
    return [list(row) for row in cursor.execute(sql, args).fetchall()]


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


def _predicate(query: Get | WindowsOfKey | Range | Prefix | Windows) -> Predicate:
    """WHERE clause, its arguments, ORDER BY and LIMIT of a query."""
    match query:
        case Get(keys) if len(keys) == 1:
            return "key = ?", list(keys), "", None
        case Get(keys):
            return "key IN (SELECT unnest(?))", [list(keys)], "", None
        case WindowsOfKey(key, from_ms, to_ms):
            return (
                "key = ? AND window_start BETWEEN ? AND ?",
                [key, from_ms, to_ms],
                "window_start",
                None,
            )
        case Windows(from_ms, to_ms, limit, after):
            terms = ["window_start BETWEEN ? AND ?"]
            args: list[Any] = [from_ms, to_ms]
            if after is not None:
                terms.append("(key > ? OR (key = ? AND window_start > ?))")
                args += [after[0], after[0], after[1]]
            return " AND ".join(terms), args, "key, window_start", limit
        case Prefix(prefix, limit, after):
            terms, args = ["key >= ?", "starts_with(key, ?)"], [prefix, prefix]
            upper = prefix_upper_bound(prefix)
            if upper is not None:
                terms.append("key < ?")
                args.append(upper)
            return _after(terms, args, after), args, "key", limit
        case Range(low, high, limit, after):
            terms, args = [], []
            for term, value in (("key >= ?", low), ("key <= ?", high)):
                if value is not None:
                    terms.append(term)
                    args.append(value)
            return _after(terms, args, after), args, "key", limit


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


def _standby(topology: Topology, node_id: str, partition: int) -> str:
    if node_id in topology.fenced:
        return (
            f"{node_id} cannot tell whether it is still the active of {partition}: its "
            "coordinator session may have expired, so it answers as a standby until it reads "
            "the assignment again"
        )
    return f"{node_id} is a standby of {partition}"
