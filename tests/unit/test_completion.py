"""The fast completion of plain records against graphql-core's own completion: the same
documents over the same data give the same data and the same errors (message and path).

The baseline is strawberry's execution context, the class PlainRecordExecutionContext extends
without its fast path: graphql-core's general completion. Root resolvers are the real ones,
reading a fake request context (the project, a partition map, canned query results).
"""

from __future__ import annotations

import asyncio
import inspect
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from operator import methodcaller
from types import SimpleNamespace
from typing import Any

import pytest
from graphql import (
    DocumentNode,
    GraphQLObjectType,
    GraphQLScalarType,
    GraphQLSchema,
    execute,
    get_named_type,
    is_object_type,
    parse,
    validate,
)
from strawberry.schema.schema import StrawberryGraphQLCoreExecutionContext

from contracts.errors import Failure
from contracts.positions import Position
from contracts.project import Project, Store, load
from gateway.cluster.status import PartitionInfo, PartitionMap, ReplicaInfo
from gateway.service import Entry, KeyWindows, Lookup, Meta, Page, PartitionOutcome
from resolvers.execution.completion import PlainRecordExecutionContext, PlanCompiler
from resolvers.schema.build import build_schema
from tests.projects import write_project

BASELINE = StrawberryGraphQLCoreExecutionContext
FAST = PlainRecordExecutionContext
SPAN = '(from: "2026-01-01T00:00:00Z", to: "2026-01-01T06:00:00Z")'
ROOTS = {
    "stores": "",
    "cluster": "",
    "latestBooking": '(key: "k")',
    "latestBookingBatch": '(keys: ["a", "b", "c"])',
    "latestBookingPrefix": '(prefix: "C", first: 3)',
    "customerTotalsRange": "(first: 5)",
    "trainDelays": "(key: 1)",
    "trainStatusBatch": "(keys: [1, 2])",
    "hourlyRevenue": '(key: "k", from: "2026-01-01T00:00:00Z", to: "2026-01-01T06:00:00Z")',
    "hourlyRevenueAll": SPAN,
    "delaysHoppingAll": SPAN,
}
Result = tuple[Any, list[tuple[str, list[str | int] | None]]]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(tmp_path_factory.mktemp("completion"), [1, 2, 3]))


@pytest.fixture(scope="module")
def schema(project: Project) -> GraphQLSchema:
    built: GraphQLSchema = build_schema(project)._schema
    return built


# --- data: what the resolvers read ------------------------------------------------------


@dataclass
class FakeQueries:
    """gateway.service.RequestQueries' calls, answered with canned results."""

    lookups: dict[str, Lookup]
    pages: dict[str, Page]
    key_windows: dict[str, KeyWindows]

    async def lookup(self, store: Store, keys: list[Any], demand: Any) -> Lookup:
        canned = self.lookups[store.name]
        return Lookup(canned.entries[: len(keys)], canned.meta)

    async def windows_of_key(self, store: Store, *args: Any) -> KeyWindows:
        return self.key_windows[store.name]

    async def range(self, store: Store, *args: Any) -> Page:
        return self.pages[store.name]

    async def prefix(self, store: Store, *args: Any) -> Page:
        return self.pages[store.name]

    async def windows(self, store: Store, *args: Any) -> Page:
        return self.pages[store.name]


