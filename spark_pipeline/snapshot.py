"""Building one layer of a partition's snapshot (format: contracts/snapshot_file.py).

build_layer runs inside the Spark task that holds the partition's new records. It computes
every store's delta from them (spark_pipeline/deltas.py), reads the layers below the new one,
and writes either
- a delta (an Arrow IPC file, contracts/delta_file.py): the changed keys' full new rows (a
  table's deleted keys as `_deleted` rows): an aggregate's or a window's current rows, read
  from the base and the rows the worker keeps for the chain (spark_pipeline/kept.py),
  combined with the new records; or
- a base (a DuckDB file): the whole state, which is how a chain is started, rebuilt or
  compacted.
A versioned table and its history are written together, from the new records' candidate
versions and the history below (spark_pipeline/versions.py).
The new file is published by rename and never touches the layers below it.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from contracts.clock import EARLIEST_MS
from contracts.delta_file import DeltaHeader, read_delta, write_delta
from contracts.delta_file import schema as delta_schema
from contracts.durable import fsync_dir
from contracts.eventlog import now_ms
from contracts.freshness import AppendTimes
from contracts.manifest import Layer
from contracts.project import VALID_TO, Store, Topic, history_of
from contracts.snapshot_file import (
    DELETED,
    FORMAT,
    POSITION_TABLE,
    SNAPSHOT_TABLE,
    STORES_TABLE,
    Kind,
    built_as,
    columns,
    declaration,
    key_columns,
    literal,
    newest_rows,
    quoted,
    relative_path,
    rows_as,
)
from spark_pipeline import versions
from spark_pipeline.checks import REASON, BadRow, bad_rows, checked_sql
from spark_pipeline.deltas import delta_sql, records_view
from spark_pipeline.kept import KeptRows, chain_of, fold, keep, kept_for, kept_rows_of
from spark_pipeline.layer_files import fetched, push

# Small row groups: a point lookup or a short scan reads one 8k-row group, not all 122,880
# rows of DuckDB's default (2-3x faster lookups for ~20% more bytes; bench/README.md).
ROW_GROUP_SIZE = 8192
# What a task does with a topic's bad records before anything is written (batch.py).
OnBad = Callable[[Topic, list[BadRow]], None]
# A layer is written to `.<layer file>.<uuid>.tmp` (DuckDB adds `<that>.wal`), then renamed.
_TEMPORARY = re.compile(r"^\.v\d+\.(base\.duckdb|delta\.arrow)\.[0-9a-f]{32}\.tmp(\.wal)?$")
_DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "threads": 1,
    "memory_limit": "512MB",
}


@dataclass(frozen=True)
class LayerTask:
    partition: int
    version: int
    kind: Kind
    store_root: str  # the working folder, on the host that runs the task
    below: tuple[Layer, ...]  # the chain under the new layer, base first (none: from scratch)
    positions: dict[str, int]  # topic -> next offset to read
    topics: tuple[Topic, ...]
    stores: tuple[Store, ...]
    appended: AppendTimes = ()  # the new records by append time (contracts/freshness.py)
    newest_append_ms: int | None = None
    read_ms: int | None = None  # when the task read the new records
    store_url: str | None = None  # the object store the layer goes to, and those below are in
    # the stores built from the records alone, with nothing of the layers below (a base's)
    from_start: frozenset[str] = frozenset()
    # topic -> where the records of the other stores start, when the records start before
    # (a rebuild read the topic from offset 0 for the stores built from the start)
    since: dict[str, int] = field(default_factory=dict)

    def local(self, layer: Layer) -> Path:
        """A layer below on this host (fetched from the object store if it is not)."""
        return fetched(self.store_root, self.store_url, layer)


def build_layer(
    task: LayerTask,
    records: dict[str, pa.Table],
    rows: dict[str, int] | None = None,
    on_bad: OnBad | None = None,
) -> tuple[int, Layer]:
    """Write the partition's new layer from the records that fit their topic (the others go
    to `on_bad` first); returns the partition and its manifest entry, and fills `rows` with
    the rows written per store. A file already at the path is a leftover of a run that
    crashed before publishing: replaced."""
    relative = relative_path(task.partition, task.version, task.kind)
    final = Path(task.store_root) / relative
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(final)
    created = now_ms()
    try:
        written, kept_rows = _write(tmp, task, records, created, on_bad)
        if rows is not None:
            rows.update(written)
        digest, size = _seal(tmp)
        os.replace(tmp, final)
        fsync_dir(final.parent)
        push(task.store_url, relative, final)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)
    below = chain_of(task.below) if task.kind == "delta" else ()
    keep(task.store_root, task.partition, KeptRows((*below, (relative, digest)), kept_rows))
    under = task.below[-1].rows if task.kind == "delta" and task.below else {}
    bound = {store: under.get(store, 0) + count for store, count in written.items()}
    layer = Layer(
        task.version,
        task.kind,
        relative,
        digest,
        size,
        dict(task.positions),
        created,
        task.appended,
        task.newest_append_ms,
        task.read_ms,
        written_ms=now_ms(),
        rows=bound,
    )
    return task.partition, layer


def temporary_path(final: Path) -> Path:
    """Where a layer is written before it is renamed to `final`: hidden, and unique to the
    writer."""
    return final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"


def temporary_of(path: Path) -> Path | None:
    """The temporary layer file `path` is, or whose WAL it is; None for any other file."""
    if not _TEMPORARY.match(path.name):
        return None
    return path.with_suffix("") if path.suffix == ".wal" else path


def _write(
    path: Path,
    task: LayerTask,
    records: dict[str, pa.Table],
    created_ms: int,
    on_bad: OnBad | None,
) -> tuple[dict[str, int], dict[str, pa.Table]]:
    """`records`: topic -> the new records (offset, timestamp, key as text, value). Returns
    the rows written per store, and the kept rows of the chain the new layer tops
    (spark_pipeline/kept.py)."""
    with _connection() as con:
        deltas = _stage(con, task, records, on_bad)
        if task.kind == "delta":
            return _write_delta(con, path, task, deltas, created_ms)
        return _write_base(con, path, task, deltas, created_ms), {}


def _write_delta(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    task: LayerTask,
    deltas: dict[str, str | None],
    created_ms: int,
) -> tuple[dict[str, int], dict[str, pa.Table]]:
    """A delta file (contracts/delta_file.py): each store's changed keys, their current rows
    read from the base and the chain's kept rows."""
    held = kept_rows_of(task.store_root, task.partition, task.below, task.stores, task.local)
    frames = {s.name: delta_schema(s).empty_table() for s in task.stores if not deltas[s.name]}
    changing = [(n, s) for n, s in enumerate(task.stores) if s.name not in frames]
    reads_base = any(kept_for(store) for _, store in changing)
    if reads_base:
        base = literal(str(task.local(task.below[0])))
        con.execute(f"ATTACH {base} AS below0 (READ_ONLY)")
    try:
        for number, store in changing:
            if store.kind == "versions":
                continue  # written with its store
            read = history_of(store) if store.versioned else store  # what the delta combines with
            sources = [(f"below0.{quoted(read.name)}", False)]
            kept = held.rows.get(read.name)
            if kept is not None:
                con.register(f"kept_{number}", kept)
                sources.append((f"kept_{number}", False))
            try:
                if store.versioned:
                    frames.update(_versions_delta(con, store, number, sources, deltas))
                    continue
                sql = _delta_sql(store, sources, f"(FROM {deltas[store.name]})")
                frames[store.name] = con.sql(sql).to_arrow_table().cast(delta_schema(store))
            finally:
                if kept is not None:
                    con.unregister(f"kept_{number}")
    finally:
        if reads_base:
            con.execute("DETACH below0")
    frames = {store.name: frames[store.name] for store in task.stores}
    header = DeltaHeader(task.partition, task.version, created_ms, dict(task.positions))
    write_delta(path, header, frames)
    rows = {name: frame.num_rows for name, frame in frames.items()}
    return rows, fold(held.rows, [frames], task.stores)


