"""The columns of an in-memory table, each in the form that reads fastest into Python values:
numbers and booleans as numpy arrays (a null mask beside them), strings with few distinct
values as codes into a list of the values, other strings as Arrow arrays.

A lookup reads a handful of rows out of each column; Arrow's `take` costs about 60 us a
call whatever the rows, numpy's indexing a few (one value: `item(row)`, a tenth of
indexing then converting the scalar), and a dictionary-encoded Arrow column
converts each value through a scalar (five times slower than plain strings).
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

DICTIONARY_RATIO = 4  # strings with at most 1/4 distinct values are kept as codes


class Column(Protocol):
    nbytes: int

    def value(self, row: int) -> Any: ...

    def values(self, rows: np.ndarray) -> list[Any]: ...


def column_of(array: pa.ChunkedArray) -> Column:
    kind = array.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        return NumberColumn(array)
    few = pa.types.is_string(kind) and len(array) > 0
    if few and pc.count_distinct(array).as_py() <= len(array) // DICTIONARY_RATIO:
        return CodedColumn(array)
    return ArrowColumn(array)


class NumberColumn:
    def __init__(self, array: pa.ChunkedArray) -> None:
        nulls = array.is_null().to_numpy()
        self.mask: np.ndarray | None = nulls if nulls.any() else None
        filled = array.fill_null(False if pa.types.is_boolean(array.type) else 0)
        self.data: np.ndarray = filled.to_numpy()
        self.nbytes = self.data.nbytes + (0 if self.mask is None else self.mask.nbytes)

    def value(self, row: int) -> Any:
        if self.mask is not None and self.mask.item(row):
            return None
        return self.data.item(row)

    def values(self, rows: np.ndarray) -> list[Any]:
        out: list[Any] = self.data[rows].tolist()
        if self.mask is not None:
            for i in np.flatnonzero(self.mask[rows]).tolist():
                out[i] = None
        return out


class CodedColumn:
    def __init__(self, array: pa.ChunkedArray) -> None:
        encoded = pc.dictionary_encode(array).combine_chunks()
        self.names: list[Any] = [*encoded.dictionary.to_pylist(), None]  # code -1: null
        self.codes: np.ndarray = encoded.indices.fill_null(-1).to_numpy().astype(np.int32)
        self.nbytes = self.codes.nbytes + encoded.dictionary.nbytes

    def value(self, row: int) -> Any:
        return self.names[self.codes.item(row)]

    def values(self, rows: np.ndarray) -> list[Any]:
        names = self.names
        return [names[code] for code in self.codes[rows].tolist()]


class ArrowColumn:
    def __init__(self, array: pa.ChunkedArray) -> None:
        self.array = array.combine_chunks()
        self.nbytes = self.array.nbytes

    def value(self, row: int) -> Any:
        return self.array[row].as_py()

    def values(self, rows: np.ndarray) -> list[Any]:
        picked: list[Any] = self.array.take(pa.array(rows)).to_pylist()
        return picked
