"""Where partition results meet: rows merged in global key order, positions merged by max.

Scans ask every partition for `limit + 1` rows past the cursor; a k-way merge of those
sorted runs gives the global page, and one more row than the page says whether another
page exists, so pagination stays exact across partitions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from gateway.positions import Position, merge, of_partition
from gateway.protocol import Answer, SubQuery

Row = list[Any]


def merged_position(parts: Iterable[tuple[SubQuery, Answer]]) -> Position:
    return merge(of_partition(q.partition, a.offsets) for q, a in parts if a.ok)


def lookup(parts: Iterable[tuple[SubQuery, Answer]]) -> dict[Any, Row]:
    """Rows of key lookups by key (the first column)."""
    return {row[0]: row for _, answer in parts if answer.ok for row in answer.rows or ()}


def page(
    parts: Iterable[tuple[SubQuery, Answer]], limit: int, windowed: bool
) -> tuple[list[Row], bool]:
    """The first `limit` rows of all partitions in (key[, window start]) order, and whether
    more rows follow."""
    runs = [answer.rows or [] for _, answer in parts if answer.ok]
    if windowed:
        merged = heapq.merge(*runs, key=lambda r: (r[0], r[1]))
    else:
        merged = heapq.merge(*runs, key=lambda r: r[0])
    rows: list[Row] = []
    for row in merged:
        if len(rows) == limit:
            return rows, True
        rows.append(row)
    return rows, False
