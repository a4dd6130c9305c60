"""One request's work as one routed batch: key lookups of a partition with the same demands
share one sub-query, everything else gets its own, and every work gets back its own parts."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from contracts.partitioner import Key, partition_for
from contracts.positions import Position
from contracts.project import Project, Store, load
from gateway.cluster.batching import DEFAULT_MAX_KEYS, Consistency, Outcome, RequestBatch, Work
from gateway.cluster.health import Membership
from gateway.cluster.metrics import NodeMetrics
from gateway.cluster.routing import Router
from gateway.model.queries import Answer, Get, Prefix, Query, Range, SubQuery, Windows, WindowsOfKey
from gateway.wire.mock import Call, MockTransport
from gateway.wire.peers import PeerClient
from gateway.wire.transport import Reply
from tests.cores import node_core
from tests.projects import write_project

LogEnd = Callable[[str, int], "int | None"]


@dataclass
class Node:
    """A one-node cluster whose `local` answers every sub-query it is handed."""

    project: Project
    calls: list[list[SubQuery]] = field(default_factory=list)

    async def local(self, subqueries: list[SubQuery]) -> list[Answer]:
        self.calls.append(list(subqueries))
        return [
            Answer(id=q.id, node="node1", rows=[[q.partition, q.id]], offsets={"t": q.partition})
            for q in subqueries
        ]

    @property
    def subqueries(self) -> list[SubQuery]:
        return [q for call in self.calls for q in call]

    def run(
        self,
        works: list[Work],
        log_end: LogEnd = lambda topic, p: None,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> list[Outcome]:
        async def go() -> list[Outcome]:
            peers = PeerClient(self.project.cluster.secret, MockTransport(_no_peers))
            try:
                core = node_core(self.project, peers)
                membership = Membership(core)
                router = Router(
                    core,
                    membership,
                    self.local,
                    lambda p: None,
                    NodeMetrics(),
                    log_end,
                )
                batch = RequestBatch(
                    router, self.project.cluster.partitions, log_end, max_keys=max_keys
                )
                outcomes = await batch.run(works)
                sent = len(self.subqueries)
                assert [t.rounds for t in batch.traces] == [[{"node1": sent}] if sent else []]
                return outcomes
            finally:
                await peers.aclose()

        return asyncio.run(go())


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    loaded = load(write_project(tmp_path_factory.mktemp("batching"), [7001], replicas=1))
    assert loaded.cluster.hosted_by("node1") == list(range(loaded.cluster.partitions))
    return loaded


@pytest.fixture
def node(project: Project) -> Iterator[Node]:
    yield Node(project)


def partition(project: Project, store: Store, key: Key) -> int:
    return partition_for(key, store.key_type, project.cluster.partitions)


def string_keys(rng: random.Random, n: int) -> list[str]:
    return [rng.choice(["C", "Zoë", "日本", ""]) + str(rng.randrange(50)) for _ in range(n)]


def lookups(outcome: Outcome) -> dict[int, tuple[Key, ...]]:
    result: dict[int, tuple[Key, ...]] = {}
    for q, _ in outcome.parts:
        assert isinstance(q.query, Get)
        result[q.partition] = q.query.keys
    return result


def test_lookups_with_the_same_demands_share_one_sub_query_per_partition(node: Node) -> None:
    project = node.project
    store = project.stores["latestBooking"]
    rng = random.Random(41)
    works = [Work(store, Get(tuple(string_keys(rng, rng.randrange(1, 12)))), ()) for _ in range(40)]
    node.run(works)
    expected: dict[int, set[Key]] = {}
    for work in works:
        assert isinstance(work.query, Get)
        for key in work.query.keys:
            expected.setdefault(partition(project, store, key), set()).add(key)
    sent = node.subqueries
    assert sorted(q.partition for q in sent) == sorted(expected)  # one per partition
    for q in sent:
        assert isinstance(q.query, Get)
        assert len(q.query.keys) == len(set(q.query.keys))  # no key twice
        assert set(q.query.keys) == expected[q.partition]
        assert q.store == store.name


def test_every_work_gets_back_the_parts_holding_its_keys_in_partition_order(node: Node) -> None:
    project = node.project
    store = project.stores["trainStatus"]
    rng = random.Random(42)
    works = [
        Work(store, Get(tuple(rng.randrange(-30, 30) for _ in range(rng.randrange(1, 8)))), ())
        for _ in range(30)
    ]
    outcomes = node.run(works)
    assert [o.work for o in outcomes] == works
    for work, outcome in zip(works, outcomes, strict=True):
        assert isinstance(work.query, Get)
        mine: dict[int, set[Key]] = {}
        for key in work.query.keys:
            mine.setdefault(partition(project, store, key), set()).add(key)
        parts = lookups(outcome)
        assert [q.partition for q, _ in outcome.parts] == sorted(mine)
        for p, keys in mine.items():
            assert keys <= set(parts[p])
        for q, answer in outcome.parts:
            assert answer.id == q.id
            assert answer.rows == [[q.partition, q.id]]


def test_a_partitions_shared_lookup_holds_at_most_max_keys(node: Node) -> None:
    """Peers refuse a sub-query of more than MAX_SUBQUERY_KEYS keys (gateway/model/limits.py),
    so lookups that would pool more into one partition's sub-query start another."""
    project = node.project
    store = project.stores["trainStatus"]
    works = [Work(store, Get(tuple(range(i * 40, i * 40 + 40))), ()) for i in range(25)]
    outcomes = node.run(works, max_keys=50)
    sent = node.subqueries
    assert all(isinstance(q.query, Get) and len(q.query.keys) <= 50 for q in sent)
    assert len(sent) > project.cluster.partitions
    for work, outcome in zip(works, outcomes, strict=True):
        assert isinstance(work.query, Get)
        for key in work.query.keys:
            q, _ = outcome.part_of(key)
            assert isinstance(q.query, Get) and key in q.query.keys
            assert q.partition == partition(project, store, key)


