"""A partition's delta layers, held in memory above its base (format: contracts/snapshot_file.py).

The deltas of a chain are kept as an LSM keeps its runs: a stack of Levels, oldest first,
each the merged deltas of a stretch of the chain (per store, the newest row of every key it
changed, a deleted table key as a row with `_deleted`). A new delta is read alone into a
level of its own, so installing it costs what the delta holds, not what the chain does;
`settle` later merges the newest levels once they hold as many rows as the one below them
(a binary counter: at most log2 of the chain's deltas levels, each row merged that many
times). A lookup reads the levels newest first and the base for the keys none holds
(LayeredTable); SQL reads find each level's rows in tables of the hub named by its `alias`
(gateway/storage/sql/reads.py merges them with the base's).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from contracts.delta_file import DeltaFileError, conforms, newest, read_delta
from contracts.partitioner import Key
from contracts.project import Store
from contracts.snapshot_file import (
    DELETED,
    POSITION_TABLE,
    SNAPSHOT_TABLE,
    Kind,
    check_format,
    key_columns,
    newest_rows,
    quoted,
)
from gateway.model.queries import Prefix, Range, Row, Rows, Select, Totals
from gateway.storage.catalog import images
from gateway.storage.memory import ordered, scans, summing
from gateway.storage.memory.key_runs import KeyRuns, newest_of
from gateway.storage.memory.lookup_table import Changed, LookupTable
from gateway.storage.memory.row_select import served

LEVELS = "memory.main"  # where the hub keeps the levels' tables: its own database
MAX_LEVELS = 3  # a scan asks each level (~1.5 ms each): more would cost reads what installs save


class LayerError(Exception):
    """A layer file that cannot be served (unreadable, not the layer expected, stores missing)."""


@dataclass(frozen=True)
class LocalLayer:
    """One layer file on this node."""

    version: int
    kind: Kind
    path: Path
    # the append time of the newest record in the state up to it, from the manifest (a chain
    # found on disk at start does not know it)
    newest_append_ms: int | None = field(default=None, compare=False)
    # its publication's span, from the manifest (contracts/tracing.py): reads link to it
    traceparent: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class LayerHeader:
    offsets: dict[str, int]  # topic -> next offset to read
    created_ms: int


def read_header(
    connection: duckdb.DuckDBPyConnection, alias: str, partition: int, layer: LocalLayer
) -> LayerHeader:
    """Check that an attached file is the layer expected; its positions and creation time."""
    try:
        row = connection.execute(
            f"SELECT partition, version, created_ms, format, kind FROM {alias}.{SNAPSHOT_TABLE}"
        ).fetchone()
        if row is None or tuple(row[:2]) != (partition, layer.version) or row[4] != layer.kind:
            raise LayerError(f"its {SNAPSHOT_TABLE} row says {row}")
        check_format(row[3], layer.path.name)
        offsets = connection.execute(f'SELECT topic, "offset" FROM {alias}.{POSITION_TABLE}')
        return LayerHeader(dict(offsets.fetchall()), int(row[2]))
    except duckdb.Error as exc:
        raise LayerError(f"{layer.path.name}: {exc}") from exc


@dataclass(eq=False)
class Level:
    """The merged rows of consecutive deltas, per store sorted by key (`_deleted` last), in
    memory, indexed for lookups (key runs for windows and histories), and copied into the hub
    as tables named by `alias` on the first SQL read that needs them (Overlay.tables):
    lookups, scans, ordered pages and a key's windows and versions are served from memory,
    and a level merged away before any SQL read it is never copied (a copy at every delta was
    a third of a following node's CPU; the windows' and histories' alone, a tenth)."""

    alias: str
    frames: dict[str, pa.Table]
    tables: dict[str, LookupTable] = field(default_factory=dict)  # keyed stores' lookups
    deleted: dict[str, int] = field(default_factory=dict)  # store -> its `_deleted` rows
    newest: dict[str, int] = field(default_factory=dict)  # history -> its newest valid_from
    runs: dict[str, KeyRuns] = field(default_factory=dict)  # indexed windows and histories
    header: LayerHeader | None = None  # its newest delta's
    span: int = 1  # the deltas it merges
    image: Path | None = None  # the file it is mapped from, shared by the node's workers
    users: int = 0  # snapshots that read it (counted by the catalog)
    _copied: set[str] = field(default_factory=set)  # stores in the hub database
    _copying: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rows(self) -> int:
        return sum(frame.num_rows for frame in self.frames.values())

    def index(self, stores: Sequence[Store]) -> None:
        """Count the deleted rows, index the keyed stores and the windows, and note each
        history's stream time."""
        for store in stores:
            frame = self.frames[store.name]
            self.deleted[store.name] = int(pc.sum(frame.column(DELETED)).as_py() or 0)
            if store.kind == "versions":
                self._index_history(store, frame)
            if store.kind == "window":  # key, window_start, the columns served, _deleted
                self._index_runs(store, served(store, frame))
            if len(key_columns(store)) > 1:
                continue
            rows = served(store, frame)  # rows as queries return them
            table = LookupTable.from_arrow(rows, store.key_type != "string")
            if table is not None:
                self.tables[store.name] = table

    def _index_history(self, store: Store, frame: pa.Table) -> None:
        newest = newest_of(frame)
        if newest is not None:
            self.newest[store.name] = newest
        self._index_runs(store, frame.drop_columns([DELETED]))

    def _index_runs(self, store: Store, rows: pa.Table) -> None:
        runs = KeyRuns.from_arrow(rows, store.key_type != "string")
        if runs is not None:
            self.runs[store.name] = runs

    def relation(self, store: str) -> str:
        """The store's table in the hub: the hub's own in-memory database holds every level's
        (an ATTACH and a DETACH per level cost more than the copy)."""
        return f"{LEVELS}.{quoted(f'{self.alias}.{store}')}"

    def copy(self, cursor: duckdb.DuckDBPyConnection, store: str) -> None:
        """Make sure the store's rows are in the hub (through a cursor on it)."""
        if store in self._copied or store not in self.frames:
            return
        with self._copying:
            if store in self._copied:
                return
            cursor.from_arrow(self.frames[store]).create(self.relation(store))
            self._copied.add(store)

    def drop(self, hub: duckdb.DuckDBPyConnection) -> None:
        """Drop the level's tables from the hub (a level no snapshot reads any more)."""
        with self._copying:
            cursor = hub.cursor()
            for store in self._copied:
                cursor.execute(f"DROP TABLE IF EXISTS {self.relation(store)}")
            self._copied.clear()


def read_deltas(
    alias: str,
    deltas: Sequence[LocalLayer],
    partition: int,
    stores: Sequence[Store],
) -> tuple[LayerHeader, Level]:
    """The newest delta's header, and a level of `deltas` merged (newest wins); not indexed
    nor installed yet."""
    header: LayerHeader | None = None
    read: list[dict[str, pa.Table]] = []
    for layer in deltas:
        header, frames = _read_delta(partition, layer, stores)
        read.append(frames)
    if header is None:
        raise LayerError("a level needs at least one delta")
    if len(read) == 1:
        level = Level(alias, read[0])
    else:
        level = merged(alias, [Level("", frames) for frames in read], stores)
    level.header = header
    return header, level


@dataclass(frozen=True)
class LevelImage:
    """A level as a node's keeper shares it with its workers: the image of its tables and
    indexes, and how many deltas of the chain it merges."""

    path: Path
    span: int


def shared(level: Level, path: Path) -> Level:
    """The level, indexed, written to an image at `path` and mapped from it: every worker of
    the node maps the same pages. OSError, ImageError when it cannot be written."""
    state = (level.header, level.span, level.frames, level.tables, level.deleted, level.newest)
    images.save((*state, level.runs), path)
    return mapped(level.alias, path)


def mapped(alias: str, path: Path) -> Level:
    """A level from its image (gateway/storage/catalog/images.py); FileNotFoundError when the keeper
    let go of it, ImageError when it is not one."""
    try:
        header, span, frames, tables, deleted, newest, runs = images.load(path)
    except (TypeError, ValueError) as exc:
        raise images.ImageError(f"{path.name} is not a level's image: {exc}") from exc
    return Level(alias, frames, tables, deleted, newest, runs, header, span, path)


def _read_delta(
    partition: int, layer: LocalLayer, stores: Sequence[Store]
) -> tuple[LayerHeader, dict[str, pa.Table]]:
    """A delta file's header and its stores' rows (as stored: sorted by key, `_deleted`
    last), checked to be the layer expected."""
    try:
        header, frames = read_delta(layer.path)
    except DeltaFileError as exc:
        raise LayerError(f"cannot open {layer.path.name}: {exc}") from exc
    found = (header.partition, header.version, header.kind)
    if found != (partition, layer.version, layer.kind):
        raise LayerError(f"{layer.path.name}: its header says {found}")
    wrong = [s.name for s in stores if s.name not in frames or not conforms(frames[s.name], s)]
    if wrong:
        raise LayerError(f"{layer.path.name}: stores {wrong} are missing or of another shape")
    return LayerHeader(header.positions, header.created_ms), {
        s.name: frames[s.name] for s in stores
    }


def merged(alias: str, levels: Sequence[Level], stores: Sequence[Store]) -> Level:
    """One level of `levels` (oldest first; the newest row of each key wins), sorted by key."""
    frames = {
        store.name: newest([level.frames[store.name] for level in levels], key_columns(store))
        for store in stores
    }
    return Level(alias, frames, header=levels[-1].header, span=sum(lv.span for lv in levels))


def to_merge(levels: Sequence[Level]) -> int:
    """How many of the newest levels to merge into one (0 or 1: none): the newest run of
    levels that holds at least as many rows as the level below it, and enough of them to
    leave at most MAX_LEVELS."""
    count, rows = 1, levels[-1].rows if levels else 0
    while count < len(levels) and (
        levels[-count - 1].rows <= rows or len(levels) - count >= MAX_LEVELS
    ):
        rows += levels[-count - 1].rows
        count += 1
    return count


@dataclass(frozen=True)
class Overlay:
    """The deltas above a base, as levels (oldest first), and the newest delta's header."""

    header: LayerHeader
    levels: tuple[Level, ...]

    def deleted(self, store: str) -> int:
        """Rows marked deleted in the store's levels, together (a bound on the overlay's)."""
        return sum(level.deleted.get(store, 0) for level in self.levels)

    def runs(self, store: str) -> list[KeyRuns] | None:
        """The levels' indexes of a window store or a history, oldest first; None when one
        has none."""
        found = [level.runs.get(store) for level in self.levels]
        return None if None in found else [runs for runs in found if runs is not None]

    def newest(self, history: str) -> int | None:
        """The newest valid_from of a history's rows in the levels (None: they hold none)."""
        return max((lv.newest[history] for lv in self.levels if history in lv.newest), default=None)

    def tables(self, cursor: duckdb.DuckDBPyConnection, store: Store) -> list[str]:
        """The store's table in each level's hub database, oldest first (copied there
        through `cursor`, a cursor on the hub, if not yet)."""
        for level in self.levels:
            level.copy(cursor, store.name)
        return [level.relation(store.name) for level in self.levels]

    def table(self, cursor: duckdb.DuckDBPyConnection, store: Store) -> str:
        """The store's rows in the overlay (the newest of each key, `_deleted` last), as a
        table of the hub SQL can read."""
        tables = self.tables(cursor, store)
        if len(tables) == 1:
            return tables[0]
        branches = [f"SELECT *, {i} AS _layer FROM {t}" for i, t in enumerate(tables)]
        return f"({newest_rows(branches, key_columns(store))})"

    def lookups(self, store: str) -> list[LookupTable] | None:
        """The levels' lookup tables of a keyed store, oldest first; None when one level
        could not index its keys."""
        tables = [level.tables.get(store) for level in self.levels]
        return None if None in tables else [t for t in tables if t is not None]


class LayeredTable:
    """Lookups of a keyed store through the overlay's levels (newest first), then the base."""

    def __init__(self, base: LookupTable, levels: Sequence[LookupTable] = ()) -> None:
        self.base = base
        self.levels = levels  # oldest first
        self._changed: Changed | None = None  # the overlay as by-value reads use it, once

    @property
    def nbytes(self) -> int:
        """The memory its rows take: the base's and every level's."""
        return self.base.nbytes + sum(level.nbytes for level in self.levels)

    def select(self, store: Store, query: Select) -> Rows:
        """An ordered page from memory, or NOT_HERE (storage/memory/ordered.py)."""
        return ordered.select(store, self.base, self.changed(), query)

    def scan(self, query: Range | Prefix) -> Rows:
        """A page by key from memory, or NOT_HERE (storage/memory/scans.py)."""
        return scans.page(self.base, self.levels, query)

    def totals(self, store: Store, query: Totals) -> Row:
        """The partial totals (storage/memory/summing.py)."""
        return summing.totals(store, self.base, self.changed(), query)

    def changed(self) -> Changed:
        """The overlay's rows (newest of each key, in key order) and the base rows they
        replace, read once per snapshot."""
        if self._changed is None:
            newest: dict[Key, Row] = {}
            for level in self.levels:  # oldest first: newer rows overwrite
                newest.update((row[0], row) for row in level.all_rows())
            keys = sorted(newest)
            self._changed = Changed(
                [newest[k] for k in keys], frozenset(keys), self.base.rows_of(keys)
            )
        return self._changed

    def get(self, keys: Sequence[Key]) -> list[Row]:
        """The rows of the keys present, in no particular order."""
        rows: list[Row] = []
        rest = keys
        for level in reversed(self.levels):  # newest first
            found = level.get(rest)
            if not found:
                continue
            seen = {row[0] for row in found}
            rows.extend(row[:-1] for row in found if not row[-1])
            rest = [k for k in rest if k not in seen]
            if not rest:
                return rows
        if not rows:
            return self.base.get(rest)
        rows.extend(self.base.get(rest))
        return rows