def _write_base(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    task: LayerTask,
    deltas: dict[str, str | None],
    created_ms: int,
) -> dict[str, int]:
    """A base file: the layers below (none: from scratch) and the new records, whole."""
    rows = {}
    con.execute(f"ATTACH {literal(str(path))} AS snap (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
    con.execute("USE snap")
    attached, registered = [], []
    try:
        below: list[dict[str, tuple[str, bool]]] = []  # per layer: store -> (relation, marks)
        folded = [s for s in task.stores if s.name not in task.from_start]
        for i, layer in enumerate(task.below):
            layer_path = task.local(layer)
            if layer.kind == "base":
                con.execute(f"ATTACH {literal(str(layer_path))} AS below{i} (READ_ONLY)")
                attached.append(f"below{i}")
                below.append({s.name: (f"below{i}.{quoted(s.name)}", False) for s in folded})
                continue
            _, frames = read_delta(layer_path)
            relations = {}
            for number, store in enumerate(folded):
                con.register(f"below{i}_{number}", frames[store.name])
                registered.append(f"below{i}_{number}")
                relations[store.name] = (f"below{i}_{number}", True)
            below.append(relations)
        for number, store in enumerate(task.stores):
            if store.kind == "versions":
                continue  # written with its store
            con.execute(_create_sql(store))
            layers = [] if store.name in task.from_start else below  # its state below
            if store.versioned:
                history = [layer[history_of(store).name] for layer in layers]
                rows.update(_versions_base(con, store, number, history, deltas))
                continue
            sources = [layer[store.name] for layer in layers]
            inserted = con.execute(
                _base_sql(store, sources, f"(FROM {deltas[store.name]})")
            ).fetchone()
            rows[store.name] = int(inserted[0]) if inserted else 0
        con.execute(
            f'CREATE TABLE {POSITION_TABLE} (topic VARCHAR, "partition" INTEGER, "offset" BIGINT)'
        )
        for name, offset in sorted(task.positions.items()):
            con.execute(
                f"INSERT INTO {POSITION_TABLE} VALUES (?, ?, ?)", [name, task.partition, offset]
            )
        con.execute(
            f'CREATE TABLE {SNAPSHOT_TABLE} ("partition" INTEGER, version BIGINT, '
            "created_ms BIGINT, format INTEGER, kind VARCHAR)"
        )
        con.execute(
            f"INSERT INTO {SNAPSHOT_TABLE} VALUES (?, ?, ?, ?, ?)",
            [task.partition, task.version, created_ms, FORMAT, task.kind],
        )
        con.execute(
            f"CREATE TABLE {STORES_TABLE} "
            "(name VARCHAR, built_as VARCHAR, rows_as VARCHAR, declaration VARCHAR)"
        )
        con.executemany(
            f"INSERT INTO {STORES_TABLE} VALUES (?, ?, ?, ?)",
            [
                [store.name, built_as(store), rows_as(store), declaration(store)]
                for store in task.stores
            ],
        )
        con.execute("CHECKPOINT")
    finally:
        con.execute("USE memory")
        for name in registered:
            con.unregister(name)
        for alias in attached:
            con.execute(f"DETACH {alias}")
        con.execute("DETACH snap")
    return rows


def _stage(
    con: duckdb.DuckDBPyConnection,
    task: LayerTask,
    records: dict[str, pa.Table],
    on_bad: OnBad | None,
) -> dict[str, str | None]:
    """Each topic's records checked and typed once (spark_pipeline/checks.py), the bad ones
    handed to `on_bad`; then each store's delta of the good ones, computed once into a table
    of the in-memory database (the layer's SQL reads it several times); store name -> table,
    None for a delta's store whose topic has no new records."""
    views = {}
    for number, topic in enumerate(task.topics):
        if task.kind == "delta" and not len(records.get(topic.name, ())):
            continue  # no store of the topic changes: no statement for it
        views[topic.name] = records_view(number)
        con.register(f"arrow_{number}", records.get(topic.name, _no_records()))
        checked = _checked(con, topic, f"arrow_{number}")
        handled = task.since.get(topic.name, 0)  # the bad records before it were, once
        bad = [row for row in bad_rows(con, checked) if row.offset >= handled]
        if bad and on_bad is not None:
            on_bad(topic, bad)
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW {views[topic.name]} AS "
            f"SELECT * FROM {checked} WHERE {REASON} IS NULL"
        )
    tables: dict[str, str | None] = {}
    for number, store in enumerate(task.stores):
        if store.kind == "versions":
            continue  # its store's candidate versions serve it (versions.py)
        if store.topic.name not in views:
            tables[store.name] = None
            continue
        tables[store.name] = f"memory.main.delta_{number}"
        view = views[store.topic.name]
        kept_from = task.since.get(store.topic.name)
        if kept_from is not None and store.name not in task.from_start:
            view = f'(SELECT * FROM {view} WHERE "offset" >= {kept_from})'
        sql = versions.candidates_sql(store, view) if store.versioned else delta_sql(store, view)
        con.execute(f"CREATE OR REPLACE TABLE {tables[store.name]} AS {sql}")
    tables.update({history_of(s).name: tables[s.name] for s in task.stores if s.versioned})
    return tables


