"""The query service: what a front end (the GraphQL resolvers) asks of the gateway, with typed
inputs and typed, merged results.

One RequestQueries per client request. Each call checks its input (coded GatewayErrors),
hands its Work items to the request's batch through `load`, all at once (one call: a
record's joins are read in the same round), merges the partitions' answers and
returns a result carrying its Meta: how each partition answered, the merged position and the
position its consistency token stands for.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from contracts import chains
from contracts.clock import LATEST_MS
from contracts.conditions import KEY, AllOf, Condition, Filter
from contracts.errors import Failure, GatewayError, bad_input
from contracts.partitioner import Key, partition_for
from contracts.positions import Position, decode_token, encode_token, merge
from contracts.project import Project, Store
from contracts.topology import Topology
from gateway.cluster.batching import Consistency, Outcome, Work
from gateway.cluster.routing import Router, Trace
from gateway.model import cursors, limits, merging
from gateway.model.filters import WINDOW_START, Sort, field_index, with_tie_breaker
from gateway.model.limits import SCAN_LOOKAHEAD
from gateway.model.merging import FieldTotals
from gateway.model.queries import (
    Answer,
    Get,
    Prefix,
    Range,
    Row,
    Scan,
    Select,
    SubQuery,
    Totals,
    Versions,
    Windows,
    WindowsOfKey,
)
from gateway.model.visibility import EVERYTHING, Layout, Visibility, in_record, in_version
from gateway.runtime.lanes import offload, sliced

# A request's batch, as a root field reads it: the outcomes of works read together. Several
# root fields share one routed batch through a DataLoader's load_many; a lone one calls the
# batch itself (resolvers/schema/context.py).
Load = Callable[[list[Work]], Awaitable[list[Outcome]]]
NO_DEMANDS = Consistency()  # a request's that names none (most): one, read and never changed


@dataclass(frozen=True)
class Demand:
    """A caller's freshness and replica demands, as given (checked by RequestQueries)."""

    token: str | None = None
    position: tuple[tuple[str, int, int], ...] = ()  # (topic, partition, offset)
    require_active: bool = False
    max_lag: int | None = None
    max_age_ms: int | None = None


@dataclass(frozen=True, slots=True)
class PartitionOutcome:
    store: str  # the result's own store, or one it joins
    partition: int
    node: str | None  # None when no replica was reached
    active: bool
    version: int | None
    offsets: dict[str, int]
    failure: Failure | None
    message: str | None
    appended_ms: int | None = None  # when its newest record was appended to the log


@dataclass(frozen=True)
class Meta:
    partitions: list[PartitionOutcome]
    position: Position  # merged over the partitions that answered
    token: Position  # what the result's consistency token stands for (bound included)

    @functools.cached_property
    def token_text(self) -> str:
        """The consistency token, encoded (once: a one-key read's meta is kept)."""
        return encode_token(self.token)

    @property
    def failed(self) -> int:
        return sum(1 for p in self.partitions if p.failure is not None)


class Entry(NamedTuple):  # one per key asked: a tuple costs half a frozen dataclass's init
    key: Key
    partition: int
    row: Row | None
    failure: Failure | None  # set when the key's partition could not answer


@dataclass(frozen=True)
class Lookup:
    entries: list[Entry]  # aligned with the keys asked
    meta: Meta


@dataclass(frozen=True)
class KeyWindows:
    key: Key
    partition: int
    rows: list[Row]
    failure: Failure | None
    meta: Meta


@dataclass(frozen=True)
class KeyVersions:
    key: Key
    partition: int
    rows: list[Row]  # key, valid from, valid to (None: still valid), columns[, joins]
    has_next: bool
    end_cursor: str | None
    failure: Failure | None
    meta: Meta


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    has_next: bool
    end_cursor: str | None
    meta: Meta


@dataclass(frozen=True)
class StoreTotals:
    count: int  # rows that pass the filter, over the partitions that answered
    fields: dict[str, FieldTotals]  # by column
    meta: Meta


