"""A keyed store's rows in one snapshot, held in memory so that point and batch lookups
cost microseconds instead of a DuckDB query each.

The key index is a sorted numpy array (int64 for integer keys, fixed-width UTF-8 bytes for
string keys) searched with `searchsorted`; the other columns stay in the order the snapshot
stores them, each in the form that reads fastest (storage/memory/columns.py). String keys wider
than MAX_KEY_BYTES, or ending in NUL (numpy's fixed-width bytes drop trailing NULs), are not
indexed: such a store keeps answering lookups with DuckDB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.partitioner import Key, ascii_keys
from contracts.project import Store
from gateway.model.queries import Row
from gateway.storage.memory.columns import Column, column_of
from gateway.storage.memory.row_select import columns

MAX_KEY_BYTES = 64  # wider string keys are looked up with DuckDB (index memory is n x width)
_INT64 = (-(2**63), 2**63 - 1)


Sorted = dict[tuple[str, bool], np.ndarray]  # (column, descending) -> row numbers in order


@dataclass(frozen=True)
class Changed:
    """An overlay as reads by value use it: its rows (key, columns, deleted flag), their
    keys, and the base's row numbers those keys replace."""

    rows: list[Row]
    keys: frozenset[Key]
    replaced: np.ndarray


class LookupTable:
    def __init__(
        self,
        sorted_keys: np.ndarray,
        order: np.ndarray | None,
        values: pa.Table,
        sorted_by: Sorted | None = None,
    ):
        self._keys = sorted_keys
        self._order = order  # row number of each sorted key; None: rows are in key order
        # every column but the key (the index holds the keys)
        self._columns = [column_of(column) for column in values.columns]
        self._strings = sorted_keys.dtype.kind == "S"
        self.rows = values.num_rows
        # the row numbers by an indexed column, nulls last, ties by key (ascending)
        self.sorted_by: Sorted = sorted_by or {}
        self._key_at: np.ndarray | None = None  # sorted position of each row, when not in order

    @classmethod
    def load(
        cls, connection: duckdb.DuckDBPyConnection, alias: str, store: Store
    ) -> LookupTable | None:
        """Read a keyed store of an attached snapshot; None when its keys cannot be indexed."""
        select = ", ".join(columns(store))
        table = connection.sql(f'SELECT {select} FROM {alias}."{store.name}"').to_arrow_table()
        return cls.from_arrow(table, store.key_type != "string", store.index)

    @classmethod
    def from_arrow(
        cls, table: pa.Table, integer_keys: bool, index: tuple[str, ...] = ()
    ) -> LookupTable | None:
        """Index rows whose first column is the key, and sort them by each `index` column;
        None when the keys cannot be indexed."""
        keys = index_keys(table.column(0), integer_keys)
        if keys is None:
            return None
        order: np.ndarray | None = None
        if len(keys) > 1 and not bool(np.all(keys[:-1] < keys[1:])):
            order = np.argsort(keys, kind="stable")
            keys = keys[order]
        key = table.column_names[0]
        sorted_by = {
            (column, descending): _sorted(table, column, key, descending)
            for column in index
            for descending in (False, True)
        }
        return cls(keys, order, table.remove_column(0), sorted_by)

    @property
    def nbytes(self) -> int:
        extra = 0 if self._order is None else self._order.nbytes
        extra += sum(rows.nbytes for rows in self.sorted_by.values())
        return int(self._keys.nbytes + extra + sum(c.nbytes for c in self._columns))

    def rows_at(self, rows: np.ndarray) -> list[Row]:
        """The rows of these row numbers, in that order."""
        if self._order is None:
            return self._rows(rows)
        if self._key_at is None:
            self._key_at = np.argsort(self._order)
        return self._rows(self._key_at[rows])

    def rows_of(self, keys: Sequence[Key]) -> np.ndarray:
        """The row numbers of the keys present."""
        positions = self._find_many(keys)
        return positions if self._order is None else self._order[positions]

    def column(self, index: int) -> Column:
        """The column of Store.columns[index]."""
        return self._columns[index]

    def keys_at(self, rows: np.ndarray) -> list[Key]:
        """The keys of these row numbers, in that order."""
        if self._order is not None:
            if self._key_at is None:
                self._key_at = np.argsort(self._order)
            rows = self._key_at[rows]
        keys: list[Any] = self._keys[rows].tolist()
        return [k.decode() for k in keys] if self._strings else keys

    def all_rows(self) -> list[Row]:
        return self._rows(np.arange(self.rows))

    def bisect(self, key: Key, right: bool = False) -> int | None:
        """Where `key` goes among the sorted keys (after those equal to it when `right`);
        None when the index cannot compare it (a string with a lone surrogate or ending in
        NUL, which numpy's fixed-width bytes would misread; a key of the other kind)."""
        if self._strings:
            if not isinstance(key, str):
                return None
            try:
                probe: Any = key.encode()
            except UnicodeEncodeError:
                return None
            if probe.endswith(b"\x00"):
                return None
        elif isinstance(key, int) and not isinstance(key, bool):
            probe = min(max(key, _INT64[0]), _INT64[1])
            if probe != key:  # past what int64 holds: before or after every key
                return 0 if key < probe else len(self._keys)
        else:
            return None
        return int(self._keys.searchsorted(probe, side="right" if right else "left"))

    def rows_in_order(self, start: int, stop: int) -> list[Row]:
        """The rows at sorted positions [start, stop), in key order."""
        return self._rows(np.arange(start, min(stop, len(self._keys))))

    def get(self, keys: Sequence[Key]) -> list[Row]:
        """The rows of the keys present (absent keys have none), in no particular order."""
        if len(keys) == 1:
            found = self._find_one(keys[0])
            return [] if found is None else [self._row(found)]
        return self._rows(self._find_many(keys))

    def _find_one(self, key: Key) -> int | None:
        """The position of a key in the sorted index, or None."""
        probe = self._probe(key)
        if probe is None:
            return None
        at = int(self._keys.searchsorted(probe))
        if at == len(self._keys) or self._keys.item(at) != probe:
            return None
        return at

    def _find_many(self, keys: Sequence[Key]) -> np.ndarray:
        wanted = self._probes(list(dict.fromkeys(keys)))
        # sorted: each search starts from where the last one ended, on memory it has just
        # read (a partition's index is mostly out of cache when a request comes)
        wanted.sort()
        if len(wanted) == 0:
            return np.empty(0, dtype=np.int64)
        at = self._keys.searchsorted(wanted)
        inside = at < len(self._keys)
        at, wanted = at[inside], wanted[inside]
        found: np.ndarray = at[self._keys[at] == wanted]
        return found

    def _probes(self, keys: Sequence[Key]) -> np.ndarray:
        """_probe of many keys, those it refuses left out; ASCII strings that all fit at
        once, numpy encoding them (most keys: half the time of encoding each in Python)."""
        if self._strings and _ascii_fitting(keys, self._keys.dtype.itemsize):
            return np.array(keys, dtype=self._keys.dtype)
        probes = [p for p in map(self._probe, keys) if p is not None]
        return np.array(probes, dtype=self._keys.dtype)

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

    def _row(self, at: int) -> Row:
        index = at if self._order is None else self._order.item(at)
        key = self._keys.item(at)
        return [key.decode() if self._strings else key, *(c.value(index) for c in self._columns)]

    def _rows(self, positions: np.ndarray) -> list[Row]:
        if len(positions) == 0:
            return []
        keys = self._keys[positions].tolist()
        if self._strings:
            keys = [k.decode() for k in keys]
        picked = positions if self._order is None else self._order[positions]
        values = [column.values(picked) for column in self._columns]
        return [list(row) for row in zip(keys, *values, strict=True)]