def test_lookups_with_different_demands_do_not_share(node: Node) -> None:
    project = node.project
    store = project.stores["latestBooking"]
    key = "C1"
    p = partition(project, store, key)
    other = next(k for k in (f"k{i}" for i in range(1000)) if partition(project, store, k) == p)
    demands = [
        Consistency(),
        Consistency(require_active=True),
        Consistency(max_age_ms=1000),
        Consistency(bound={("bookings", p): 5}),
        Consistency(bound={("bookings", p): 6}),
    ]
    works = [Work(store, Get((key,)), (), d) for d in demands]
    works += [Work(store, Get((other,)), (), d) for d in demands]  # these join the above
    outcomes = node.run(works)
    sent = node.subqueries
    assert len(sent) == len(demands)
    assert {q.query for q in sent} == {Get((key, other))}
    for demand, q in zip(demands, sent, strict=True):
        assert q.require_active == demand.require_active
        assert q.max_age_ms == demand.max_age_ms
        assert q.bound == {t: o for (t, pp), o in demand.bound.items() if pp == p}
    for i, outcome in enumerate(outcomes):
        ((q, _),) = outcome.parts
        assert q is sent[i % len(demands)]


def test_lookups_of_two_stores_do_not_share_even_on_one_topic(node: Node) -> None:
    project = node.project
    table, totals = project.stores["latestBooking"], project.stores["customerTotals"]
    node.run([Work(table, Get(("a",)), ()), Work(totals, Get(("a",)), ())])
    assert sorted(q.store for q in node.subqueries) == sorted([table.name, totals.name])


def test_duplicate_keys_of_one_work_are_asked_once(node: Node) -> None:
    store = node.project.stores["latestBooking"]
    (outcome,) = node.run([Work(store, Get(("x", "y", "x", "x", "y")), ())])
    assert sorted(k for keys in lookups(outcome).values() for k in keys) == ["x", "y"]