@dataclass
class RequestQueries:
    project: Project
    topology: Topology  # as the request began: who is a partition's active
    load: Load
    read_store: Callable[[str], Store]  # the table the schema reads of a declared store
    visible: Visibility = EVERYTHING  # the rows its principal's row rules let it read
    tokens: list[Position] = field(default_factory=list)  # one per result
    selected: frozenset[str] = frozenset()  # every field the request's document names
    partitions: set[int] = field(default_factory=set)  # every partition read
    stores: set[str] = field(default_factory=set)  # every store read
    failed: set[int] = field(default_factory=set)  # those that could not answer
    # (chain, node) -> the version that node answered for it (contracts/chains.py: a
    # partition's global stores are a chain of their own, of its own versions)
    answered: dict[tuple[int, str], int] = field(default_factory=dict)

    def response_token(self) -> Position:
        """What the whole response's consistency token stands for."""
        return merge(self.tokens)

    async def lookup(self, store: Store, keys: list[Key], demand: Demand | None) -> Lookup:
        (found,) = await self.lookups([(store, keys)], demand)
        return found

    async def lookups(
        self, asked: Sequence[tuple[Store, list[Key]]], demand: Demand | None
    ) -> list[Lookup]:
        """Lookups of several stores (a federation gateway's references), read as one."""
        for _, keys in asked:
            limits.check_keys(len(keys), self.project.settings)
        consistency = self._consistency(demand)
        works = [Work(store, Get(tuple(keys)), (), consistency) for store, keys in asked]
        outcomes = await self._load_all(works)
        return [
            await self._lookup_of(store, keys, outcome, demand)
            for (store, keys), outcome in zip(asked, outcomes, strict=True)
        ]

    async def key_lookups(self, asked: Sequence[tuple[Store, list[Key]]]) -> list[list[Lookup]]:
        """A one-key lookup of each key of each store (a document of many root fields that
        each read one key), read as one batch, as those lookups are: each with its key's
        entry and the meta of its key's partition alone, as its own lookup says. No demand;
        no join (the request selects none of the stores')."""
        works = [
            Work(store, Get(tuple(dict.fromkeys(keys))), (), NO_DEMANDS) for store, keys in asked
        ]
        outcomes = await self._load_all(works)
        found = []
        for (store, keys), outcome in zip(asked, outcomes, strict=True):
            entries = await self._visible_entries(store, keys, outcome)
            metas = [self._meta(Outcome(outcome.work, [part])) for part in outcome.parts]
            by_key = outcome.key_parts
            found.append([Lookup([entry], metas[by_key[entry.key]]) for entry in entries])
        return found

    async def _lookup_of(
        self, store: Store, keys: list[Key], outcome: Outcome, demand: Demand | None
    ) -> Lookup:
        """A lookup from its outcome: its entries, the joins the request selects, its meta."""
        entries = await self._visible_entries(store, keys, outcome)
        extend, joined = await self._joined(store, [e.row for e in entries], demand)
        if extend:
            entries = [Entry(e.key, e.partition, extend(e.row), e.failure) if e.row else e
                       for e in entries]  # fmt: skip
        return Lookup(entries, self._meta(outcome, joined))

    async def _visible_entries(
        self, store: Store, keys: list[Key], outcome: Outcome
    ) -> list[Entry]:
        """The keys' entries, in their order, each whose row the row rules withhold
        FORBIDDEN."""
        entries = await offload(_entries, keys, outcome, items=len(keys))
        test = self.visible.test(store)
        if test is None:
            return entries
        return _screened(entries, test, self.visible.decides_by_key(store))

    async def windows_of_key(
        self, store: Store, key: Key, from_ms: int, to_ms: int, demand: Demand | None
    ) -> KeyWindows:
        self._check_window_range(store, from_ms, to_ms, limit=True)
        outcome = await self._load(store, WindowsOfKey(key, from_ms, to_ms), (), demand)
        ((q, answer),) = outcome.parts
        rows, failure = self._withheld(store, key, answer.rows or [], answer.failure)
        extend, joined = await self._joined(store, rows, demand)
        rows = [extend(row) for row in rows] if extend else rows
        return KeyWindows(key, q.partition, rows, failure, self._meta(outcome, joined))

    async def versions(
        self,
        store: Store,
        key: Key,
        from_ms: int | None,
        to_ms: int | None,
        first: int,
        after: str | None,
        demand: Demand | None,
    ) -> KeyVersions:
        """A versioned store's versions of `key` valid at some time in [from, to] (from: the
        oldest its history holds; to: none), by valid_from, one page at a time; OUTSIDE_HISTORY
        for a `from` before the history its partition holds."""
        limits.check_page_size(first, self.project.settings)
        if from_ms is not None and to_ms is not None and from_ms > to_ms:
            raise GatewayError("INVALID_RANGE", f"from ({from_ms} ms) is after to ({to_ms} ms)")
        start = None if after is None else cursors.decode_version(store, after, key)
        last = LATEST_MS if to_ms is None else to_ms
        query = Versions(key, from_ms, last, first + SCAN_LOOKAHEAD, start)
        outcome = await self._load(store, query, (), demand)
        ((q, answer),) = outcome.parts
        rows, more, end = _versions_page(store, key, first, answer)
        rows, failure = self._withheld(store, key, rows, answer.failure, in_version)
        if not rows and failure is Failure.FORBIDDEN and self.visible.decides_by_key(store):
            more, end = False, None  # a withheld key's versions are not even counted in pages
        extend, joined = await self._joined(store, [[r[0], *r[3:]] for r in rows], demand)
        if extend:
            rows = [[*row[:3], *extend([row[0], *row[3:]])[1:]] for row in rows]
        meta = self._meta(outcome, joined)
        return KeyVersions(key, q.partition, rows, more, end, failure, meta)

    async def range(
        self,
        store: Store,
        low: Key | None,
        high: Key | None,
        first: int,
        after: str | None,
        partitions: list[int] | None,
        demand: Demand | None,
    ) -> Page:
        if low is not None and high is not None and low > high:  # type: ignore[operator]
            raise GatewayError("INVALID_RANGE", f"from {low!r} is after to {high!r}")
        last, limit = self._after(store, after, first), first + SCAN_LOOKAHEAD
        scan: Scan = Range(low, high, limit, None if last is None else last[0])
        if self.visible.of(store) is not None:
            bounds = [Condition(KEY, "gte", low), Condition(KEY, "lte", high)]
            where = AllOf(tuple(c for c in bounds if c.value is not None))
            scan = self._by_key(store, limit, last, where)
        return await self._scan(store, scan, first, partitions, demand)

    async def prefix(
        self,
        store: Store,
        prefix: str,
        first: int,
        after: str | None,
        partitions: list[int] | None,
        demand: Demand | None,
    ) -> Page:
        last, limit = self._after(store, after, first), first + SCAN_LOOKAHEAD
        scan: Scan = Prefix(prefix, limit, None if last is None else str(last[0]))
        if self.visible.of(store) is not None:
            scan = self._by_key(store, limit, last, Condition(KEY, "startsWith", prefix))
        return await self._scan(store, scan, first, partitions, demand)

    async def windows(
        self,
        store: Store,
        from_ms: int,
        to_ms: int,
        first: int,
        after: str | None,
        partitions: list[int] | None,
        demand: Demand | None,
    ) -> Page:
        self._check_window_range(store, from_ms, to_ms, limit=False)
        limits.check_page_size(first, self.project.settings)
        start = None if after is None else cursors.decode_window(store, after, from_ms, to_ms)
        limit = first + SCAN_LOOKAHEAD
        scan: Scan = Windows(from_ms, to_ms, limit, start)
        if self.visible.of(store) is not None:
            order = (Sort(KEY), Sort(WINDOW_START))
            where = self.visible.within(store, None)
            scan = Select(where, order, limit, start, (from_ms, to_ms))
        return await self._scan(store, scan, first, partitions, demand, windowed=True)

    async def select(
        self,
        store: Store,
        where: Filter | None,
        order: list[Sort],
        first: int,
        after: str | None,
        partitions: list[int] | None,
        demand: Demand | None,
        window: tuple[int, int] | None = None,
    ) -> Page:
        """The rows that pass `where` (a window store's: starting in `window`), in `order`
        then by their identity, one page (a top-K) at a time."""
        limits.check_page_size(first, self.project.settings)
        if window is not None:
            self._check_window_range(store, window[0], window[1], limit=False)
        sorts = with_tie_breaker(tuple(order), store)
        last = None if after is None else cursors.decode_ordered(store, sorts, after)
        where = self.visible.within(store, where)
        query = Select(where, sorts, first + SCAN_LOOKAHEAD, last, window)
        outcome = await self._load(store, query, self._partitions(partitions), demand)
        rows, more = merging.page(outcome.parts, first, merging.by_value(store, sorts))
        end = None
        if rows:
            values = [rows[-1][field_index(store, sort.field)] for sort in sorts]
            end = cursors.encode_ordered(store.name, sorts, values)
        extend, joined = await self._joined(store, rows, demand)
        rows = [extend(row) for row in rows] if extend else rows
        return Page(rows, more, end, self._meta(outcome, joined))

    async def totals(
        self,
        store: Store,
        where: Filter | None,
        partitions: list[int] | None,
        demand: Demand | None,
        window: tuple[int, int] | None = None,
    ) -> StoreTotals:
        """Count, sum, min, max and avg over the rows that pass `where` (and `window`)."""
        if window is not None:
            self._check_window_range(store, window[0], window[1], limit=False)
        query = Totals(self.visible.within(store, where), window)
        outcome = await self._load(store, query, self._partitions(partitions), demand)
        count, fields = merging.totals(outcome.parts, store)
        return StoreTotals(count, fields, self._meta(outcome))

    async def _scan(
        self,
        store: Store,
        scan: Scan,
        first: int,
        partitions: list[int] | None,
        demand: Demand | None,
        windowed: bool = False,
    ) -> Page:
        """A page of rows by key (and window start, `windowed`), the order every scan but a
        by-value Select answers in."""
        outcome = await self._load(store, scan, self._partitions(partitions), demand)
        order = merging.BY_KEY_AND_START if windowed else merging.BY_KEY
        rows, more = merging.page(outcome.parts, first, order)
        end = None
        if rows:
            end = cursors.encode(store.name, rows[-1][:2] if windowed else rows[-1][:1])
        extend, joined = await self._joined(store, rows, demand)
        rows = [extend(row) for row in rows] if extend else rows
        return Page(rows, more, end, self._meta(outcome, joined))

    def _by_key(self, store: Store, limit: int, last: list[Key] | None, where: Filter) -> Select:
        """A key-ordered scan as a Select, so the partitions pass only visible rows."""
        after = None if last is None else (last[0],)
        return Select(self.visible.within(store, where), (Sort(KEY),), limit, after)

    def _withheld(
        self,
        store: Store,
        key: Key,
        rows: list[Row],
        failure: Failure | None,
        layout: Layout = in_record,
    ) -> tuple[list[Row], Failure | None]:
        """A key's rows that the row rules let through, and FORBIDDEN when they withheld
        any (or the key, when a key alone decides)."""
        test = self.visible.test(store, layout)
        if test is None:
            return rows, failure
        if self.visible.decides_by_key(store):
            return ([], Failure.FORBIDDEN) if not test([key]) else (rows, failure)
        kept = [row for row in rows if test(row)]
        return kept, (Failure.FORBIDDEN if len(kept) < len(rows) else failure)

    async def _load(
        self,
        store: Store,
        query: Get | WindowsOfKey | Versions | Scan,
        partitions: tuple[int, ...],
        demand: Demand | None,
    ) -> Outcome:
        (outcome,) = await self._load_all(
            [Work(store, query, partitions, self._consistency(demand))]
        )
        return outcome

    async def _load_all(self, works: list[Work]) -> list[Outcome]:
        """The works' outcomes, read together and noted as the request's: their partitions,
        failures and versions."""
        outcomes = list(await self.load(works))
        for outcome in outcomes:
            store = outcome.work.store
            self.stores.add(store.name)
            self.partitions.update(q.partition for q, _ in outcome.parts)
            self.failed.update(q.partition for q, a in outcome.parts if a.failure is not None)
            self.answered.update(
                ((chains.of(self.project, store, q.partition), a.node), a.version)
                for q, a in outcome.parts
                if a.ok
            )
        return outcomes

    async def _joined(
        self, store: Store, rows: Sequence[Row | None], demand: Demand | None
    ) -> tuple[Callable[[Row], Row] | None, list[Outcome]]:
        """What a row of `rows` becomes with one more value per join of the store
        (Store.joins, in order): the joined record, or None when its field is null, it has
        none or the request does not select the join; and the outcomes the joined records
        were read from. None instead of a function: the request selects no join, so rows
        stay as they are."""
        joins = [(n, j) for n, j in enumerate(store.joins) if j.name in self.selected]
        if not joins:
            return None, []
        wanted = []
        for number, join in joins:
            index = field_index(store, join.field)
            keys = tuple(k for k in dict.fromkeys(r[index] for r in rows if r) if k is not None)
            if keys:
                target = self.read_store(join.store)
                work = Work(target, Get(keys), (), self._consistency(demand))
                wanted.append((number, index, keys, work))
        outcomes = await self._load_all([work for *_, work in wanted]) if wanted else []
        # per join: its field's place in a row, and the joined row of each key
        found = [
            (number, index, self._joined_rows(outcome, keys))
            for (number, index, keys, _), outcome in zip(wanted, outcomes, strict=True)
        ]
        width = len(store.joins)

        def extend(row: Row) -> Row:
            more: list[Any] = [None] * width
            for number, index, joined in found:
                more[number] = joined.get(row[index])
            return [*row, *more]

        return extend, outcomes

    def _joined_rows(self, outcome: Outcome, keys: tuple[Key, ...]) -> dict[Key, Row | None]:
        """The joined store's row of each key; None for one its row rules withhold."""
        test = self.visible.test(outcome.work.store)
        rows = {key: _joined_row(outcome, key) for key in keys}
        if test is None:
            return rows
        return {key: row if row is not None and test(row) else None for key, row in rows.items()}

    def _meta(self, outcome: Outcome, joined: Sequence[Outcome] = ()) -> Meta:
        meta = meta_of(self.topology, outcome, joined)
        self.tokens.append(meta.token)
        return meta

    def _after(self, store: Store, after: str | None, first: int) -> list[Key] | None:
        limits.check_page_size(first, self.project.settings)
        return None if after is None else cursors.decode(store.name, store.key_type, after, 1)

    def _partitions(self, partitions: list[int] | None) -> tuple[int, ...]:
        count = self.project.cluster.partitions
        if partitions is None:
            return tuple(range(count))
        unknown = sorted({p for p in partitions if not 0 <= p < count})
        if unknown:
            raise GatewayError(
                "UNKNOWN_PARTITION",
                f"partitions {unknown} do not exist; this cluster has 0..{count - 1}",
            )
        return tuple(sorted(set(partitions)))

    def _check_window_range(self, store: Store, from_ms: int, to_ms: int, limit: bool) -> None:
        if from_ms > to_ms:
            raise GatewayError(
                "INVALID_RANGE",
                f"from ({from_ms} ms) is after to ({to_ms} ms): no window start lies between",
            )
        if limit:
            limits.check_window_span(store, from_ms, to_ms, self.project.settings)

    def _consistency(self, demand: Demand | None) -> Consistency:
        if demand is None:
            return NO_DEMANDS
        cluster = self.project.cluster
        bound: Position = {} if demand.token is None else decode_token(demand.token)
        for topic, partition, offset in demand.position:
            if topic not in self.project.topics:
                raise bad_input(f"position names unknown topic {topic!r}")
            if not 0 <= partition < cluster.partitions:
                raise GatewayError(
                    "UNKNOWN_PARTITION",
                    f"position names partition {partition}; "
                    f"this cluster has 0..{cluster.partitions - 1}",
                )
            bound[(topic, partition)] = max(bound.get((topic, partition), 0), offset)
        for name, value in (("maxLag", demand.max_lag), ("maxAgeMs", demand.max_age_ms)):
            if value is not None and value < 0:
                raise bad_input(f"{name} must not be negative, got {value}")
        return Consistency(bound, demand.require_active, demand.max_lag, demand.max_age_ms)