class Data:
    """Random data of the right types; `nulls` is the chance of a null in a nullable spot."""

    def __init__(self, rng: random.Random, project: Project, nulls: float = 0.3) -> None:
        self.rng, self.project, self.nulls = rng, project, nulls

    def maybe(self, value: Any) -> Any:
        return None if self.rng.random() < self.nulls else value

    def text(self) -> str:
        return "".join(self.rng.choice("aZé日🚆 '\"") for _ in range(self.rng.randrange(0, 6)))

    def int32(self) -> int:
        return self.rng.choice([0, -1, 2**31 - 1, -(2**31), self.rng.randrange(-999, 999)])

    def long(self) -> int:
        edges = [0, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63)]  # a Long is sent as a string
        return self.rng.choice([*edges, self.rng.randrange(-(2**40), 2**40)])

    def value(self, kind: str) -> Any:
        rng = self.rng
        make: dict[str, Callable[[], Any]] = {
            "string": self.text,
            "int": self.int32,
            "long": self.long,
            "double": lambda: rng.choice([0.0, -0.0, 0.1, 1e300, rng.uniform(-1e6, 1e6)]),
            "boolean": lambda: rng.random() < 0.5,
        }
        return self.maybe(make[kind]())

    def key(self, store: Store) -> Any:
        return self.text() if store.key_type == "string" else self.int32()

    def row(self, store: Store) -> list[Any]:
        row: list[Any] = [self.key(store)]
        if store.kind == "window":
            row.append(self.rng.randrange(0, 4_102_444_800_000, 1000))
        row += [self.value(kind) for kind in store.columns.values()]
        # as the service adds them: the joined record of each join, or None
        stores = self.project.stores
        return row + [self.maybe(self.row(stores[join.store])) for join in store.joins]

    def offsets(self) -> dict[str, int]:
        topics = self.rng.sample(sorted(self.project.topics), self.rng.randrange(0, 3))
        return {topic: self.rng.randrange(0, 2**62) for topic in topics}

    def position(self) -> Position:
        return {(t, self.rng.randrange(9)): o for t, o in self.offsets().items()}

    def meta(self) -> Meta:
        partitions = [
            PartitionOutcome(
                store=self.rng.choice(["latestBooking", "timetable"]),
                partition=self.rng.randrange(9),
                node=self.maybe("node1"),
                active=self.rng.random() < 0.5,
                version=self.maybe(self.rng.randrange(1, 2**31)),
                offsets=self.offsets(),
                failure=self.maybe(self.rng.choice(list(Failure))),
                message=self.maybe(self.text()),
            )
            for _ in range(self.rng.randrange(0, 4))
        ]
        return Meta(partitions, self.position(), self.position())

    def lookup(self, store: Store) -> Lookup:
        entries = [
            Entry(
                key=self.key(store),
                partition=self.rng.randrange(9),
                row=self.maybe(self.row(store)),
                failure=self.maybe(self.rng.choice(list(Failure))),
            )
            for _ in range(3)
        ]
        return Lookup(entries, self.meta())

    def page(self, store: Store) -> Page:
        rows = [self.row(store) for _ in range(self.rng.randrange(0, 5))]
        return Page(rows, self.rng.random() < 0.5, self.maybe(self.text()), self.meta())

    def key_windows(self, store: Store) -> KeyWindows:
        rows = [self.row(store) for _ in range(self.rng.randrange(0, 4))]
        failure = self.maybe(self.rng.choice(list(Failure)))
        return KeyWindows(self.key(store), self.rng.randrange(9), rows, failure, self.meta())

    def partition_map(self) -> PartitionMap:
        nodes = {f"node{i}": f"127.0.0.1:{7000 + i}" for i in range(1, self.rng.randrange(3, 6))}
        partitions = [
            PartitionInfo(
                p,
                [
                    ReplicaInfo(
                        node=node,
                        address=nodes[node],
                        active=i == 0,
                        alive=self.rng.random() < 0.7,
                        version=self.maybe(self.rng.randrange(1, 2**31)),
                        position=self.offsets(),
                        lag=self.maybe(self.long()),
                    )
                    for i, node in enumerate(self.rng.sample(sorted(nodes), 2))
                ],
                [
                    ReplicaInfo(node, nodes[node], False, True, None, self.offsets(), None)
                    for node in self.rng.sample(sorted(nodes), self.rng.randrange(0, 2))
                ],
            )
            for p in range(self.rng.randrange(0, 4))
        ]
        coordinator = self.maybe("etcd://127.0.0.1:2379")
        leader = self.maybe("node1")
        version = self.rng.randrange(0, 99)
        return PartitionMap(
            "node1", len(partitions), 2, {}, nodes, partitions, 0, version, coordinator, leader, []
        )

    def context(self, project: Any = None) -> SimpleNamespace:
        stores = self.project.stores.values()
        queries = FakeQueries(
            lookups={s.name: self.lookup(s) for s in stores if s.kind != "window"},
            pages={s.name: self.page(s) for s in stores},
            key_windows={s.name: self.key_windows(s) for s in stores if s.kind == "window"},
        )
        partition_map = self.partition_map()
        project = project or self.project
        node = SimpleNamespace(
            project=project, served=frozenset(project.stores), partition_map=lambda: partition_map
        )
        # a project without [auth]: every root field may be read
        return SimpleNamespace(node=node, queries=queries, authorize=lambda name: None)


# --- documents --------------------------------------------------------------------------


