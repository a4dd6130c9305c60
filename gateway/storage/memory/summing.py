"""Totals from memory: a keyed store's partials (by_value.totals' row: count(*), then per
column its count of values, sum, min and max) folded over the in-memory columns with numpy,
the filter read as a mask (gateway/storage/memory/masks.py), the base's rows the overlay replaces or
deletes left out and the overlay's rows that pass added. The same row SQL would give, in a
fraction of its time: no statement, no projection, one pass per column.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from contracts.project import FieldType, Store
from gateway.model.filters import NUMBERS, ORDERED, field_index, predicate
from gateway.model.queries import Row, Totals
from gateway.storage.memory.columns import ArrowColumn, CodedColumn, Column, NumberColumn
from gateway.storage.memory.lookup_table import Changed, LookupTable
from gateway.storage.memory.masks import mask

EXACT_INT64 = 2**62  # an int64 sum whose float estimate stays below this cannot overflow


def totals(store: Store, base: LookupTable, changed: Changed, query: Totals) -> Row:
    keep = np.ones(base.rows, bool)
    fresh = [row[:-1] for row in changed.rows if not row[-1]]
    if query.where is not None:
        keep = mask(query.where, base, store)(np.arange(base.rows))
        passes = predicate(query.where, lambda field: field_index(store, field))
        fresh = [row for row in fresh if passes(row)]
    keep[changed.replaced] = False
    partial: Row = [int(keep.sum()) + len(fresh)]
    for i, kind in enumerate(store.columns.values()):
        values = [row[1 + i] for row in fresh if row[1 + i] is not None]
        partial += _fold(_column_totals(base.column(i), kind, keep), values, kind)
    return partial


def _column_totals(column: Column, kind: FieldType, keep: np.ndarray) -> list[Any]:
    """count, sum, min, max of the kept rows' values of one column."""
    if isinstance(column, NumberColumn):
        valid = keep if column.mask is None else keep & ~column.mask
        data = column.data[valid]
        if kind not in NUMBERS or not len(data):
            return [len(data), None, None, None]
        return [len(data), _sum(data, kind), data.min().item(), data.max().item()]
    if isinstance(column, CodedColumn):
        # rows per code, the nulls' (-1) first: the values present, without sorting rows
        counts = np.bincount(column.codes[keep] + 1, minlength=len(column.names))
        present = [column.names[c] for c in np.flatnonzero(counts[1:]).tolist()]
        count = int(counts[1:].sum())
        return [count, None, min(present, default=None), max(present, default=None)]
    assert isinstance(column, ArrowColumn)
    kept = column.array.filter(pa.array(keep))
    extremes = pc.min_max(kept)
    return [len(kept) - kept.null_count, None, extremes["min"].as_py(), extremes["max"].as_py()]


def _sum(data: np.ndarray, kind: FieldType) -> float | str | None:
    """A partial sum: a double's when finite, an integer column's exact as decimal text
    (queries.Totals)."""
    if kind == "double":
        total = float(data.sum())
        return total if np.isfinite(total) else None
    if abs(float(data.sum(dtype=np.float64))) < EXACT_INT64:
        return str(int(data.sum(dtype=np.int64)))
    return str(sum(data.tolist()))  # exact, past what int64 holds


def _fold(base: list[Any], values: list[Any], kind: FieldType) -> list[Any]:
    """The base's count, sum, min, max with the overlay's values added."""
    if not values:
        return base
    count, total, low, high = base
    if kind == "double":
        if total is not None or not count:  # else the base's sum is already not finite
            total = (total or 0.0) + sum(values)
            total = total if np.isfinite(total) else None
    elif kind in NUMBERS:
        total = str(int(total or 0) + sum(values))
    if kind in ORDERED:
        low = min(values if low is None else [low, *values])
        high = max(values if high is None else [high, *values])
    return [count + len(values), total, low, high]
