"""Where partition results meet: rows merged in one global order, totals folded from
partials, positions merged by max.

Scans ask every partition for `limit + 1` rows past the cursor, in the page's order; a k-way
merge of those sorted runs gives the global page (a top-K is a page), and one more row than
the page says whether another page exists, so pagination stays exact across partitions.
"""

from __future__ import annotations

import heapq
import math
import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import total_ordering
from operator import itemgetter
from typing import Any

from contracts.positions import Position, merge, of_partition
from contracts.project import FieldType, Store
from gateway.model.filters import NUMBERS, Sort, field_index, type_of
from gateway.model.queries import Answer, Row, SubQuery

Part = tuple[SubQuery, Answer]
Order = Callable[[Row], Any]
BY_KEY: Order = itemgetter(0)
BY_KEY_AND_START: Order = itemgetter(0, 1)
LONG = (-(2**63), 2**63 - 1)


def merged_position(parts: Iterable[Part]) -> Position:
    return merge(of_partition(q.partition, a.offsets) for q, a in parts if a.ok)


def page(parts: Iterable[Part], limit: int, order: Order) -> tuple[list[Row], bool]:
    """The first `limit` rows of all partitions in `order`, and whether more rows follow."""
    runs = [answer.rows or [] for _, answer in parts if answer.ok]
    merged = heapq.merge(*runs, key=order)
    rows: list[Row] = []
    for row in merged:
        if len(rows) == limit:
            return rows, True
        rows.append(row)
    return rows, False


def by_value(store: Store, order: tuple[Sort, ...]) -> Order:
    """The sort key of rows in `order` (nulls last in either direction), as storage sorts: a
    flat tuple of (is null, value) per term, a descending number negated, a descending
    string wrapped to sort in reverse."""
    terms = [(field_index(store, sort.field), _flip(store, sort)) for sort in order]

    def key(row: Row) -> tuple[Any, ...]:
        out: list[Any] = []
        for i, flip in terms:
            value = row[i]
            if value is None:
                out += (True, 0)
            else:
                out += (False, value if flip is None else flip(value))
        return tuple(out)

    return key


def _flip(store: Store, sort: Sort) -> Callable[[Any], Any] | None:
    if not sort.descending:
        return None
    return operator.neg if type_of(store, sort.field) in (*NUMBERS, "boolean") else _Reversed


@total_ordering
class _Reversed:
    """A value that sorts in reverse (strings and numbers alike)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Reversed) and self.value == other.value

    def __lt__(self, other: _Reversed) -> bool:
        return bool(other.value < self.value)

    __hash__ = None  # type: ignore[assignment]


@dataclass(frozen=True)
class FieldTotals:
    count: int  # rows with a value
    total: int | float | None  # numbers: exact; null without values, or a double not finite
    min: Any
    max: Any

    @property
    def sum(self) -> int | float | None:
        """The total as the API states it: null past the Long range."""
        past = isinstance(self.total, int) and not LONG[0] <= self.total <= LONG[1]
        return None if past else self.total

    @property
    def avg(self) -> float | None:
        return None if self.total is None or not self.count else self.total / self.count


def totals(parts: Iterable[Part], store: Store) -> tuple[int, dict[str, FieldTotals]]:
    """The row count and each column's totals over the partitions that answered, from their
    partials (sql/statements.totals: count(*), then count, sum, min, max per column)."""
    partials = [answer.rows[0] for _, answer in parts if answer.ok and answer.rows]
    fields = {
        name: _field_totals([p[1 + 4 * i : 5 + 4 * i] for p in partials if p[1 + 4 * i]], kind)
        for i, (name, kind) in enumerate(store.columns.items())
    }
    return sum(p[0] for p in partials), fields


def _field_totals(own: list[Row], kind: FieldType) -> FieldTotals:
    """One column's totals from the partials (count, sum, min, max) of the partitions where
    it has a value."""
    sums = [p[1] for p in own]
    total: int | float | None = None
    if kind == "double" and own and None not in sums:
        total = sum(sums)
        total = total if math.isfinite(total) else None
    elif kind in NUMBERS and own:
        total = sum(int(s) for s in sums)  # exact: queries.Totals
    return FieldTotals(
        sum(p[0] for p in own),
        total,
        min((p[2] for p in own if p[2] is not None), default=None),
        max((p[3] for p in own if p[3] is not None), default=None),
    )