def _ascii_fitting(keys: Sequence[Key], width: int) -> bool:
    """Whether every key is an ASCII str of at most `width` characters without NUL: what
    numpy's fixed-width bytes hold as they are (it truncates longer ones, and drops trailing
    NULs)."""
    joined = ascii_keys(keys)
    if joined is None or "\x00" in joined:
        return False
    return max(map(len, cast("Sequence[str]", keys))) <= width


def _sorted(table: pa.Table, column: str, key: str, descending: bool) -> np.ndarray:
    """The row numbers of `table` by `column` (nulls last either way), ties by key."""
    direction = "descending" if descending else "ascending"
    sort_keys = [(column, direction, "at_end"), (key, "ascending", "at_end")]
    rows = pc.sort_indices(table, sort_keys=sort_keys)
    ordered: np.ndarray = rows.to_numpy().astype(np.int32 if table.num_rows < 2**31 else np.int64)
    return ordered


def index_keys(keys: pa.ChunkedArray, integers: bool) -> np.ndarray | None:
    """The keys as a numpy array, built from Arrow's buffers (no Python object per key)."""
    if integers:
        integer_keys: np.ndarray = keys.to_numpy().astype(np.int64)
        return integer_keys
    array = keys.combine_chunks().cast(pa.string())
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int32)[
        array.offset : array.offset + len(array) + 1
    ]
    data = np.frombuffer(array.buffers()[2] or b"", dtype=np.uint8)[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets)
    width = int(lengths.max(initial=0)) or 1
    if width > MAX_KEY_BYTES:
        return None
    rows = np.zeros((len(array), width), dtype=np.uint8)
    rows[np.arange(width) < lengths[:, None]] = data  # row-major: each key's bytes in order
    ends = rows[np.arange(len(array)), np.maximum(lengths - 1, 0)]
    if bool(np.any((ends == 0) & (lengths > 0))):
        return None  # a key ending in NUL: numpy's fixed-width bytes would drop it
    return rows.view(f"S{width}").ravel()
