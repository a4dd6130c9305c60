"""A partition's delta layers, held in memory above its base (format: contracts/snapshot_file.py).

The deltas of a chain are merged as they arrive into one Overlay: per store, the newest row of
every key changed since the base, a deleted table key as a row with `_deleted`. A lookup reads
the overlay first and the base for the keys it does not hold (LayeredTable); SQL reads find
the overlay's rows in an in-memory database of the hub, named by `alias`
(gateway/storage/execution.py merges them with the base's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from contracts.partitioner import Key
from contracts.project import Store
from contracts.snapshot_file import (
    DELETED,
    POSITION_TABLE,
    SNAPSHOT_TABLE,
    Kind,
    check_format,
    key_columns,
    literal,
    newest_rows,
    quoted,
)
from contracts.snapshot_file import columns as stored_columns
from gateway.model.queries import Row, Select, Totals
from gateway.storage import ordered, summing
from gateway.storage.lookup_table import Changed, LookupTable
from gateway.storage.row_select import columns


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


@dataclass
class Overlay:
    """The merged deltas above a base: their rows per store (sorted by key, `_deleted` last),
    in memory and in the hub database `alias`."""

    alias: str
    header: LayerHeader  # the newest delta's
    frames: dict[str, pa.Table]
    tables: dict[str, LookupTable] = field(default_factory=dict)  # keyed stores' lookups
    deleted: dict[str, int] = field(default_factory=dict)  # store -> its `_deleted` rows

    @classmethod
    def build(
        cls,
        alias: str,
        previous: Overlay | None,
        deltas: list[LocalLayer],
        partition: int,
        stores: list[Store],
        connection: duckdb.DuckDBPyConnection,
    ) -> Overlay:
        """`previous` with `deltas` merged on top (newest wins), read through `connection`
        (a DuckDB instance of its own, not the hub); not installed yet."""
        frames = dict(previous.frames) if previous else {}
        header = previous.header if previous else None
        for layer in deltas:
            try:
                connection.execute(f"ATTACH {literal(str(layer.path))} AS delta (READ_ONLY)")
            except duckdb.Error as exc:
                raise LayerError(f"cannot open {layer.path.name}: {exc}") from exc
            try:
                header = read_header(connection, "delta", partition, layer)
                for store in stores:
                    frames[store.name] = _merged(connection, store, frames.get(store.name))
            except duckdb.Error as exc:
                raise LayerError(f"{layer.path.name}: {exc}") from exc
            finally:
                connection.execute("DETACH delta")
        if header is None:
            raise LayerError("an overlay needs at least one delta")
        return cls(alias, header, frames)

    def install(self, hub: duckdb.DuckDBPyConnection, stores: list[Store]) -> None:
        """Copy the frames into the hub database `alias` and index the keyed stores."""
        cursor = hub.cursor()
        cursor.execute(f"ATTACH ':memory:' AS {self.alias}")
        for store in stores:
            frame = self.frames[store.name]
            self.deleted[store.name] = int(pc.sum(frame.column(DELETED)).as_py() or 0)
            cursor.register("incoming", frame)
            try:
                cursor.execute(f'CREATE TABLE {self.alias}."{store.name}" AS FROM incoming')
            finally:
                cursor.unregister("incoming")
            if store.kind != "window":
                select = ", ".join(columns(store))  # rows as queries return them
                rows = cursor.sql(
                    f'SELECT {select}, {DELETED} FROM {self.alias}."{store.name}"'
                ).to_arrow_table()
                table = LookupTable.from_arrow(rows, store.key_type != "string")
                if table is not None:
                    self.tables[store.name] = table


def _merged(
    connection: duckdb.DuckDBPyConnection, store: Store, previous: pa.Table | None
) -> pa.Table:
    """The attached delta's rows of a store (as stored) over `previous` (newest wins), sorted
    by key."""
    deleted = DELETED if store.kind == "table" else f"false AS {DELETED}"
    select = f"SELECT {', '.join(quoted(c) for c in stored_columns(store))}, {deleted}"
    keys = ", ".join(quoted(k) for k in key_columns(store))
    newest = f'{select} FROM delta."{store.name}"'
    if previous is None:
        sql = f"{newest} ORDER BY {keys}"
    else:
        connection.register("previous", previous)
        branches = ["SELECT *, 0 AS _layer FROM previous", f"SELECT *, 1 AS _layer FROM ({newest})"]
        sql = f"{newest_rows(branches, key_columns(store))} ORDER BY {keys}"
    try:
        return connection.sql(sql).to_arrow_table()
    finally:
        if previous is not None:
            connection.unregister("previous")


class LayeredTable:
    """Lookups of a keyed store through the overlay, then the base."""

    def __init__(self, base: LookupTable, overlay: LookupTable | None) -> None:
        self.base = base
        self.overlay = overlay
        self._changed: Changed | None = None  # the overlay as by-value reads use it, once

    def select(self, store: Store, query: Select) -> list[Row] | None:
        """An ordered page from memory, or None when SQL must answer (storage/ordered.py)."""
        return ordered.select(store, self.base, self.changed(), query)

    def totals(self, store: Store, query: Totals) -> Row:
        """The partial totals (storage/summing.py)."""
        return summing.totals(store, self.base, self.changed(), query)

    def changed(self) -> Changed:
        """The overlay's rows and the base rows they replace, read once per snapshot."""
        if self._changed is None:
            rows = [] if self.overlay is None else self.overlay.all_rows()
            keys = [row[0] for row in rows]
            self._changed = Changed(rows, frozenset(keys), self.base.rows_of(keys))
        return self._changed

    def get(self, keys: Sequence[Key]) -> list[Row]:
        """The rows of the keys present, in no particular order."""
        if self.overlay is None:
            return self.base.get(keys)
        changed = self.overlay.get(keys)
        if not changed:
            return self.base.get(keys)
        seen = {row[0] for row in changed}
        rest = [k for k in keys if k not in seen]
        rows = self.base.get(rest) if rest else []
        rows.extend(row[:-1] for row in changed if not row[-1])
        return rows
