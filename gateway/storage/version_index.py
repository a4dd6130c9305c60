"""A history's rows in memory (a versioned store's, contracts/project.py: history_of), so that
a key as of a time costs what a lookup does instead of a DuckDB query.

The rows (key, valid_from, valid_to, tombstone, then the columns) are kept sorted by key and
valid_from in a LookupTable (gateway/storage/lookup_table.py) whose keys repeat: a key's
versions are the run of rows between its two bisections, and the one valid at a time is
found by bisecting the run's valid_from.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.partitioner import Key
from contracts.project import TOMBSTONE, VALID_FROM, VALID_TO, Store
from contracts.snapshot_file import quoted
from gateway.model.queries import Row
from gateway.storage.columns import NumberColumn
from gateway.storage.lookup_table import LookupTable

Version = tuple[Any, ...]  # valid_from, valid_to, tombstone, *columns


class VersionIndex:
    def __init__(self, table: LookupTable, valid_from: np.ndarray) -> None:
        self._table = table
        self._valid_from = valid_from  # by sorted position
        self.newest: int | None = int(valid_from.max()) if len(valid_from) else None

    @classmethod
    def from_arrow(cls, rows: pa.Table, integer_keys: bool) -> VersionIndex | None:
        """Index a history's rows sorted by key and valid_from; None when the keys cannot
        be indexed (lookup_table.MAX_KEY_BYTES)."""
        table = LookupTable.from_arrow(rows, integer_keys)
        if table is None:
            return None
        starts = table.column(0)  # the table's own copy: valid_from is never null
        assert isinstance(starts, NumberColumn)
        return cls(table, starts.data if table.in_key_order else starts.data[table.order])

    @staticmethod
    def select(store: Store) -> str:
        """The history's columns as the index reads them, for a SELECT of its table."""
        names = (VALID_FROM, VALID_TO, TOMBSTONE, *store.columns)
        return "key, " + ", ".join(quoted(n) for n in names)

    @property
    def nbytes(self) -> int:
        return self._table.nbytes

    def versions(self, key: Key, from_ms: int, to_ms: int) -> list[Version]:
        """The key's rows from the one starting last at or before `from_ms` (or its first)
        to the last starting at or before `to_ms`, by valid_from."""
        start, stop = self._table.bisect(key), self._table.bisect(key, right=True)
        if start is None or stop is None or start == stop:
            return []
        starts = self._valid_from[start:stop]
        first = max(int(np.searchsorted(starts, from_ms, side="right")) - 1, 0)
        last = int(np.searchsorted(starts, to_ms, side="right"))
        rows: list[Row] = self._table.rows_in_order(start + first, start + last)
        return [tuple(row[1:]) for row in rows]


def newest_of(frame: pa.Table) -> int | None:
    """The newest valid_from of a history's rows (None: none)."""
    found = pc.max(frame.column(VALID_FROM)).as_py() if frame.num_rows else None
    return None if found is None else int(found)
