"""The node's snapshot files: one DuckDB hub connection, one read-only ATTACH per
(partition, version), a cursor per thread, and each keyed store's rows in memory for lookups.

A query leases the partition's current snapshot; installing a new version switches the
pointer at once and retires the old one, which is detached and deleted when its last lease
ends. A query in flight therefore always finishes on the version it started with.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from contracts.project import Store
from contracts.snapshot_file import (
    POSITION_TABLE,
    SNAPSHOT_TABLE,
    FormatError,
    check_format,
    partition_folder,
    version_of,
)
from gateway.lookup_table import LookupTable

log = logging.getLogger(__name__)


class SnapshotError(Exception):
    """A snapshot file that cannot be served (unreadable, wrong partition, missing tables)."""


@dataclass
class Snapshot:
    partition: int
    version: int
    path: Path
    alias: str
    offsets: dict[str, int]  # topic -> next offset to read
    created_ms: int
    tables: dict[str, LookupTable] = field(default_factory=dict)  # keyed stores, in memory
    leases: int = 0
    retired: bool = False


class SnapshotCatalog:
    def __init__(self, folder: Path, stores: list[Store], threads: int, memory: str) -> None:
        self.folder = folder
        self.folder.mkdir(parents=True, exist_ok=True)
        self._stores = stores
        self._hub = duckdb.connect(":memory:", config={"threads": threads, "memory_limit": memory})
        self._memory = memory
        self._lock = threading.Lock()
        self._current: dict[int, Snapshot] = {}
        self._local = threading.local()

    def open_existing(self, partitions: list[int]) -> None:
        """Serve the newest valid file of each hosted partition already on disk."""
        for partition in partitions:
            for version, path in sorted(self._files(partition), reverse=True):
                try:
                    self.install(partition, version, path)
                    break
                except SnapshotError as exc:
                    log.warning("not serving %s: %s", path, exc)
        self._remove_strays(partitions)

    def _files(self, partition: int) -> list[tuple[int, Path]]:
        """The versions of a partition on disk, as (version, path)."""
        folder = self.folder / partition_folder(partition)
        if not folder.is_dir():
            return []
        found = ((version_of(path.name), path) for path in folder.iterdir())
        return [(version, path) for version, path in found if version is not None]

    def install(self, partition: int, version: int, path: Path) -> Snapshot:
        """Attach a verified file and make it the partition's current snapshot."""
        alias = f"p{partition}v{version}"
        cursor = self._hub.cursor()
        try:
            cursor.execute(f"ATTACH '{path}' AS {alias} (READ_ONLY)")
        except duckdb.Error as exc:
            raise SnapshotError(f"cannot open {path.name}: {exc}") from exc
        try:
            snapshot = self._inspect(cursor, partition, version, path, alias)
            snapshot.tables = self._load_tables(path)
        except (duckdb.Error, SnapshotError, FormatError) as exc:
            cursor.execute(f"DETACH {alias}")
            raise SnapshotError(
                f"{path.name} is not a snapshot of partition {partition}: {exc}"
            ) from exc
        with self._lock:
            old = self._current.get(partition)
            stale: Snapshot | None
            if old is not None and old.version >= version:
                stale = snapshot
            else:
                self._current[partition] = snapshot
                stale = old
            if stale is not None:
                stale.retired = True
        if stale is not None:
            self._release_if_unused(stale)
        return snapshot

    def _inspect(
        self,
        cursor: duckdb.DuckDBPyConnection,
        partition: int,
        version: int,
        path: Path,
        alias: str,
    ) -> Snapshot:
        row = cursor.execute(
            f"SELECT partition, version, created_ms, format FROM {alias}.{SNAPSHOT_TABLE}"
        ).fetchone()
        if row is None or row[0] != partition or row[1] != version:
            raise SnapshotError(f"its {SNAPSHOT_TABLE} row says {row}")
        check_format(row[3], path.name)
        tables = {
            r[0]
            for r in cursor.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]
            ).fetchall()
        }
        missing = [s.name for s in self._stores if s.name not in tables]
        if missing:
            raise SnapshotError(f"stores {missing} are missing")
        offsets = dict(
            cursor.execute(f'SELECT topic, "offset" FROM {alias}.{POSITION_TABLE}').fetchall()
        )
        return Snapshot(partition, version, path, alias, offsets, int(row[2]))

    def _load_tables(self, path: Path) -> dict[str, LookupTable]:
        """The keyed stores of a file, read by a DuckDB instance of their own (closed after),
        so that the hub's buffer pool does not keep every row of them."""
        loaded = {}
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": 1,
            "memory_limit": self._memory,
        }
        with duckdb.connect(":memory:", config=config) as connection:
            connection.execute(f"ATTACH '{path}' AS snapshot (READ_ONLY)")
            for store in self._stores:
                if store.kind == "window":
                    continue
                table = LookupTable.load(connection, "snapshot", store)
                if table is None:
                    log.info("%s: keys too wide for the in-memory index", store.name)
                else:
                    loaded[store.name] = table
        return loaded

    @contextmanager
    def lease(self, partition: int) -> Iterator[Snapshot | None]:
        with self._lock:
            snapshot = self._current.get(partition)
            if snapshot is not None:
                snapshot.leases += 1
        try:
            yield snapshot
        finally:
            if snapshot is not None:
                with self._lock:
                    snapshot.leases -= 1
                self._release_if_unused(snapshot)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the hub (duckdb refuses one connection on two threads)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = self._hub.cursor()
        return cursor

    def get(self, partition: int) -> Snapshot | None:
        """The partition's current snapshot (a single dict read: no lock needed)."""
        return self._current.get(partition)

    def current(self) -> dict[int, Snapshot]:
        with self._lock:
            return dict(self._current)

    def version(self, partition: int) -> int:
        snapshot = self.get(partition)
        return snapshot.version if snapshot else 0

    def close(self) -> None:
        self._hub.close()

    def _release_if_unused(self, snapshot: Snapshot) -> None:
        with self._lock:
            if not snapshot.retired or snapshot.leases > 0 or snapshot.alias == "":
                return
            alias, snapshot.alias = snapshot.alias, ""
        try:
            self._hub.cursor().execute(f"DETACH {alias}")
        except duckdb.Error as exc:  # already detached: nothing left to free
            log.debug("detach %s: %s", alias, exc)
        snapshot.path.unlink(missing_ok=True)

    def _remove_strays(self, partitions: list[int]) -> None:
        """Delete older versions and unfinished downloads left by an earlier run."""
        serving = {s.path for s in self.current().values()}
        for partition in partitions:
            folder = self.folder / partition_folder(partition)
            if not folder.is_dir():
                continue
            for path in folder.iterdir():
                if path not in serving and (version_of(path.name) or path.name.startswith(".")):
                    try:
                        os.unlink(path)
                    except OSError as exc:
                        log.warning("cannot remove %s: %s", path, exc)