_CACHED: list[duckdb.DuckDBPyConnection] = []  # one per Python worker: connecting costs ~50 ms
# The checks each cached connection has prepared (_checked), by name.
_PREPARED: weakref.WeakKeyDictionary[duckdb.DuckDBPyConnection, set[str]] = (
    weakref.WeakKeyDictionary()
)


def _checked(con: duckdb.DuckDBPyConnection, topic: Topic, source: str) -> str:
    """A table of `source`'s records checked (checks.checked_sql), filled by a statement the
    connection prepares once per topic: parsing and binding the check costs ~8 ms, ten
    times running it on a few hundred records."""
    sql = checked_sql(topic, source)
    name = f"checked_{hashlib.sha256(sql.encode()).hexdigest()[:16]}"
    table = f"memory.main.{name}"
    prepared = _PREPARED.setdefault(con, set())
    if name not in prepared:
        con.execute(f"CREATE OR REPLACE TABLE {table} AS {sql} LIMIT 0")
        con.execute(f"PREPARE {name} AS INSERT INTO {table} {sql}")
        prepared.add(name)
    con.execute(f"DELETE FROM {table}")
    con.execute(f"EXECUTE {name}")
    return table


@contextmanager
def _connection() -> Iterator[duckdb.DuckDBPyConnection]:
    """The worker's in-memory DuckDB connection, reused by its tasks; closed and forgotten
    when a task fails half-way, so the next task starts clean."""
    con = _CACHED.pop() if _CACHED else duckdb.connect(":memory:", config=_DUCKDB_CONFIG)
    try:
        yield con
    except BaseException:
        con.close()
        raise
    _CACHED.append(con)