def meta_of(topology: Topology, outcome: Outcome, joined: Sequence[Outcome] = ()) -> Meta:
    """A result's meta: how each partition of its store answered, then each partition of
    the stores it joins; the position and token over all of them."""
    parts = [*outcome.parts, *(part for one in joined for part in one.parts)]
    position = merging.merged_position(parts)
    token = merge([outcome.work.consistency.bound, position])  # tokens only move forward
    partitions = [_partition_outcome(topology, one.work.store, q, a)
                  for one in (outcome, *joined) for q, a in one.parts]  # fmt: skip
    return Meta(partitions, position, token)


def _partition_outcome(
    topology: Topology, store: Store, q: SubQuery, a: Answer
) -> PartitionOutcome:
    # no node is a standby of a global store
    active = store.is_global or topology.active(q.partition) == a.node
    return PartitionOutcome(
        store=store.name,
        partition=q.partition,
        node=a.node or None,
        active=bool(a.node) and active,
        version=a.version or None,
        offsets=a.offsets,
        failure=a.failure,
        message=a.message,
        appended_ms=a.appended_ms,
    )


@dataclass(frozen=True, slots=True)
class KeyRead:
    """A read of one key that names no demand and selects no join: its record, or with
    `at_ms` the version of it valid then (a versioned store's asOf)."""

    store: Store
    key: Key
    at_ms: int | None = None


