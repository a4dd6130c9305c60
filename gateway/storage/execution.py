"""Answering sub-queries from this node's snapshots: one frame for every query kind, and a
table of the handlers that answer each kind, by engine (Kafka Streams' QUERY_HANDLER_MAP).

The frame checks what every kind needs (the store exists, this node is the partition's
active when that is required, a snapshot is leased, it is up to the bound and young enough),
then asks the query kind's handlers, memory's (storage/memory/) first, then SQL's
(storage/sql/): a handler answers rows, or NOT_HERE and the next one is asked. Whether a
sub-query may run on the event loop (microseconds, no thread hop) is decided once, before it
runs (`on_loop`); there only memory is asked, and what it leaves goes to the query pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any

import duckdb

from contracts import chains, tracing
from contracts.clock import duration, instant, now_ms
from contracts.errors import Failure
from contracts.positions import satisfies
from contracts.project import Project, Store, history_of
from contracts.topology import Topology
from gateway.model.queries import (
    NOT_HERE,
    Answer,
    Get,
    NotHere,
    Prefix,
    Query,
    Range,
    Row,
    Rows,
    Select,
    SubQuery,
    Totals,
    Versions,
    Windows,
    WindowsOfKey,
    keys_of,
)
from gateway.model.topology_view import TopologyView
from gateway.runtime.lanes import in_bulk_lane, offload, sliced
from gateway.storage.catalog.layers import LayeredTable
from gateway.storage.catalog.snapshots import Snapshot, SnapshotCatalog
from gateway.storage.memory import history, windows
from gateway.storage.memory.masks import vectorized
from gateway.storage.memory.ordered import indexed
from gateway.storage.sql import reads, statements


class Engine(Enum):
    MEMORY = "memory"
    SQL = "sql"


EVERY_ENGINE = (Engine.MEMORY, Engine.SQL)  # in the order they are asked
ON_THE_LOOP = (Engine.MEMORY,)


@dataclass(slots=True)
class Reading:
    """What a handler reads: a partition's leased snapshot on this node, the store asked,
    and this thread's cursor on the hub (SQL's)."""

    node: str
    partition: int
    snapshot: Snapshot
    store: Store
    cursor: Callable[[], duckdb.DuckDBPyConnection]


Handler = Callable[[Reading, Any], Rows]


class Unanswerable(Exception):
    """A query the store cannot answer whatever the engine (a time its history lost)."""

    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure = failure


def execute(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    subqueries: Sequence[SubQuery],
) -> list[Answer]:
    """Run a batch of sub-queries on this node (blocking), every engine asked; an answer
    says whether the node is its partition's active in `topology`."""
    answers = []
    for q in subqueries:
        answer = _answer(catalog, project, topology, node_id, q, EVERY_ENGINE)
        assert answer is not NOT_HERE  # SQL answers every kind
        answers.append(answer)
    return answers


def execute_on_loop(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    subqueries: Sequence[SubQuery],
) -> list[Answer | NotHere]:
    """Like execute, memory alone asked (sub-queries `on_loop` let through): NOT_HERE for
    one memory left, for the pool to run."""
    return [_answer(catalog, project, topology, node_id, q, ON_THE_LOOP) for q in subqueries]


def on_loop(catalog: SnapshotCatalog, project: Project, q: SubQuery) -> bool:
    """Whether a sub-query runs on the event loop: its kind's memory handler answers it at
    once from the current snapshot (ON_LOOP), or at worst says NOT_HERE as fast."""
    store = project.stores.get(q.store)
    quick = ON_LOOP.get(type(q.query))
    if store is None or quick is None:
        return False
    snapshot = catalog.get(chains.of(project, store, q.partition))
    return snapshot is not None and quick(snapshot, store, q.query)


