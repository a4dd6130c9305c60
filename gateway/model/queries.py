"""The query kinds a partition answers, and the sub-queries and answers that carry them.

A sub-query asks one partition of one store one query; its answer is rows, or a failure with
one of contracts.errors.Failure's reasons. Rows are lists: key, [window start,] then the
store's columns (Store.columns); a version's: key, valid from, valid to, then the columns.
An engine of a node (memory, SQL) that cannot answer a query says NOT_HERE, and the next one
is asked (gateway/storage/execution.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

from contracts.conditions import Filter
from contracts.errors import Failure
from contracts.partitioner import Key
from gateway.model.filters import Row as Row  # defined there, named here by most users
from gateway.model.filters import Sort


class NotHere(Enum):
    """What an engine says of a query it cannot answer: the next engine will."""

    NOT_HERE = "not here"


NOT_HERE: Final = NotHere.NOT_HERE
Rows = list[Row] | NotHere  # an engine's answer to a query


@dataclass(frozen=True, slots=True)
class Get:
    """The rows of these keys (absent keys have none)."""

    keys: tuple[Key, ...]


@dataclass(frozen=True, slots=True)
class WindowsOfKey:
    """One key's windows with start in [from_ms, to_ms], by start."""

    key: Key
    from_ms: int
    to_ms: int


@dataclass(frozen=True, slots=True)
class Versions:
    """A versioned store's versions of one key valid at some time in [from_ms, to_ms], by
    valid_from, up to `limit` of them after the one valid from `after` (KIP-968; an asOf is
    the span of one instant, KIP-960). Rows: key, valid_from, valid_to (None: still valid),
    then the columns. No `from_ms`: from the oldest time the history holds."""

    key: Key
    from_ms: int | None
    to_ms: int
    limit: int
    after: int | None = None


@dataclass(frozen=True, slots=True)
class Range:
    """Up to `limit` rows with low <= key <= high (each optional) and key > after, by key."""

    low: Key | None
    high: Key | None
    limit: int
    after: Key | None = None


@dataclass(frozen=True, slots=True)
class Prefix:
    """Up to `limit` rows whose (string) key starts with prefix and is > after, by key."""

    prefix: str
    limit: int
    after: str | None = None


@dataclass(frozen=True, slots=True)
class Windows:
    """Up to `limit` windows of all keys with start in [from_ms, to_ms], after the
    (key, window start) `after`, by (key, window start)."""

    from_ms: int
    to_ms: int
    limit: int
    after: tuple[Key, int] | None = None


@dataclass(frozen=True, slots=True)
class Select:
    """Up to `limit` rows that pass `where`, in `order` (which ends with the key: see
    filters.with_tie_breaker), after the row whose order values are `after`."""

    where: Filter | None
    order: tuple[Sort, ...]
    limit: int
    after: tuple[Any, ...] | None = None
    window: tuple[int, int] | None = None  # a window store's: starts in [from_ms, to_ms]


@dataclass(frozen=True, slots=True)
class Totals:
    """One row of partials over the rows that pass `where`: count(*), then per column its
    count of non-null values, sum (numbers), min and max (numbers and strings). An integer
    column's sum is exact, as decimal text: a partition's may pass 64 bits (JSON between
    nodes carries no more) while the whole store's total fits; merging.totals decides."""

    where: Filter | None
    window: tuple[int, int] | None = None  # a window store's: starts in [from_ms, to_ms]


Query = Get | WindowsOfKey | Versions | Range | Prefix | Windows | Select | Totals
Scan = Range | Prefix | Windows | Select | Totals


@dataclass(frozen=True, slots=True)
class SubQuery:
    id: int
    partition: int
    store: str
    query: Query
    bound: dict[str, int] = field(default_factory=dict)  # topic -> offset, this partition
    require_active: bool = False
    max_age_ms: int | None = None  # the oldest snapshot the caller accepts


def keys_of(subqueries: list[SubQuery]) -> int:
    """How many keys the sub-queries look up."""
    return sum(len(q.query.keys) for q in subqueries if isinstance(q.query, Get))


@dataclass(slots=True)
class Answer:
    id: int
    node: str  # "" when no replica was reached
    rows: list[Row] | None = None
    version: int = 0
    offsets: dict[str, int] = field(default_factory=dict)
    active: bool = False
    failure: Failure | None = None
    message: str | None = None
    appended_ms: int | None = None  # the newest record's append time in the version answering
    _by_key: dict[Key, Row] | None = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return self.failure is None

    def row_of(self, key: Key) -> Row | None:
        """The row of a key in a lookup's answer."""
        return self.by_key().get(key)

    def by_key(self) -> dict[Key, Row]:
        """A lookup's rows by key (indexed once: lookups that share a sub-query each ask
        it for their own keys)."""
        if self._by_key is None:
            self._by_key = {row[0]: row for row in self.rows or ()}
        return self._by_key

    def fail(self, failure: Failure, message: str) -> Answer:
        self.failure, self.message = failure, message
        return self