def read_at_once(
    router: Router, topology: Topology, read: KeyRead
) -> tuple[Lookup | KeyVersions, Trace] | None:
    """A key read, when this node reads it from memory at once (the first replica of its
    partition): the Lookup RequestQueries.lookup gives (the KeyVersions .versions gives, for
    an asOf), and its trace; None when a round must go (read_routed)."""
    q = _one_key(router, read)
    found = router.read_here(q, time.perf_counter())
    if found is None:
        return None
    answer, trace = found
    return _one_key_result(topology, read, q, answer), trace


async def read_routed(
    router: Router, topology: Topology, read: KeyRead, authorization: str | None
) -> tuple[Lookup | KeyVersions, Trace]:
    """The same read through the router's rounds: the replicas of its partition asked in
    turn (a hop to the first, failing over to the next), as RequestBatch asks them; a coded
    GatewayError as RequestQueries words it (OUTSIDE_HISTORY)."""
    q = _one_key(router, read)
    answers, trace = await router.execute([q], authorization)
    return _one_key_result(topology, read, q, answers[q.id]), trace


def _one_key(router: Router, read: KeyRead) -> SubQuery:
    store, key, at = read.store, read.key, read.at_ms
    partition = partition_for(key, store.key_type, router.project.cluster.partitions)
    query = Get((key,)) if at is None else Versions(key, at, at, AS_OF_ROWS, None)
    return SubQuery(0, partition, store.name, query)


