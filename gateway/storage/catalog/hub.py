"""The node's DuckDB hub and what it reads into it: one in-memory connection, a cursor per
thread, one read-only ATTACH per base file with the base's keyed stores in memory (mapped
from the base's image, with images: storage/catalog/images.py), and each level of deltas,
read, mapped from the keeper's image, or shared as an image of its own
(storage/catalog/layers.py). It knows files and tables: which chain serves, and until when,
is the catalog's (storage/catalog/snapshots.py).
"""

from __future__ import annotations

import itertools
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa

from contracts import chains
from contracts.project import Project, Store, history_of
from contracts.snapshot_file import (
    STORES_TABLE,
    FormatError,
    built_as,
    key_columns,
    literal,
    parse_file_name,
    partition_folder,
    quoted,
    rows_as,
    same_rows,
)
from gateway.storage.catalog import images
from gateway.storage.catalog.layers import (
    LayerError,
    LayerHeader,
    Level,
    LevelImage,
    LocalLayer,
    mapped,
    read_deltas,
    read_header,
    shared,
)
from gateway.storage.memory.key_runs import KeyRuns, newest_of
from gateway.storage.memory.lookup_table import LookupTable
from gateway.storage.memory.row_select import columns

log = logging.getLogger(__name__)
# A level's image outlives the level in the keeper by this long, for a follower still mapping
# the chain it was told (Kafka's file.delete.delay.ms does the same for a log's segments).
LEVEL_DELETE_DELAY_S = 10.0


Tables = tuple[dict[str, LookupTable], dict[str, int], dict[str, int], dict[str, KeyRuns]]


def image_of(base: Path) -> Path:
    """Where a base's image is (a hidden name: one left by a crash is a stray at start)."""
    return base.with_name(f".{base.name}.image")


class SnapshotError(Exception):
    """A chain of layer files that cannot be served (unreadable, wrong partition, a delta
    without a table its base has)."""


@dataclass(eq=False)
class Base:
    layer: LocalLayer
    alias: str  # its ATTACH in the hub
    header: LayerHeader
    # the declared stores whose tables it has: those of its chain (a store declared since
    # the pipeline last built the chain has none until it does: README, Changing stores)
    stores: tuple[Store, ...]
    tables: dict[str, LookupTable]  # keyed stores, in memory
    rows: dict[str, int] = field(default_factory=dict)  # every store's
    newest: dict[str, int] = field(default_factory=dict)  # history -> its newest valid_from
    runs: dict[str, KeyRuns] = field(default_factory=dict)  # indexed windows and histories
    files: set[Path] = field(default_factory=set)  # its file and the deltas installed over it
    users: int = 0  # snapshots over it not yet released
    keep: bool = False  # its layer files stay on disk once it is closed (`drop`)
    # the chain's declared stores when it was opened (name, index): opened again once they
    # change (a reload)
    declared: frozenset[tuple[str, tuple[str, ...]]] = frozenset()

    def __post_init__(self) -> None:
        self._held = frozenset(s.name for s in self.stores)  # what every read asks of it

    def holds(self, store: str) -> bool:
        """Whether its chain has the store: the pipeline built it."""
        return store in self._held


def _indexed_as(tables: dict[str, LookupTable], stores: tuple[Store, ...]) -> bool:
    """Whether the keyed stores' tables are sorted by the columns each store's index names."""
    return all(
        {column for column, _ in tables[s.name].sorted_by} == set(s.index)
        for s in stores
        if s.name in tables
    )