def _create_sql(store: Store) -> str:
    listed = ", ".join(f"{quoted(name)} {duck}" for name, duck in columns(store).items())
    return f"CREATE TABLE {quoted(store.name)} ({listed})"


def _no_records() -> pa.Table:
    return pa.table(
        {
            "offset": pa.array([], pa.int64()),
            "timestamp": pa.array([], pa.int64()),
            "key": pa.array([], pa.string()),
            "value": pa.array([], pa.string()),
        }
    )


# Where a store's current rows come from, oldest first: a relation (a layer's table, or kept
# rows) and whether it marks deleted keys.
Sources = list[tuple[str, bool]]


def _current(
    store: Store, below: Sources, only_keys_of: str | None, on: list[str] | None = None
) -> str:
    """The state the layers below hold, as a subquery with `_deleted`: per key, the row of
    the newest layer holding it. `only_keys_of` restricts it to the rows that match one of
    a subquery's `on` (default: the row's identity, snapshot_file.key_columns)."""
    names = ", ".join(quoted(n) for n in columns(store))
    keys = key_columns(store)
    if not below:
        return _empty({**columns(store), DELETED: "BOOLEAN"})
    match = ""
    if only_keys_of is not None:
        same = " AND ".join(f"o.{quoted(k)} = l.{quoted(k)}" for k in on or keys)
        match = f" WHERE EXISTS (SELECT 1 FROM {only_keys_of} AS o WHERE {same})"
    branches = [
        f"SELECT {names}, {DELETED if marks else 'false'} AS {DELETED}, "
        f"{i} AS _layer FROM {relation} AS l{match}"
        for i, (relation, marks) in enumerate(below)
    ]
    if len(branches) == 1:
        return f"(SELECT {names}, {DELETED} FROM ({branches[0]}))"
    return f"({newest_rows(branches, keys)})"


def _versions_delta(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    number: int,
    history: Sources,
    candidates: dict[str, str | None],
) -> dict[str, pa.Table]:
    """A versioned store's rows in a delta, and its history's (versions.py): `history` is
    where the history's rows below are (the base's table and the kept rows)."""
    merged = _versions(con, store, number, history, candidates, only_touched=True)
    held = history_of(store)
    return {
        store.name: con.sql(versions.table_delta_sql(store, merged))
        .to_arrow_table()
        .cast(delta_schema(store)),
        held.name: con.sql(versions.history_delta_sql(store, merged))
        .to_arrow_table()
        .cast(delta_schema(held)),
    }


