"""Building one partition's snapshot file (format: contracts/snapshot_file.py).

build_snapshot runs inside a Spark task: it merges the staged deltas into the previous
version and publishes the new file by rename, never touching the previous one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from pathlib import Path

import duckdb

from contracts.durable import fsync_dir
from contracts.eventlog import now_ms
from contracts.manifest import PartitionEntry
from contracts.project import Store
from contracts.snapshot_file import (
    FORMAT,
    POSITION_TABLE,
    SNAPSHOT_TABLE,
    columns,
    key_columns,
    relative_path,
)

# Small row groups: a point lookup or a short scan reads one 8k-row group, not all 122,880
# rows of DuckDB's default (2-3x faster lookups for ~20% more bytes; bench/README.md).
ROW_GROUP_SIZE = 8192
_DUCKDB_CONFIG: dict[str, str | bool | int | float | list[str]] = {
    "threads": 1,
    "memory_limit": "512MB",
}


@dataclass(frozen=True)
class SnapshotTask:
    partition: int
    version: int
    store_root: str
    previous: str | None  # the previous snapshot's path relative to store_root
    deltas: dict[str, list[str]]  # store name -> this partition's staged parquet files
    positions: dict[str, int]  # topic -> next offset to read
    stores: tuple[Store, ...]


def build_snapshot(task: SnapshotTask) -> tuple[int, PartitionEntry]:
    """Write the partition's new version; returns the partition and its manifest entry."""
    relative = relative_path(task.partition, task.version)
    final = Path(task.store_root) / relative
    if final.exists():
        raise FileExistsError(f"{final} exists: a snapshot path is never reused")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f".{final.name}.{uuid.uuid4().hex}.tmp"
    created = now_ms()
    try:
        _write(tmp, task, created)
        digest, size = _seal(tmp)
        os.rename(tmp, final)
        fsync_dir(final.parent)
    finally:
        for leftover in (tmp, Path(f"{tmp}.wal")):
            leftover.unlink(missing_ok=True)
    entry = PartitionEntry(task.version, relative, digest, size, dict(task.positions), created)
    return task.partition, entry


def _write(path: Path, task: SnapshotTask, created_ms: int) -> None:
    con = duckdb.connect(":memory:", config=_DUCKDB_CONFIG)
    try:
        con.execute(f"ATTACH {_literal(str(path))} AS snap (ROW_GROUP_SIZE {ROW_GROUP_SIZE})")
        con.execute("USE snap")
        if task.previous is not None:
            previous = Path(task.store_root) / task.previous
            con.execute(f"ATTACH {_literal(str(previous))} AS prev (READ_ONLY)")
        for store in task.stores:
            con.execute(_create_sql(store))
            con.execute(_merge_sql(store, task.previous is not None, task.deltas.get(store.name)))
        con.execute(
            f'CREATE TABLE {POSITION_TABLE} (topic VARCHAR, "partition" INTEGER, "offset" BIGINT)'
        )
        for topic, offset in sorted(task.positions.items()):
            con.execute(
                f"INSERT INTO {POSITION_TABLE} VALUES (?, ?, ?)", [topic, task.partition, offset]
            )
        con.execute(
            f'CREATE TABLE {SNAPSHOT_TABLE} ("partition" INTEGER, version BIGINT, '
            "created_ms BIGINT, format INTEGER)"
        )
        con.execute(
            f"INSERT INTO {SNAPSHOT_TABLE} VALUES (?, ?, ?, ?)",
            [task.partition, task.version, created_ms, FORMAT],
        )
        if task.previous is not None:
            con.execute("DETACH prev")
        con.execute("CHECKPOINT")
        con.execute("USE memory")
        con.execute("DETACH snap")
    finally:
        con.close()


def _create_sql(store: Store) -> str:
    typed = ", ".join(f"{_ident(name)} {kind}" for name, kind in columns(store).items())
    return f"CREATE TABLE {_ident(store.name)} ({typed})"


def _merge_sql(store: Store, has_previous: bool, delta_files: list[str] | None) -> str:
    """The INSERT that fills the new table from the previous one and the delta, sorted."""
    typed = columns(store)
    names = ", ".join(_ident(n) for n in typed)
    keys = ", ".join(_ident(k) for k in key_columns(store))
    previous = f"prev.{_ident(store.name)}" if has_previous else _empty(typed)
    delta_columns = {**typed, "_deleted": "BOOLEAN"} if store.kind == "table" else typed
    if delta_files:
        delta = f"read_parquet([{', '.join(_literal(f) for f in delta_files)}])"
    else:
        delta = _empty(delta_columns)
    target = _ident(store.name)
    if store.kind == "table":
        return (
            f"INSERT INTO {target} WITH d AS (SELECT {names}, _deleted FROM {delta}) "
            f"SELECT {names} FROM ("
            f"SELECT {names} FROM {previous} AS p WHERE NOT EXISTS "
            f"(SELECT 1 FROM d WHERE d.key = p.key) "
            f"UNION ALL SELECT {names} FROM d WHERE NOT _deleted) ORDER BY {keys}"
        )
    combined = [
        f"CAST({_combine(a.func, _ident(a.name))} AS {typed[a.name]}) AS {_ident(a.name)}"
        for a in store.partials
    ]
    return (
        f"INSERT INTO {target} SELECT {keys}, {', '.join(combined)} FROM ("
        f"SELECT {names} FROM {previous} UNION ALL SELECT {names} FROM {delta}) "
        f"GROUP BY {keys} ORDER BY {keys}"
    )


def _combine(func: str, column: str) -> str:
    """How two partial results merge: counts and sums add (nulls ignored), min and max nest."""
    return f"sum({column})" if func in ("count", "sum") else f"{func}({column})"


def _empty(columns: dict[str, str]) -> str:
    typed = ", ".join(f"CAST(NULL AS {kind}) AS {_ident(name)}" for name, kind in columns.items())
    return f"(SELECT {typed} WHERE false)"


def _seal(path: Path) -> tuple[str, int]:
    """fsync the file; its sha256 and size."""
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    return digest, path.stat().st_size


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
