"""A keyed store's rows in one snapshot, held in memory so that point and batch lookups
cost microseconds instead of a DuckDB query each.

The key index is a sorted numpy array (int64 for integer keys, fixed-width UTF-8 bytes for
string keys) searched with `searchsorted`; the rows stay in Arrow columns, in the order the
snapshot stores them. String keys wider than MAX_KEY_BYTES, or ending in NUL (numpy's
fixed-width bytes drop trailing NULs), are not indexed: such a store keeps answering
lookups with DuckDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from contracts.partitioner import Key
from contracts.project import Store
from gateway.queries import Row
from gateway.row_select import columns

MAX_KEY_BYTES = 64  # wider string keys are looked up with DuckDB (index memory is n x width)
_INT64 = (-(2**63), 2**63 - 1)


class LookupTable:
    def __init__(self, sorted_keys: np.ndarray, order: np.ndarray | None, table: pa.Table):
        self._keys = sorted_keys
        self._order = order  # row number of each sorted key; None: rows are in key order
        self._columns = table.columns
        self._strings = sorted_keys.dtype.kind == "S"
        self.rows = table.num_rows

    @classmethod
    def load(
        cls, cursor: duckdb.DuckDBPyConnection, alias: str, store: Store
    ) -> LookupTable | None:
        """Read a keyed store of an attached snapshot; None when its keys cannot be indexed."""
        select = ", ".join(columns(store))
        table = cursor.sql(f'SELECT {select} FROM {alias}."{store.name}"').to_arrow_table()
        keys = _index_keys(table.column(0).to_pylist(), store.key_type != "string")
        if keys is None:
            return None
        order: np.ndarray | None = None
        if len(keys) > 1 and not bool(np.all(keys[:-1] < keys[1:])):
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
        return cls(keys, order, table)

    @property
    def nbytes(self) -> int:
        extra = 0 if self._order is None else self._order.nbytes
        return int(self._keys.nbytes + extra + sum(c.nbytes for c in self._columns))

    def get(self, keys: Sequence[Key]) -> list[Row]:
        """The rows of the keys present (absent keys have none), in no particular order."""
        if len(keys) == 1:
            found = self._find_one(keys[0])
            return [] if found is None else [self._row(found)]
        return self._rows(self._find_many(keys))

    def _find_one(self, key: Key) -> int | None:
        probe = self._probe(key)
        if probe is None:
            return None
        at = int(np.searchsorted(self._keys, probe))
        if at == len(self._keys) or self._keys[at] != probe:
            return None
        return at if self._order is None else int(self._order[at])

    def _find_many(self, keys: Sequence[Key]) -> np.ndarray:
        probes = [p for p in map(self._probe, dict.fromkeys(keys)) if p is not None]
        if not probes:
            return np.empty(0, dtype=np.int64)
        wanted = np.array(probes, dtype=self._keys.dtype)
        at = np.searchsorted(self._keys, wanted)
        inside = at < len(self._keys)
        at, wanted = at[inside], wanted[inside]
        found: np.ndarray = at[self._keys[at] == wanted]
        return found if self._order is None else self._order[found]

    def _probe(self, key: Key) -> Any:
        """The key as the index stores it, or None when no indexed key can equal it."""
        if not self._strings:
            ok = isinstance(key, int) and _INT64[0] <= key <= _INT64[1]
            return key if ok else None
        if not isinstance(key, str):
            return None
        try:
            raw = key.encode()
        except UnicodeEncodeError:  # a lone surrogate: no stored key has one
            return None
        if len(raw) > self._keys.dtype.itemsize or raw.endswith(b"\x00"):
            return None
        return raw

    def _row(self, index: int) -> Row:
        return [column[index].as_py() for column in self._columns]

    def _rows(self, indices: np.ndarray) -> list[Row]:
        if len(indices) == 0:
            return []
        picked = pa.array(indices)
        values = [column.take(picked).to_pylist() for column in self._columns]
        return [list(row) for row in zip(*values, strict=True)]


def _index_keys(keys: list[Any], integers: bool) -> np.ndarray | None:
    if integers:
        return np.array(keys, dtype=np.int64)
    raw = [k.encode() for k in keys]
    if any(len(r) > MAX_KEY_BYTES or r.endswith(b"\x00") for r in raw):
        return None
    width = max((len(r) for r in raw), default=1) or 1
    return np.array(raw, dtype=f"S{width}")