class Documents:
    """Random valid documents: subsets of fields, aliases, __typename, the same field twice
    (merged), inline and named fragments, @skip and @include."""

    def __init__(self, rng: random.Random, schema: GraphQLSchema) -> None:
        self.rng, self.schema = rng, schema
        self.made = 0
        self.count = 0
        self.fragments: list[str] = []

    def alias(self) -> str:
        if self.rng.random() < 0.25:
            self.count += 1
            return f"a{self.count}: "
        return ""

    def field(
        self, parent: GraphQLObjectType, name: str, depth: int, arguments: str | None = None
    ) -> str:
        named = get_named_type(parent.fields[name].type)
        directive = ""
        if arguments is None:  # a root field (given its arguments) always runs
            arguments = ""
            directive = self.rng.choice(["", "", "", " @include(if: true)", " @skip(if: true)"])
        head = f"{self.alias()}{name}{arguments}{directive}"
        if not is_object_type(named):
            return head
        if depth <= 0:
            return f"{head} {{ __typename }}"
        return f"{head} {{ {self.selection(named, depth - 1)} }}"

    def selection(self, parent: GraphQLObjectType, depth: int) -> str:
        rng = self.rng
        names = list(parent.fields)
        parts = []
        for name in rng.sample(names, rng.randint(1, len(names))):
            parts.append(self.field(parent, name, depth))
            if rng.random() < 0.1:
                parts.append(self.field(parent, name, depth))  # merged with the first
        if rng.random() < 0.2:
            parts.append(f"{self.alias()}__typename")
        rng.shuffle(parts)
        if len(parts) > 1 and rng.random() < 0.3:
            cut = rng.randrange(1, len(parts))
            parts[cut:] = [f"... on {parent.name} {{ {' '.join(parts[cut:])} }}"]
        if len(parts) > 1 and rng.random() < 0.2:
            cut = rng.randrange(1, len(parts))
            name = f"F{len(self.fragments)}"
            self.fragments.append(f"fragment {name} on {parent.name} {{ {' '.join(parts[cut:])} }}")
            parts[cut:] = [f"...{name}"]
        return " ".join(parts)

    def document(self, roots: list[str], depth: int = 4) -> DocumentNode:
        query = self.schema.query_type
        assert query is not None
        self.count, self.fragments = 0, []
        body = " ".join(self.field(query, root, depth, ROOTS[root]) for root in roots)
        document = parse(" ".join([f"{{ {body} }}", *self.fragments]))
        if self.made % 4 == 0:  # validation costs more than execution: check a sample
            assert validate(self.schema, document) == []
        self.made += 1
        return document


# --- running ----------------------------------------------------------------------------


async def run(
    schema: GraphQLSchema, document: DocumentNode, context: Any, executor: type
) -> Result:
    result = execute(schema, document, context_value=context, executor_class=executor)
    if inspect.isawaitable(result):
        result = await result
    errors = sorted(((e.message, e.path) for e in result.errors or ()), key=repr)
    return result.data, errors


async def both(
    schema: GraphQLSchema, document: DocumentNode, context: Any
) -> tuple[Result, Result]:
    baseline = await run(schema, document, context, BASELINE)
    return baseline, await run(schema, document, context, FAST)


def test_the_baseline_is_the_class_the_fast_path_extends() -> None:
    assert issubclass(FAST, BASELINE)
    assert FAST.complete_value is not BASELINE.complete_value


class Spy(PlainRecordExecutionContext):
    """Records the return types the fast path compiled a plan for."""

    planned: list[str] = []

    def _plan(self, return_type: Any, field_details_list: Any) -> Any:
        plan = super()._plan(return_type, field_details_list)
        if plan is not None:
            Spy.planned.append(str(return_type))
        return plan


def test_the_fast_path_completes_every_root_field_under_test(
    project: Project, schema: GraphQLSchema
) -> None:
    documents = Documents(random.Random(50), schema)
    context = Data(random.Random(51), project).context()
    query = schema.query_type
    assert query is not None
    for root in ROOTS:
        Spy.planned = []
        asyncio.run(run(schema, documents.document([root]), context, Spy))
        assert str(query.fields[root].type) in Spy.planned, root


def test_generated_documents_over_plain_records_complete_as_graphql_core_does(
    project: Project, schema: GraphQLSchema
) -> None:
    rng = random.Random(52)
    documents = Documents(rng, schema)

    async def go() -> list[Any]:
        mismatches = []
        for i in range(100):
            context = Data(random.Random(i), project).context()
            roots = rng.sample(list(ROOTS), rng.randrange(1, 4))
            document = documents.document(roots)
            baseline, fast = await both(schema, document, context)
            assert baseline[1] == [], baseline[1]  # valid data: no errors at all
            if fast != baseline:
                mismatches.append((roots, baseline, fast))
        return mismatches

    assert asyncio.run(go())[:3] == []


def test_nulls_in_nullable_fields_complete_as_graphql_core_does(
    project: Project, schema: GraphQLSchema
) -> None:
    documents = Documents(random.Random(53), schema)

    async def go() -> list[Any]:
        mismatches = []
        for i in range(20):
            context = Data(random.Random(1000 + i), project, nulls=0.7).context()
            document = documents.document(list(ROOTS), depth=5)
            baseline, fast = await both(schema, document, context)
            if fast != baseline:
                mismatches.append((baseline, fast))
        return mismatches

    assert asyncio.run(go())[:3] == []


# --- nulls and values graphql-core refuses -------------------------------------------------