AS_OF_ROWS = 1 + SCAN_LOOKAHEAD  # the rows an asOf's Versions asks for, as .versions asks


def _one_key_result(
    topology: Topology, read: KeyRead, q: SubQuery, answer: Answer
) -> Lookup | KeyVersions:
    store, key = read.store, read.key
    meta = _one_key_meta(topology, store, key, q, answer)
    if read.at_ms is not None:
        rows, more, end = _versions_page(store, key, 1, answer)
        return KeyVersions(key, q.partition, rows, more, end, answer.failure, meta)
    row = answer.row_of(key) if answer.ok else None
    return Lookup([Entry(key, q.partition, row, answer.failure)], meta)


def _versions_page(
    store: Store, key: Key, first: int, answer: Answer
) -> tuple[list[Row], bool, str | None]:
    """A Versions answer's first `first` rows, whether more follow, and the page's end
    cursor; OUTSIDE_HISTORY when it asked before the history its partition holds."""
    if answer.failure is Failure.OUTSIDE_HISTORY:
        raise GatewayError("OUTSIDE_HISTORY", answer.message or "outside the history")
    rows = answer.rows or []
    more, rows = len(rows) > first, rows[:first]
    end = cursors.encode(store.name, [key, rows[-1][1]]) if rows else None
    return rows, more, end