def _answer(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    q: SubQuery,
    engines: tuple[Engine, ...],
) -> Answer | NotHere:
    if not tracing.on():
        return _read(catalog, project, topology, node_id, q, engines)
    read = {
        "stategate.partition": q.partition,
        "stategate.store": q.store,
        "stategate.node": node_id,
    }
    with tracing.span("partition read", read) as span:
        answer = _read(catalog, project, topology, node_id, q, engines)
        if span is not None and answer is not NOT_HERE:
            tracing.link(span, _publication(catalog, project, q, answer.version))
            span.set_attributes(
                {
                    "stategate.replica": "active" if answer.active else "standby",
                    "stategate.version": answer.version,
                    "stategate.position": json.dumps(answer.offsets, sort_keys=True),
                    "stategate.failure": str(answer.failure or ""),
                }
            )
        return answer


def _publication(
    catalog: SnapshotCatalog, project: Project, q: SubQuery, version: int
) -> str | None:
    """The `traceparent` of the publication of the version a read answered from."""
    store = project.stores.get(q.store)
    snapshot = None if store is None else catalog.get(chains.of(project, store, q.partition))
    if snapshot is None or snapshot.version != version:
        return None
    return snapshot.layers[-1].traceparent


def _read(
    catalog: SnapshotCatalog,
    project: Project,
    topology: Topology,
    node_id: str,
    q: SubQuery,
    engines: tuple[Engine, ...],
) -> Answer | NotHere:
    store = project.stores.get(q.store)
    # every node holds all of a global store: none is a standby for it
    active = topology.active(q.partition) == node_id or (store is not None and store.is_global)
    answer = Answer(id=q.id, node=node_id, active=active)
    if store is None:
        return answer.fail(Failure.DOES_NOT_EXIST, f"no store {q.store!r} on node {node_id}")
    if q.require_active and not active:
        return answer.fail(Failure.NOT_ACTIVE, _standby(topology, node_id, q.partition))
    with catalog.lease(chains.of(project, store, q.partition)) as snapshot:
        if snapshot is None:
            return answer.fail(Failure.NOT_PRESENT, f"{node_id} has no snapshot of {q.partition}")
        answer.version, answer.offsets = snapshot.version, snapshot.offsets
        answer.appended_ms = snapshot.appended_ms
        if not snapshot.base.holds(store.name):
            return answer.fail(Failure.NOT_PRESENT, _unbuilt(store, q.partition, node_id))
        stale = _stale(snapshot, q, node_id)
        if stale is not None:
            return answer.fail(Failure.NOT_UP_TO_BOUND, stale)
        reading = Reading(node_id, q.partition, snapshot, store, catalog.cursor)
        try:
            rows = _rows(reading, q.query, engines)
        except Unanswerable as exc:
            return answer.fail(exc.failure, str(exc))
        except duckdb.Error as exc:
            return answer.fail(Failure.STORE_EXCEPTION, f"{type(exc).__name__}: {exc}")
        except statements.UnknownField as exc:
            return answer.fail(Failure.UNKNOWN_QUERY_TYPE, str(exc))
    if rows is NOT_HERE:
        return NOT_HERE
    answer.rows = rows
    return answer


def _rows(reading: Reading, query: Query, engines: tuple[Engine, ...]) -> Rows:
    """The rows of the first engine's handler that answers."""
    kind = type(query)
    for engine in engines:
        handler = HANDLERS.get((kind, engine))
        if handler is not None:
            rows = handler(reading, query)
            if rows is not NOT_HERE:
                return rows
    return NOT_HERE


def _unbuilt(store: Store, partition: int, node_id: str) -> str:
    return (
        f"{store.name} is not built yet in partition {partition} on {node_id}: the pipeline "
        "has not published it since it was declared"
    )


def _stale(snapshot: Snapshot, q: SubQuery, node_id: str) -> str | None:
    """Why the snapshot is behind what the sub-query accepts (None: it is not)."""
    if not satisfies(snapshot.offsets, q.bound):
        return (
            f"partition {q.partition} on {node_id} is at {snapshot.offsets}, "
            f"the bound asks for {q.bound}"
        )
    if q.max_age_ms is not None:
        age_ms = now_ms() - snapshot.created_ms
        if age_ms > q.max_age_ms:
            return (
                f"partition {q.partition} on {node_id} is a snapshot {age_ms} ms old, "
                f"maxAgeMs is {q.max_age_ms}"
            )
    return None