def broken_cases(project: Project) -> dict[str, tuple[str, SimpleNamespace]]:
    """Documents over data with one value the schema refuses, by where it sits."""
    data = Data(random.Random(60), project, nulls=0.0)
    cases: dict[str, tuple[str, SimpleNamespace]] = {}

    # A null in a non-null field of a record inside a nullable one (record: LatestBooking).
    context = data.context()
    lookup = context.queries.lookups["latestBooking"]
    lookup.entries[0] = Entry("k", 1, [None, "trip", 1.5, 2], None)
    cases["null key of a nullable record"] = (
        '{ latestBooking(key: "k") { key partition record { key trip } } }',
        context,
    )

    # A null in a non-null field whose nearest nullable ancestor is the root field.
    context = data.context()
    lookup = context.queries.lookups["trainStatus"]
    lookup.entries[1] = Entry(None, 1, None, None)  # type: ignore[arg-type]
    cases["null key of a batch entry"] = (
        "{ trainStatusBatch(keys: [1, 2]) { entries { key partition } } }",
        context,
    )

    # A null in a non-null field of the non-null `cluster` root: the whole data is null.
    context = data.context()
    partition_map = PartitionMap(
        "node1", 1, 1, {}, {"node1": "h:1"},
        [PartitionInfo(0, [ReplicaInfo(None, "h:1", True, True, 3, {}, None)], [])],  # type: ignore[arg-type]
        0, 0, None, None, [],
    )  # fmt: skip
    context.node.partition_map = lambda: partition_map
    cases["null replica node"] = (
        "{ cluster { node partitions { partition replicas { node version } } } }",
        context,
    )

    # A null in a non-null list item.
    fake_store = SimpleNamespace(
        name="s", kind="table", topic=SimpleNamespace(name="t"), key_type="string",
        window_size_ms=0, window_advance_ms=0, columns={"a": "int", None: "long"},
    )  # fmt: skip
    context = data.context(project=SimpleNamespace(stores={"s": fake_store}))
    cases["null column name"] = ("{ stores { name columns { name type } } }", context)
    return cases


def test_a_null_in_a_non_null_field_is_an_error_at_that_field_as_in_graphql_core(
    project: Project, schema: GraphQLSchema
) -> None:
    async def go() -> list[str]:
        differences = []
        for name, (text, context) in broken_cases(project).items():
            baseline, fast = await both(schema, parse(text), context)
            assert baseline[1], f"{name}: the case must make graphql-core report an error"
            if fast != baseline:
                differences.append(describe(name, baseline, fast))
        return differences

    differences = asyncio.run(go())
    assert not differences, "\n".join(differences)


def test_a_value_a_nullable_leaf_cannot_represent_nulls_only_that_leaf(
    project: Project, schema: GraphQLSchema
) -> None:
    context = Data(random.Random(61), project, nulls=0.0).context()
    partition_map = PartitionMap(
        "node1", 1, 1, {}, {"node1": "h:1"},
        [PartitionInfo(0, [ReplicaInfo("node1", "h:1", True, True, 2**40, {}, None)], [])],
        0, 0, None, None, [],
    )  # fmt: skip
    context.node.partition_map = lambda: partition_map
    document = parse("{ cluster { node partitions { replicas { node version } } } }")
    baseline, fast = asyncio.run(both(schema, document, context))
    assert baseline == (
        {
            "cluster": {
                "node": "node1",
                "partitions": [{"replicas": [{"node": "node1", "version": None}]}],
            }
        },
        [
            (
                "Int cannot represent non 32-bit signed integer value: 1099511627776",
                ["cluster", "partitions", 0, "replicas", 0, "version"],
            )
        ],
    )
    assert fast == baseline, describe("an Int out of range", baseline, fast)


def describe(name: str, baseline: Result, fast: Result) -> str:
    return (
        f"{name}:\n  graphql-core: data={baseline[0]!r}\n                errors={baseline[1]!r}"
        f"\n  fast path:    data={fast[0]!r}\n                errors={fast[1]!r}"
    )


def test_a_datetime_keeps_its_own_zone_through_the_memo() -> None:
    """DateTime leaves are memoized for UTC instants only: an equal instant in another zone
    is serialized with its own offset, whichever came first."""
    scalar = GraphQLScalarType("DateTime", serialize=methodcaller("isoformat"))
    leaf = PlanCompiler(collect=None).compile(scalar, [])  # type: ignore[arg-type]
    assert leaf is not None
    utc = datetime(2026, 1, 1, tzinfo=UTC)
    berlin = utc.astimezone(timezone(timedelta(hours=1)))
    assert berlin == utc
    assert [leaf(utc), leaf(berlin), leaf(utc)] == [
        "2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+01:00", "2026-01-01T00:00:00+00:00"
    ]  # fmt: skip