def _one_key_meta(topology: Topology, store: Store, key: Key, q: SubQuery, answer: Answer) -> Meta:
    """meta_of a one-key read that names no demand: of what one partition's answer says of
    itself, so the same for every key a version of it answers (kept: a lookup's meta is
    never changed)."""
    active = store.is_global or topology.active(q.partition) == answer.node
    said = (answer.node, answer.version, answer.appended_ms, tuple(answer.offsets.items()))
    seen = (store.name, q.partition, active, said)
    meta = _READ_METAS.get(seen) if answer.ok else None
    if meta is None:
        outcome = Outcome(Work(store, q.query, (), NO_DEMANDS), [(q, answer)], {key: 0})
        meta = meta_of(topology, outcome)
        if answer.ok:
            if len(_READ_METAS) >= READ_METAS_KEPT:
                _READ_METAS.clear()
            _READ_METAS[seen] = meta
    return meta


READ_METAS_KEPT = 4_096  # partitions' versions whose one-key meta is kept, per process
_READ_METAS: dict[tuple[str, int, bool, tuple[object, ...]], Meta] = {}


def _joined_row(outcome: Outcome, key: Key) -> Row | None:
    """The joined store's row of `key`, None when it has none or its partition failed."""
    _, answer = outcome.part_of(key)
    return answer.row_of(key) if answer.ok else None


