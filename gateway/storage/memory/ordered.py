"""Ordered pages from memory: a Select ordered by one indexed column (then by key) walks the
base's rows in that column's sorted order (LookupTable.sorted_by), testing the filter on
chunks of rows over the columns (gateway/storage/memory/masks.py), skipping the keys the overlay
replaced or deleted, and merges in the overlay's rows that pass. A walk that tests
WALK_LIMIT rows without filling its page gives up (NOT_HERE): a filter that rare is answered
by SQL, which scans once instead.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Callable
from typing import Any

import numpy as np

from contracts.conditions import KEY
from contracts.project import Store
from gateway.model.filters import Sort, field_index, predicate
from gateway.model.merging import by_value
from gateway.model.queries import NOT_HERE, Row, Rows, Select
from gateway.storage.memory.lookup_table import Changed, LookupTable
from gateway.storage.memory.masks import Mask, mask

FIRST_CHUNK = 64  # rows tested at the first step of a walk; each step tests twice the last
WALK_LIMIT = 65_536  # rows a walk may test before SQL is the cheaper way


def indexed(store: Store, query: Select) -> tuple[str, bool] | None:
    """The (column, descending) a Select is ordered by, when memory can answer it: one
    indexed column, then the key."""
    order = query.order
    if len(order) == 2 and order[1] == Sort(KEY) and order[0].field in store.index:
        return order[0].field, order[0].descending
    return None


def select(store: Store, base: LookupTable, changed: Changed, query: Select) -> Rows:
    """The page, or NOT_HERE when memory cannot answer it (not indexed, or a walk too long)."""
    by = indexed(store, query)
    rows = base.sorted_by.get(by) if by else None
    if rows is None:
        return NOT_HERE
    sort_key = by_value(store, query.order)
    passes = _passes(store, query)
    fresh = [row[:-1] for row in changed.rows if not row[-1] and passes(row[:-1])]
    start = 0
    if query.after is not None:
        after = sort_key(_as_row(store, query.order, query.after))
        start = bisect_right(_Keys(base, rows, sort_key), after)
        fresh = [row for row in fresh if sort_key(row) > after]
    keep = None if query.where is None else mask(query.where, base, store)
    kept = _walk(base, rows[start:], query.limit, keep, changed.keys)
    if kept is NOT_HERE:
        return NOT_HERE
    fresh.sort(key=sort_key)
    merged = heapq.merge(kept, fresh, key=sort_key)
    return [row for _, row in zip(range(query.limit), merged, strict=False)]


def _walk(
    base: LookupTable, rows: np.ndarray, limit: int, keep: Mask | None, shadowed: frozenset[Any]
) -> Rows:
    """The first `limit` rows of `rows` that `keep` keeps and the overlay does not shadow,
    read in chunks that double; NOT_HERE past WALK_LIMIT rows."""
    found: list[Row] = []
    at, step = 0, max(FIRST_CHUNK, limit)
    while len(found) < limit and at < len(rows):
        if at >= WALK_LIMIT:
            return NOT_HERE
        chunk = rows[at : at + step]
        if keep is not None:
            chunk = chunk[keep(chunk)]
        # at most len(shadowed) of these are dropped: the rest of the chunk is never needed
        for row in base.rows_at(chunk[: limit - len(found) + len(shadowed)]):
            if row[0] not in shadowed:
                found.append(row)
                if len(found) == limit:
                    break
        at, step = at + step, step * 2
    return found


def _passes(store: Store, query: Select) -> Callable[[Row], bool]:
    if query.where is None:
        return lambda row: True
    return predicate(query.where, lambda field: field_index(store, field))


def _as_row(store: Store, order: tuple[Sort, ...], values: tuple[Any, ...]) -> Row:
    """A row holding a cursor's order values where its fields go."""
    row: Row = [None] * (1 + len(store.columns))
    for sort, value in zip(order, values, strict=True):
        row[field_index(store, sort.field)] = value
    return row


class _Keys:
    """The sort keys of a table's rows in an order, read as bisect asks for them."""

    def __init__(self, base: LookupTable, rows: Any, sort_key: Callable[[Row], Any]) -> None:
        self.base, self.rows, self.sort_key = base, rows, sort_key

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, at: int) -> Any:
        (row,) = self.base.rows_at(self.rows[at : at + 1])
        return self.sort_key(row)