class DuckDBHub:
    def __init__(
        self,
        folder: Path,
        project: Project,
        threads: int,
        memory: str,
        owns_files: bool = True,
        images: bool = False,
    ) -> None:
        self.folder = folder
        self.owns_files = owns_files  # False: another process deletes them (a follower's)
        self._images = images  # bases' tables mapped from images (catalog/images.py)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._project = project
        self._connection = duckdb.connect(
            ":memory:", config={"threads": threads, "memory_limit": memory}
        )
        self._memory = memory
        self._local = threading.local()
        self._serial = itertools.count(1)
        self._lock = threading.Lock()
        self._doomed: list[tuple[float, Path]] = []  # level images to delete, and when

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """This thread's cursor on the hub (duckdb refuses one connection on two threads)."""
        cursor = getattr(self._local, "cursor", None)
        if cursor is None:
            cursor = self._local.cursor = self._connection.cursor()
        return cursor

    def alias(self, partition: int) -> str:
        """A new name for a level's tables in the hub."""
        return f"o{partition}_{next(self._serial)}"

    def open_base(self, partition: int, layer: LocalLayer, reopened: Base | None = None) -> Base:
        """Attach a base file and read its keyed stores into memory: those `reopened` (the
        same file, opened before its declared stores changed) holds already are its."""
        alias = f"b{partition}_{next(self._serial)}"
        cursor = self._connection.cursor()
        try:
            cursor.execute(f"ATTACH {literal(str(layer.path))} AS {alias} (READ_ONLY)")
        except duckdb.Error as exc:
            raise SnapshotError(f"cannot open {layer.path.name}: {exc}") from exc
        try:
            header = read_header(cursor, alias, partition, layer)
            declared = self.declared(partition)
            stores = self._built(cursor, alias, partition, reopened)
            held = reopened if reopened is not None and reopened.layer == layer else None
            tables, rows, newest, runs = self._tables_of(layer.path, stores, held)
        except (duckdb.Error, SnapshotError, LayerError, FormatError) as exc:
            self._detach(alias)
            raise SnapshotError(
                f"{layer.path.name} is not a base of partition {partition}: {exc}"
            ) from exc
        finally:
            # Reading a base goes through whole tables in Arrow; what Arrow's allocator
            # keeps of them after (tens of MiB a node) goes back to the OS.
            pa.default_memory_pool().release_unused()
        files = {layer.path, image_of(layer.path)} if self._images else {layer.path}
        return Base(
            layer, alias, header, stores, tables, rows, newest, runs, files, declared=declared
        )

    def declared(self, chain: int) -> frozenset[tuple[str, tuple[str, ...]]]:
        """The chain's declared stores, by name and index."""
        return frozenset((s.name, s.index) for s in chains.stores(self._project, chain))

    def outdated(self, base: Base, chain: int) -> bool:
        """Whether the chain's declared stores changed since `base` was opened (a reload
        declared more): opened again, it may serve more of them."""
        return base.declared != self.declared(chain)

    def _built(
        self, cursor: duckdb.DuckDBPyConnection, alias: str, chain: int, reopened: Base | None
    ) -> tuple[Store, ...]:
        """The chain's declared stores that the base has a table of, built by a declaration
        of the same rows (contracts/snapshot_file.py: rows_as); a versioned table's only with
        its history's. A base written before rows_as says built_as, which covers the index
        too: one opened again after a reload changed an index only is taken as before."""
        tables = {
            r[0]
            for r in cursor.execute(
                "SELECT table_name FROM duckdb_tables() WHERE database_name = ?", [alias]
            ).fetchall()
        }
        built: dict[str, tuple[str, str | None]] = {}
        if STORES_TABLE in tables:
            listed = cursor.execute(
                "SELECT column_name FROM duckdb_columns() WHERE database_name = ? "
                "AND table_name = ?",
                [alias, STORES_TABLE],
            ).fetchall()
            rows = "rows_as" if ("rows_as",) in listed else "NULL"
            found = cursor.execute(f"SELECT name, built_as, {rows} FROM {alias}.{STORES_TABLE}")
            built = {name: (digest, by_rows) for name, digest, by_rows in found.fetchall()}
        served = {s.name: s for s in reopened.stores} if reopened is not None else {}

        def same(store: Store) -> bool:
            if store.name not in built:
                return True  # a base written before _stores
            digest, by_rows = built[store.name]
            if by_rows is not None:
                return by_rows == rows_as(store)
            before = served.get(store.name, store)
            return digest == built_as(before) and same_rows(before, store)

        declared = chains.stores(self._project, chain)
        missing = {s.name for s in declared if s.name not in tables}
        other = {s.name for s in declared if not same(s)}
        if other - missing:
            log.info("chain %s: its base has %s built by another declaration", chain, other)
        missing |= other
        for store in declared:  # a versioned table and its history stand or fall together
            if store.versioned and {store.name, history_of(store).name} & missing:
                missing |= {store.name, history_of(store).name}
        if missing:
            log.info("chain %s: its base has no table yet of %s", chain, sorted(missing))
        return tuple(s for s in declared if s.name not in missing)

    def _tables_of(self, path: Path, stores: tuple[Store, ...], held: Base | None) -> Tables:
        """A base's tables: from its image when there is one, else read (but those `held`
        has), and with images written to one by the process that owns the files, then mapped
        from it."""
        if not self._images:
            return self._load_tables(path, stores, held)
        image = image_of(path)
        try:
            found: Tables = images.load(image)
            if set(found[1]) == {s.name for s in stores} and _indexed_as(found[0], stores):
                return found
            log.info("%s: its image holds other stores or indexes; read again", path.name)
        except FileNotFoundError:
            pass
        except images.ImageError as exc:
            log.warning("%s: %s; read again", path.name, exc)
        tables = self._load_tables(path, stores, held)
        if not self.owns_files:
            return tables
        try:
            images.save(tables, image)
            mapped: Tables = images.load(image)
        except (OSError, images.ImageError) as exc:
            log.warning("%s: no image written (%s): this process holds its tables", path.name, exc)
            return tables
        return mapped

    def _load_tables(self, path: Path, stores: tuple[Store, ...], held: Base | None) -> tuple[
        dict[str, LookupTable], dict[str, int], dict[str, int], dict[str, KeyRuns]
    ]:  # fmt: skip
        """The keyed stores of a file, read by a DuckDB instance of their own (closed after),
        so that the hub's buffer pool does not keep every row of them; every store's row
        count; each history's newest valid_from; the windows' and histories' rows indexed.
        Those `held` has are taken from it, not read again."""
        loaded, rows, newest, runs = {}, {}, {}, {}
        if held is not None:  # those declared as they were (an index is in its tables)
            kept = {s.name for s in stores if s in held.stores}
            loaded = {n: t for n, t in held.tables.items() if n in kept}
            rows = {n: r for n, r in held.rows.items() if n in kept}
            newest = {n: t for n, t in held.newest.items() if n in kept}
            runs = {n: r for n, r in held.runs.items() if n in kept}
            stores = tuple(s for s in stores if s.name not in kept)
        config: dict[str, str | bool | int | float | list[str]] = {
            "threads": 1,
            "memory_limit": self._memory,
        }
        with duckdb.connect(":memory:", config=config) as connection:
            connection.execute(f"ATTACH {literal(str(path))} AS snapshot (READ_ONLY)")
            for store in stores:
                if store.kind in ("window", "versions"):
                    found = connection.sql(
                        f"SELECT {', '.join(columns(store))} FROM snapshot.{quoted(store.name)} "
                        f"ORDER BY {', '.join(key_columns(store))}"
                    ).to_arrow_table()
                    rows[store.name] = found.num_rows
                    last = newest_of(found) if store.kind == "versions" else None
                    if last is not None:
                        newest[store.name] = last
                    integers = store.key_type != "string"
                    indexed = KeyRuns.mapped(found, integers, path.parent)
                    if indexed is not None:
                        runs[store.name] = indexed
                    continue
                table = LookupTable.load(connection, "snapshot", store)
                rows[store.name] = 0 if table is None else table.rows
                if table is None:
                    log.info("%s: keys too wide for the in-memory index", store.name)
                else:
                    loaded[store.name] = table
        return loaded, rows, newest, runs

    def read(
        self, partition: int, deltas: list[LocalLayer], stores: tuple[Store, ...]
    ) -> tuple[LayerHeader, Level]:
        """A level of `deltas`, of `stores` (their base's)."""
        try:
            return read_deltas(self.alias(partition), deltas, partition, stores)
        except (LayerError, FormatError, pa.ArrowException) as exc:
            raise SnapshotError(f"partition {partition}: {exc}") from exc

    def map(
        self,
        partition: int,
        level: LevelImage,
        deltas: list[LocalLayer],
        stores: tuple[Store, ...],
    ) -> Level:
        """The keeper's level from its image, or read from its deltas when the image is gone
        (the keeper let go of the level LEVEL_DELETE_DELAY_S ago) or unreadable."""
        try:
            found = mapped(self.alias(partition), level.path)
            lacking = [s.name for s in stores if s.name not in found.frames]
            if lacking:  # the keeper's base was opened before a reload declared them
                raise images.ImageError(f"its image has no rows of {lacking}")
        except (OSError, images.ImageError) as exc:
            log.info("partition %s: %s; its deltas read instead", partition, exc)
            found = self.read(partition, deltas, stores)[1]
        try:
            if found.image is None:  # read here; a mapped level was indexed by the keeper
                found.index(stores)
        except (duckdb.Error, pa.ArrowException) as exc:
            raise SnapshotError(f"partition {partition}: {exc}") from exc
        return found

    def share(self, partition: int, level: Level) -> Level:
        """With images, the level as every worker maps it (written once, by the keeper)."""
        if not (self._images and self.owns_files):
            return level
        path = self.folder / partition_folder(partition) / f".{level.alias}.{os.getpid()}.level"
        try:
            return shared(level, path)
        except (OSError, images.ImageError) as exc:
            log.warning("%s: no image written (%s): the workers read its deltas", path.name, exc)
            path.unlink(missing_ok=True)
            return level

    def delete_due(self, everything: bool = False) -> None:
        """Delete the images of levels let go of LEVEL_DELETE_DELAY_S ago (or all of them)."""
        now = time.monotonic()
        with self._lock:
            due = [path for at, path in self._doomed if everything or at <= now]
            self._doomed = [
                (at, path) for at, path in self._doomed if not (everything or at <= now)
            ]
        for path in due:
            path.unlink(missing_ok=True)

    def _detach(self, alias: str) -> None:
        try:
            self._connection.cursor().execute(f"DETACH {alias}")
        except duckdb.Error as exc:  # already detached, or never attached
            log.debug("detach %s: %s", alias, exc)

    def drop(self, level: Level) -> None:
        """Drop a level's tables from the hub."""
        level.drop(self._connection)

    def release(self, level: Level) -> None:
        """Drop a level no snapshot reads any more; its image, this process's own, is
        deleted LEVEL_DELETE_DELAY_S later."""
        level.drop(self._connection)
        if self.owns_files and level.image is not None:
            with self._lock:
                self._doomed.append((time.monotonic() + LEVEL_DELETE_DELAY_S, level.image))

    def close_base(self, base: Base, in_use: set[Path]) -> None:
        """Detach a base no snapshot uses and delete its files but those `in_use` (a delta
        a newer chain shares stays)."""
        self._detach(base.alias)
        if not self.owns_files:
            return
        for path in base.files - in_use:
            if not (base.keep and parse_file_name(path.name)):
                path.unlink(missing_ok=True)

    def close(self, serving: list[Path]) -> None:
        """Close the hub, and delete every level image it let go of and, when they are this
        process's own, those of the levels still `serving`."""
        self._connection.close()
        if self.owns_files:
            with self._lock:
                self._doomed += [(0.0, path) for path in serving]
        self.delete_due(everything=True)