def _versions_base(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    number: int,
    history: Sources,
    candidates: dict[str, str | None],
) -> dict[str, int]:
    """Write a versioned store's table and its history's into the base (versions.py); the
    rows written to each."""
    held = history_of(store)
    con.execute(_create_sql(held))
    merged = _versions(con, store, number, history, candidates, only_touched=False)
    (horizon,) = con.execute(versions.horizon_sql(store, merged)).fetchone() or (None,)
    horizon = EARLIEST_MS if horizon is None else horizon
    rows = {}
    for name, sql in (
        (store.name, versions.table_base_sql(store, merged)),
        (held.name, versions.history_base_sql(store, merged, horizon)),
    ):
        inserted = con.execute(sql).fetchone()
        rows[name] = int(inserted[0]) if inserted else 0
    return rows


def _versions(
    con: duckdb.DuckDBPyConnection,
    store: Store,
    number: int,
    history: Sources,
    candidates: dict[str, str | None],
    only_touched: bool,
) -> str:
    """A table of the history's versions merged with the new records' (versions.merged_sql):
    those of the keys the records touch, or all."""
    found = candidates[store.name]
    stream = None
    if history:
        (stream,) = con.execute(versions.stream_sql([r for r, _ in history])).fetchone() or (None,)
    new = f"memory.main.new_versions_{number}"
    sql = versions.new_versions_sql(store, f"(FROM {found})", stream) if found else None
    con.execute(f"CREATE OR REPLACE TABLE {new} AS {sql or _no_versions(store)}")
    held = history_of(store)
    current = _current(held, history, new if only_touched else None, on=["key"])
    merged = f"memory.main.versions_{number}"
    con.execute(f"CREATE OR REPLACE TABLE {merged} AS {versions.merged_sql(store, current, new)}")
    return merged


def _no_versions(store: Store) -> str:
    held = history_of(store)
    typed = {n: t for n, t in columns(held).items() if n != VALID_TO}
    return _empty(typed)


def _base_sql(store: Store, below: Sources, delta: str) -> str:
    """The INSERT that writes the whole state: the layers below, then the new records."""
    names = ", ".join(quoted(n) for n in columns(store))
    keys = ", ".join(quoted(k) for k in key_columns(store))
    current = _current(store, below, None)
    target = quoted(store.name)
    if store.kind == "table":
        return (
            f"INSERT INTO {target} WITH d AS {delta}, c AS {current} "
            f"SELECT {names} FROM ("
            f"SELECT {names} FROM c WHERE NOT c.{DELETED} AND NOT EXISTS "
            f"(SELECT 1 FROM d WHERE d.key = c.key) "
            f"UNION ALL SELECT {names} FROM d WHERE NOT {DELETED}) ORDER BY {keys}"
        )
    return (
        f"INSERT INTO {target} SELECT {keys}, {_combined(store)} FROM ("
        f"SELECT {names} FROM {current} UNION ALL SELECT {names} FROM {delta}) "
        f"GROUP BY {keys} ORDER BY {keys}"
    )


def _delta_sql(store: Store, below: Sources, delta: str) -> str:
    """The SELECT of the changed keys' full new rows, `_deleted` last, sorted by key."""
    names = ", ".join(quoted(n) for n in columns(store))
    keys = ", ".join(quoted(k) for k in key_columns(store))
    if store.kind == "table":
        return f"SELECT {names}, {DELETED} FROM {delta} ORDER BY {keys}"
    current = _current(store, below, "d")
    return (
        f"WITH d AS {delta} SELECT {keys}, {_combined(store)}, false AS {DELETED} FROM ("
        f"SELECT {names} FROM {current} UNION ALL SELECT {names} FROM d) "
        f"GROUP BY {keys} ORDER BY {keys}"
    )


def _combined(store: Store) -> str:
    typed = columns(store)
    return ", ".join(
        f"CAST({_combine(a.func, quoted(a.name))} AS {typed[a.name]}) AS {quoted(a.name)}"
        for a in store.partials
    )


def _combine(func: str, column: str) -> str:
    """How two partial results merge: counts and sums add (nulls ignored), min and max nest."""
    return f"sum({column})" if func in ("count", "sum") else f"{func}({column})"


def _empty(columns: dict[str, str]) -> str:
    typed = ", ".join(f"CAST(NULL AS {kind}) AS {quoted(name)}" for name, kind in columns.items())
    return f"(SELECT {typed} WHERE false)"


def _seal(path: Path) -> tuple[str, int]:
    """fsync the file; its sha256 and size."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return digest, path.stat().st_size
