"""Where partition results meet: rows merged in global key order, positions merged by max.

Scans ask every partition for `limit + 1` rows past the cursor; a k-way merge of those
sorted runs gives the global page, and one more row than the page says whether another
page exists, so pagination stays exact across partitions.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from operator import itemgetter

from contracts.positions import Position, merge, of_partition
from gateway.model.queries import Answer, Row, SubQuery

Part = tuple[SubQuery, Answer]
_KEY = itemgetter(0)
_KEY_AND_START = itemgetter(0, 1)


def merged_position(parts: Iterable[Part]) -> Position:
    return merge(of_partition(q.partition, a.offsets) for q, a in parts if a.ok)


def page(parts: Iterable[Part], limit: int, windowed: bool) -> tuple[list[Row], bool]:
    """The first `limit` rows of all partitions in (key[, window start]) order, and whether
    more rows follow."""
    runs = [answer.rows or [] for _, answer in parts if answer.ok]
    merged = heapq.merge(*runs, key=_KEY_AND_START if windowed else _KEY)
    rows: list[Row] = []
    for row in merged:
        if len(rows) == limit:
            return rows, True
        rows.append(row)
    return rows, False