def _table(read: Callable[[LayeredTable, Store, Any], Rows]) -> Handler:
    """A memory handler of a keyed store's rows: NOT_HERE when the snapshot holds none
    (keys too wide to index)."""

    def handler(r: Reading, query: Any) -> Rows:
        table = r.snapshot.tables.get(r.store.name)
        return NOT_HERE if table is None else read(table, r.store, query)

    return handler


def _windows_of_key(r: Reading, query: WindowsOfKey) -> Rows:
    runs = r.snapshot.runs(r.store.name)
    return NOT_HERE if runs is None else windows.of_key(runs, query)


def _versions(r: Reading, query: Versions) -> Rows:
    runs = r.snapshot.runs(history_of(r.store).name)
    return NOT_HERE if runs is None else history.versions(runs, _in_history(r, query))


def _sql(read: Callable[[duckdb.DuckDBPyConnection, Snapshot, Store, Any], list[Row]]) -> Handler:
    """A SQL handler: it answers every query of its kind."""

    def handler(r: Reading, query: Any) -> Rows:
        return read(r.cursor(), r.snapshot, r.store, query)

    return handler


def _versions_by_sql(r: Reading, query: Versions) -> Rows:
    return reads.versions(r.cursor(), r.snapshot, r.store, _in_history(r, query))


def _in_history(r: Reading, query: Versions) -> Versions:
    """A versioned store's query, from the oldest time its history holds when it names
    none; Unanswerable when the store keeps no history, or not back to that time."""
    store = r.store
    if not store.versioned:
        raise Unanswerable(Failure.UNKNOWN_QUERY_TYPE, f"{store.name} keeps no history")
    horizon = r.snapshot.horizon(store)
    if query.from_ms is None and horizon is not None:  # from the oldest time it holds
        query = replace(query, from_ms=horizon)
    if horizon is not None and query.from_ms is not None and query.from_ms < horizon:
        raise Unanswerable(
            Failure.OUTSIDE_HISTORY,
            f"{store.name} keeps {duration(store.history_ms)} of history by event time: "
            f"partition {r.partition} on {r.node} answers for {instant(horizon)} and "
            f"later, not {instant(query.from_ms)}",
        )
    return query


MEMORY, SQL = Engine.MEMORY, Engine.SQL
HANDLERS: dict[tuple[type[Query], Engine], Handler] = {
    (Get, MEMORY): _table(lambda table, store, q: table.get(q.keys)),
    (Range, MEMORY): _table(lambda table, store, q: table.scan(q)),
    (Prefix, MEMORY): _table(lambda table, store, q: table.scan(q)),
    (Select, MEMORY): _table(lambda table, store, q: table.select(store, q)),
    (Totals, MEMORY): _table(lambda table, store, q: [table.totals(store, q)]),
    (WindowsOfKey, MEMORY): _windows_of_key,
    (Versions, MEMORY): _versions,
    (Get, SQL): _sql(reads.get),
    (Range, SQL): _sql(reads.key_range),
    (Prefix, SQL): _sql(reads.prefix),
    (Windows, SQL): _sql(reads.windows),
    (WindowsOfKey, SQL): _sql(reads.windows_of_key),
    (Select, SQL): _sql(reads.select),
    (Totals, SQL): _sql(reads.totals),
    (Versions, SQL): _versions_by_sql,
}


def _has_table(snapshot: Snapshot, store: Store, query: Any) -> bool:
    return store.name in snapshot.tables


def _walks_whole(snapshot: Snapshot, store: Store, query: Select) -> bool:
    """An ordered page by an indexed column whose filter numpy tests whole: a walk bounded
    by ordered.WALK_LIMIT."""
    table = snapshot.tables.get(store.name)
    return (
        table is not None
        and indexed(store, query) is not None
        and vectorized(query.where, table.base, store)
    )


