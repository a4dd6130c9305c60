"""Pages by key from memory: a Range or Prefix of a keyed store reads the base and each level
of the overlay from the page's first key on, in key order, and merges them as an LSM read
does: of each key, the newest level's row wins, and a deleted row hides the key. The rows
SQL would give (storage/sql/reads.py), without a statement per level: a scan costs its page,
however many levels there are.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Sequence

from contracts.partitioner import Key
from gateway.model.queries import NOT_HERE, Prefix, Range, Row, Rows
from gateway.storage.memory.lookup_table import LookupTable

FIRST_CHUNK = 16  # rows read from a source at a time at first; each read takes twice the last

Span = tuple[int, int]  # sorted positions [start, stop) of a table


def page(base: LookupTable, levels: Sequence[LookupTable], query: Range | Prefix) -> Rows:
    """The page, or NOT_HERE when a bound is one the index cannot compare (SQL answers).
    `levels` are the overlay's, oldest first; their rows end with the deleted flag."""
    sources: list[Iterator[tuple[Key, int, Row]]] = []
    for rank, table in enumerate([base, *levels]):
        span = _span(table, query)
        if span is None:
            return NOT_HERE
        sources.append(_rows(table, span, rank, deleted=rank > 0))
    inside = _inside(query)
    found: list[Row] = []
    last: object = _NONE
    for key, _, row in heapq.merge(*sources, key=lambda item: (item[0], -item[1])):
        if key == last:
            continue  # an older row of a key already decided
        last = key
        if not inside(key):
            break
        if row is not _DELETED:
            found.append(row)
            if len(found) == query.limit:
                break
    return found


_NONE = object()
_DELETED: Row = []


def _span(table: LookupTable, query: Range | Prefix) -> Span | None:
    """Where the page's keys lie among a table's sorted keys (a prefix's end is found by
    reading: `_inside`); None when a bound cannot be compared."""
    bounds: tuple[tuple[Key | None, bool, bool], ...]
    if isinstance(query, Prefix):
        bounds = ((query.prefix, False, False), (query.after, True, False))
    else:
        bounds = ((query.low, False, False), (query.after, True, False), (query.high, True, True))
    start, stop = 0, table.rows
    for bound, right, is_stop in bounds:
        if bound is None:
            continue
        at = table.bisect(bound, right)
        if at is None:
            return None
        if is_stop:
            stop = min(stop, at)
        else:
            start = max(start, at)
    return start, stop


def _inside(query: Range | Prefix) -> Callable[[Key], bool]:
    """Whether a key at or past the page's start is still inside its span."""
    if isinstance(query, Prefix):
        prefix = query.prefix
        return lambda key: isinstance(key, str) and key.startswith(prefix)
    return lambda key: True  # a range's stop is found by bisect


def _rows(
    table: LookupTable, span: Span, rank: int, deleted: bool
) -> Iterator[tuple[Key, int, Row]]:
    """The table's rows in the span, in key order, read in chunks that double; a deleted
    row as _DELETED."""
    at, stop = span
    step = FIRST_CHUNK
    while at < stop:
        for row in table.rows_in_order(at, min(at + step, stop)):
            if deleted:
                yield row[0], rank, _DELETED if row[-1] else row[:-1]
            else:
                yield row[0], rank, row
        at, step = at + step, step * 2
