"""A delta layer's file (contracts/snapshot_file.py): one Arrow IPC file, every store in it.

A delta holds a few hundred rows, and is written and read once per micro-batch on every
replica: as Arrow IPC it costs well under a millisecond each way, where a DuckDB file cost
tens (bench/RESULTS.md), and a reader slices its tables out of the bytes without a copy.

The file has one row per store, `store` (utf8) and `rows` (binary): an IPC stream of the
store's rows, sorted by key (, window_start), with the store's columns (ARROW_TYPES of
snapshot_file.columns) then `_deleted` (bool; true marks a deleted table key). The schema's
metadata is the header: `partition`, `version`, `created_ms`, `format`, `kind` ("delta")
and `positions` (JSON: topic -> the next offset to read in the partition).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.project import Store
from contracts.snapshot_file import DELETED, FORMAT, Kind, check_format, columns

# snapshot_file's column types as Arrow's
ARROW_TYPES: dict[str, pa.DataType] = {
    "VARCHAR": pa.string(),
    "INTEGER": pa.int32(),
    "BIGINT": pa.int64(),
    "DOUBLE": pa.float64(),
    "BOOLEAN": pa.bool_(),
}
_LAYER = "_layer"  # which of the tables merged a row comes from (newer: higher)
_OUTER = pa.schema([("store", pa.string()), ("rows", pa.binary())])


class DeltaFileError(ValueError):
    """A file that is not a readable delta (truncated, foreign, a store of the wrong shape)."""


@dataclass(frozen=True)
class DeltaHeader:
    partition: int
    version: int
    created_ms: int
    positions: dict[str, int]  # topic -> next offset to read
    kind: Kind = "delta"
    format: int = FORMAT


def schema(store: Store) -> pa.Schema:
    """The columns of a store's rows in a delta."""
    typed = [(name, ARROW_TYPES[duck]) for name, duck in columns(store).items()]
    return pa.schema([*typed, (DELETED, pa.bool_())])


def write_delta(path: Path, header: DeltaHeader, frames: dict[str, pa.Table]) -> None:
    """Write the delta (frames: store name -> its rows, in the store's schema and order)."""
    metadata = {
        "partition": str(header.partition),
        "version": str(header.version),
        "created_ms": str(header.created_ms),
        "format": str(header.format),
        "kind": header.kind,
        "positions": json.dumps(header.positions, sort_keys=True),
    }
    streams = []
    for frame in frames.values():
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, frame.schema) as writer:
            writer.write_table(frame)
        streams.append(sink.getvalue().to_pybytes())
    outer = pa.table(
        {"store": pa.array(list(frames), pa.string()), "rows": pa.array(streams, pa.binary())},
        schema=_OUTER.with_metadata(metadata),
    )
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, outer.schema) as writer:
        writer.write_table(outer)


def read_delta(path: Path) -> tuple[DeltaHeader, dict[str, pa.Table]]:
    """The delta's header (its format checked) and its tables, by store: slices of one read
    of the file, no copy. (Not a memory map: a file truncated under a map kills the reader.)"""
    try:
        outer = pa.ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
        header = _header(outer.schema.metadata or {}, path.name)
        frames = {}
        for store, rows in zip(outer.column("store"), outer.column("rows"), strict=True):
            frames[store.as_py()] = pa.ipc.open_stream(rows.as_buffer()).read_all()
    except (pa.ArrowException, OSError) as exc:
        raise DeltaFileError(f"{path.name}: {exc}") from exc
    return header, frames


def _header(metadata: dict[bytes, bytes], what: str) -> DeltaHeader:
    text = {key.decode(): value.decode() for key, value in metadata.items()}
    try:
        found = int(text["format"])
    except (KeyError, ValueError) as exc:
        raise DeltaFileError(f"{what}: no format in its header") from exc
    check_format(found, what)
    try:
        positions = json.loads(text["positions"])
        header = DeltaHeader(
            int(text["partition"]),
            int(text["version"]),
            int(text["created_ms"]),
            {str(topic): int(offset) for topic, offset in positions.items()},
            "delta" if text["kind"] == "delta" else "base",
            found,
        )
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        raise DeltaFileError(f"{what}: header {text}: {exc}") from exc
    return header


def conforms(frame: pa.Table, store: Store) -> bool:
    """Whether a delta's table of `store` has the store's columns and types."""
    return bool(frame.schema.remove_metadata().equals(schema(store)))


def newest(tables: Sequence[pa.Table], keys: list[str]) -> pa.Table:
    """The chain's reading rule (snapshot_file.newest_rows) on delta tables of one store,
    oldest first: the newest row of each key, sorted by key."""
    if len(tables) == 1:
        return tables[0]
    layer = pa.chunked_array(
        [pa.array(np.full(t.num_rows, i, dtype=np.int32)) for i, t in enumerate(tables)],
        pa.int32(),
    )
    combined = pa.concat_tables(tables).append_column(_LAYER, layer)
    by = [*((k, "ascending") for k in keys), (_LAYER, "descending")]
    ordered = combined.take(pc.sort_indices(combined, sort_keys=by)).drop_columns([_LAYER])
    rows = ordered.num_rows
    if rows < 2:
        return ordered
    repeated = np.ones(rows - 1, dtype=bool)  # row i + 1 has row i's key
    for key in keys:
        column = ordered.column(key)
        same = pc.fill_null(pc.equal(column.slice(1), column.slice(0, rows - 1)), False)
        repeated &= same.to_numpy(zero_copy_only=False)
    return ordered.filter(np.concatenate([[True], ~repeated]))