# The kinds whose memory handler may run on the event loop, and when. Totals and all keys'
# windows never do: they read every row.
ON_LOOP: dict[type[Query], Callable[[Snapshot, Store, Any], bool]] = {
    Get: _has_table,
    Range: _has_table,  # a scan memory cannot answer goes to the pool: NOT_HERE
    Prefix: _has_table,
    Select: _walks_whole,
    WindowsOfKey: lambda snapshot, store, q: snapshot.runs(store.name) is not None,
    Versions: lambda snapshot, store, q: snapshot.runs(history_of(store).name) is not None,
}


def by_sql(
    cursor: duckdb.DuckDBPyConnection, snapshot: Snapshot, store: Store, query: Query
) -> Rows:
    """A query answered by its SQL handler alone (tests pin memory against it)."""
    reading = Reading("", snapshot.partition, snapshot, store, lambda: cursor)
    return HANDLERS[(type(query), SQL)](reading, query)


class LocalExecution:
    """This node's answers to a batch of sub-queries: on the event loop what `on_loop` lets
    through, the rest (and what memory left there) one pool task per partition, where every
    engine is asked (DuckDB releases the GIL, so partitions run in parallel)."""

    def __init__(
        self, catalog: SnapshotCatalog, project: Project, node_id: str, topology: TopologyView
    ) -> None:
        self.catalog = catalog
        self.project = project
        self.node_id = node_id
        self.topology = topology
        self.pool = ThreadPoolExecutor(project.settings.query_threads, thread_name_prefix="query")

    def here(self, q: SubQuery) -> Answer | NotHere:
        """One sub-query's answer read on the event loop, or NOT_HERE when it may not be
        (its memory handler cannot answer it at once, or it is bulk)."""
        if in_bulk_lane() or not on_loop(self.catalog, self.project, q):
            return NOT_HERE
        return _answer(
            self.catalog, self.project, self.topology.current, self.node_id, q, ON_THE_LOOP
        )

    async def __call__(self, subqueries: list[SubQuery]) -> list[Answer]:
        if not all(on_loop(self.catalog, self.project, q) for q in subqueries):
            return await self._pooled(subqueries)
        answers = await offload(self._on_loop, subqueries, items=keys_of(subqueries))
        left = [q for q, answer in zip(subqueries, answers, strict=True) if answer is NOT_HERE]
        pooled = iter(await self._pooled(left) if left else ())
        return [next(pooled) if answer is NOT_HERE else answer for answer in answers]

    def _on_loop(self, subqueries: list[SubQuery]) -> list[Answer | NotHere]:
        answers: list[Answer | NotHere] = []
        topology = self.topology.current
        for some in sliced(subqueries, size=1):
            answers += execute_on_loop(
                self.catalog, self.project, topology, self.node_id, list(some)
            )
        return answers

    async def _pooled(self, subqueries: list[SubQuery]) -> list[Answer]:
        loop = asyncio.get_running_loop()
        by_partition: dict[int, list[SubQuery]] = {}
        for q in subqueries:
            by_partition.setdefault(q.partition, []).append(q)
        topology = self.topology.current
        batches = await asyncio.gather(
            *(
                loop.run_in_executor(
                    self.pool,
                    contextvars.copy_context().run,  # its reads' spans: the request's
                    execute,
                    self.catalog,
                    self.project,
                    topology,
                    self.node_id,
                    group,
                )
                for group in by_partition.values()
            )
        )
        answered = {a.id: a for batch in batches for a in batch}
        return [answered[q.id] for q in subqueries]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _standby(topology: Topology, node_id: str, partition: int) -> str:
    if node_id in topology.fenced:
        return (
            f"{node_id} cannot tell whether it is still the active of {partition}: its "
            "coordinator session may have expired, so it answers as a standby until it reads "
            "the assignment again"
        )
    return f"{node_id} is a standby of {partition}"
