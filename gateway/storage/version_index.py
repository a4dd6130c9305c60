"""A history's rows indexed (a versioned store's, contracts/project.py: history_of), so that a
key as of a time costs what a lookup does instead of a DuckDB query.

The rows (valid_from, valid_to, tombstone, then the columns) are sorted by key and
valid_from; a key's versions are one run of them. The index holds each distinct key once
(a LookupTable of them: gateway/storage/lookup_table.py) with where its run starts, and
finds the version valid at a time by bisecting the run's valid_from. A base's rows are
written once to an Arrow IPC file and memory-mapped (`mapped`): the OS keeps the pages
queries touch, not the whole history, in memory; the file is unlinked at once, so it goes
with the last map of it and leaves nothing to clean up. A level's few rows stay in memory.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.partitioner import Key
from contracts.project import TOMBSTONE, VALID_FROM, VALID_TO, Store
from contracts.snapshot_file import quoted
from gateway.storage.lookup_table import LookupTable, index_keys

Version = tuple[Any, ...]  # valid_from, valid_to, tombstone, *columns


class VersionIndex:
    def __init__(self, keys: LookupTable, starts: np.ndarray, rows: pa.Table) -> None:
        self._keys = keys  # each distinct key once, sorted
        self._starts = starts  # where each key's run starts in `rows`, then the row count
        self._rows = rows
        self._valid_from = _numbers(rows.column(VALID_FROM))
        self.file_backed = False

    @classmethod
    def from_arrow(cls, rows: pa.Table, integer_keys: bool) -> VersionIndex | None:
        """Index a history's rows (key first) sorted by key and valid_from; None when the
        keys cannot be indexed (lookup_table.MAX_KEY_BYTES)."""
        keys = index_keys(rows.column(0), integer_keys)
        if keys is None:
            return None
        count = len(keys)
        starts = np.zeros(1, dtype=np.int64)
        if count:
            changes = np.flatnonzero(keys[1:] != keys[:-1]) + 1
            starts = np.concatenate([[0], changes, [count]]).astype(np.int64)
        distinct = LookupTable(keys[starts[:-1]], None, pa.table({}))
        return cls(distinct, starts, rows.remove_column(0).combine_chunks())

    @classmethod
    def mapped(cls, rows: pa.Table, integer_keys: bool, folder: Path) -> VersionIndex | None:
        """`from_arrow`, its rows written to a file in `folder` and read back mapped."""
        index = cls.from_arrow(rows, integer_keys)
        if index is None:
            return None
        path = folder / f".history-{uuid.uuid4().hex}.arrow"
        try:
            rows = index._rows
            with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, rows.schema) as writer:
                writer.write_table(rows, max_chunksize=max(rows.num_rows, 1))
            with pa.memory_map(str(path)) as source:  # its buffers keep the map after close
                mapped = pa.ipc.open_file(source).read_all()
        finally:
            os.unlink(path)
        index = cls(index._keys, index._starts, mapped)
        index.file_backed = True
        return index

    @staticmethod
    def select(store: Store) -> str:
        """The history's columns as the index reads them, for a SELECT of its table."""
        names = (VALID_FROM, VALID_TO, TOMBSTONE, *store.columns)
        return "key, " + ", ".join(quoted(n) for n in names)

    @property
    def nbytes(self) -> int:
        """What it holds in memory (a mapped file's pages are the OS's to keep or drop)."""
        held = self._keys.nbytes + self._starts.nbytes
        return held if self.file_backed else held + self._rows.nbytes

    def versions(self, key: Key, from_ms: int, to_ms: int) -> list[Version]:
        """The key's rows from the one starting last at or before `from_ms` (or its first)
        to the last starting at or before `to_ms`, by valid_from."""
        at = self._keys.bisect(key)
        if at is None or at == self._keys.bisect(key, right=True):
            return []
        start, stop = int(self._starts[at]), int(self._starts[at + 1])
        times = self._valid_from[start:stop]
        first = start + max(int(np.searchsorted(times, from_ms, side="right")) - 1, 0)
        last = start + int(np.searchsorted(times, to_ms, side="right"))
        if first >= last:
            return []
        picked = self._rows.slice(first, last - first)
        return list(zip(*(column.to_pylist() for column in picked.columns), strict=True))


def _numbers(column: pa.ChunkedArray) -> np.ndarray:
    """A never-null integer column as numpy, without a copy when it is one chunk."""
    if column.num_chunks == 1:
        numbers: np.ndarray = column.chunk(0).to_numpy(zero_copy_only=True)
        return numbers
    whole: np.ndarray = column.to_numpy()
    return whole


def newest_of(frame: pa.Table) -> int | None:
    """The newest valid_from of a history's rows (None: none)."""
    found = pc.max(frame.column(VALID_FROM)).as_py() if frame.num_rows else None
    return None if found is None else int(found)