def test_the_windows_of_a_key_go_to_the_keys_partition_only(node: Node) -> None:
    project = node.project
    rng = random.Random(43)
    works = []
    for _ in range(30):
        store = project.stores[rng.choice(["hourlyRevenue", "delaysHopping"])]
        key: Key = str(rng.random()) if store.key_type == "string" else rng.randrange(-99, 99)
        works.append(Work(store, WindowsOfKey(key, 0, 10), ()))
    outcomes = node.run(works)
    assert len(node.subqueries) == len(works)  # window queries never share
    for work, outcome in zip(works, outcomes, strict=True):
        assert isinstance(work.query, WindowsOfKey)
        ((q, answer),) = outcome.parts
        assert q.partition == partition(project, work.store, work.query.key)
        assert q.query == work.query and q.store == work.store.name
        assert answer.id == q.id


def test_scans_go_to_the_partitions_they_list(node: Node) -> None:
    project = node.project
    rng = random.Random(44)
    queries: list[tuple[str, Query]] = [
        ("latestBooking", Range("a", "z", 11)),
        ("latestBooking", Prefix("C", 11)),
        ("hourlyRevenue", Windows(0, 10, 11, ("k", 3))),
        ("trainDelays", Range(None, 5, 11, 2)),
    ]
    works = []
    for _ in range(12):
        name, query = rng.choice(queries)
        partitions = tuple(
            sorted(rng.sample(range(project.cluster.partitions), rng.randrange(1, 10)))
        )
        works.append(Work(project.stores[name], query, partitions))
    outcomes = node.run(works)
    assert len(node.subqueries) == sum(len(w.partitions) for w in works)
    for work, outcome in zip(works, outcomes, strict=True):
        assert tuple(q.partition for q, _ in outcome.parts) == work.partitions
        assert all(q.query is work.query for q, _ in outcome.parts)
        assert all(a.id == q.id and a.rows == [[q.partition, q.id]] for q, a in outcome.parts)


def test_max_lag_raises_the_bound_to_the_log_end_minus_the_lag(node: Node) -> None:
    project = node.project
    store = project.stores["latestBooking"]
    topic = store.topic.name
    rng = random.Random(45)
    ends = {p: (None if rng.random() < 0.3 else rng.randrange(0, 1000)) for p in range(9)}
    bound: Position = {(topic, p): rng.randrange(0, 600) for p in range(0, 9, 2)}
    bound[("trains", 1)] = 77  # another topic of the bound travels unchanged
    max_lag = 100
    asked: list[tuple[str, int]] = []

    def log_end(t: str, p: int) -> int | None:
        asked.append((t, p))
        return ends[p]

    partitions = tuple(range(9))
    (outcome,) = node.run(
        [Work(store, Range(None, None, 5), partitions, Consistency(bound, max_lag=max_lag))],
        log_end,
    )
    assert sorted(asked) == [(topic, p) for p in partitions]
    for q, _ in outcome.parts:
        expected: dict[str, Any] = {t: o for (t, p), o in bound.items() if p == q.partition}
        end = ends[q.partition]
        if end is not None:
            expected[topic] = max(expected.get(topic, 0), end - max_lag)
        assert q.bound == expected, q.partition


def test_without_max_lag_the_log_end_is_not_consulted(node: Node) -> None:
    store = node.project.stores["latestBooking"]

    def log_end(t: str, p: int) -> int | None:
        raise AssertionError("log end asked without maxLag")

    (outcome,) = node.run([Work(store, Range(None, None, 5), (0, 1))], log_end)
    assert [q.bound for q, _ in outcome.parts] == [{}, {}]


def test_lookups_and_scans_in_one_batch_go_in_one_round(node: Node) -> None:
    project = node.project
    table = project.stores["latestBooking"]
    works = [
        Work(table, Get(("a", "b", "c")), ()),
        Work(table, Range(None, None, 3), (0, 4, 8)),
        Work(project.stores["delaysHopping"], WindowsOfKey(5, 0, 1), ()),
        Work(table, Get(("a", "d")), ()),
    ]
    node.run(works)  # Node.run checks there was a single round with every sub-query
    assert len(node.calls) == 1
    assert sorted(q.id for q in node.subqueries) == list(range(len(node.subqueries)))


def test_an_empty_batch_sends_nothing(node: Node) -> None:
    assert node.run([]) == []
    assert node.calls == []


def _no_peers(call: Call) -> Reply:
    raise AssertionError(f"a one-node cluster called a peer: {call.url}")