def _entries(keys: list[Key], outcome: Outcome) -> list[Entry]:
    """A lookup's entries, in the order of its keys, from the answers of their partitions
    (each part's rows indexed once: this runs once a key)."""
    parts = [
        (q.partition, answer.by_key() if answer.ok else _NO_ROWS, answer.failure)
        for q, answer in outcome.parts
    ]
    at = outcome.key_parts
    entries: list[Entry] = []
    for some in sliced(keys):
        for key in some:
            partition, rows, failure = parts[at[key]]
            entries.append(_entry(Entry, (key, partition, rows.get(key), failure)))
    return entries


# Entry(...) without the Python frame of a NamedTuple's __new__: a third of a key's entry
_entry = tuple.__new__


_NO_ROWS: dict[Key, Row] = {}  # a failed part's


def _screened(entries: list[Entry], test: Callable[[Row], bool], by_key: bool) -> list[Entry]:
    """A lookup's entries, FORBIDDEN in the place of each whose row the row rules withhold
    (or whose key, when a key alone decides: then whether it has a row stays unsaid)."""
    return [
        entry
        if _passes(entry, test, by_key)
        else Entry(entry.key, entry.partition, None, Failure.FORBIDDEN)
        for entry in entries
    ]


def _passes(entry: Entry, test: Callable[[Row], bool], by_key: bool) -> bool:
    if entry.row is not None:
        return test(entry.row)
    return not by_key or test([entry.key])
