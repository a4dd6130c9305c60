"""The rows of a store whose rows are identified by a key and a time, indexed, so that one
key's rows in a span of time cost what a lookup does instead of a DuckDB query: a window
store's (key, window_start) and a versioned store's history (key, valid_from:
contracts/project.py: history_of).

The rows (the time, then the rest as row_select.columns reads them) are sorted by key and
time; a key's rows are one run of them. The index holds each distinct key once (a
LookupTable of them: gateway/storage/memory/lookup_table.py) with where its run starts, and finds
times by bisecting the run's. A base's rows are written once to an Arrow IPC file and
memory-mapped (`mapped`): the OS keeps the pages queries touch, not every row, in memory;
the file is unlinked at once, so it goes with the last map of it and leaves nothing to clean
up. A level's few rows stay in memory.
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
from contracts.project import VALID_FROM
from gateway.storage.memory.lookup_table import LookupTable, index_keys

Timed = tuple[Any, ...]  # a row without its key: the time first


class KeyRuns:
    def __init__(self, keys: LookupTable, starts: np.ndarray, rows: pa.Table) -> None:
        self._keys = keys  # each distinct key once, sorted
        self._starts = starts  # where each key's run starts in `rows`, then the row count
        self._rows = rows
        self._times = _numbers(rows.column(0))
        self._columns = _arrays(rows)
        self.file_backed = False

    @classmethod
    def from_arrow(cls, rows: pa.Table, integer_keys: bool) -> KeyRuns | None:
        """Index rows (the key, the time, the rest) sorted by key and time; None when the
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
    def mapped(cls, rows: pa.Table, integer_keys: bool, folder: Path) -> KeyRuns | None:
        """`from_arrow`, its rows written to a file in `folder` and read back mapped."""
        index = cls.from_arrow(rows, integer_keys)
        if index is None:
            return None
        path = folder / f".runs-{uuid.uuid4().hex}.arrow"
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

    def __getstate__(self) -> dict[str, Any]:
        """As an image holds it (gateway/storage/catalog/images.py): the times and columns
        are the rows' own."""
        derived = ("_times", "_columns")
        return {name: value for name, value in self.__dict__.items() if name not in derived}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._times = _numbers(self._rows.column(0))
        self._columns = _arrays(self._rows)

    @property
    def nbytes(self) -> int:
        """What it holds in memory (a mapped file's pages are the OS's to keep or drop)."""
        held = self._keys.nbytes + self._starts.nbytes
        return held if self.file_backed else held + self._rows.nbytes

    def versions(self, key: Key, from_ms: int, to_ms: int) -> list[Timed]:
        """A history's: the key's rows from the one starting last at or before `from_ms`
        (or its first) to the last starting at or before `to_ms`, by time."""
        run = self._run(key)
        if run is None:
            return []
        start, times = run
        first = start + max(int(times.searchsorted(from_ms, side="right")) - 1, 0)
        return self._rows_of(first, start + int(times.searchsorted(to_ms, side="right")))

    def between(self, key: Key, from_ms: int, to_ms: int) -> list[Timed]:
        """The key's rows whose time is in [from_ms, to_ms], by time (a key's windows)."""
        run = self._run(key)
        if run is None:
            return []
        start, times = run
        first = start + int(times.searchsorted(from_ms, side="left"))
        return self._rows_of(first, start + int(times.searchsorted(to_ms, side="right")))

    def _run(self, key: Key) -> tuple[int, np.ndarray] | None:
        """Where the key's run starts, and its times (None: the key has no rows)."""
        at = self._keys.bisect(key)
        if at is None or at == self._keys.bisect(key, right=True):
            return None
        start, stop = int(self._starts[at]), int(self._starts[at + 1])
        return start, self._times[start:stop]

    def _rows_of(self, first: int, last: int) -> list[Timed]:
        if first >= last:
            return []
        count = last - first
        return list(zip(*(c.slice(first, count).to_pylist() for c in self._columns), strict=True))


def _arrays(rows: pa.Table) -> list[pa.Array | pa.ChunkedArray]:
    """The rows' columns, each one array when it is one chunk: slicing an array costs half
    of slicing the table (a key's few rows are read per query)."""
    return [c.chunk(0) if c.num_chunks == 1 else c for c in rows.columns]


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
