"""Values that escape the error model: a log written by another producer with NaN and
Infinity doubles, a sum past the double range, lone surrogates and timestamp 0, built by the
real pipeline and served by two real nodes (each hosting one of two partitions, so every
query kind also crosses the internal hop). Every answer must equal the oracle's, which
reads such values by the README's policy, on both nodes; bad inputs get their codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts import eventlog
from contracts import project as projects
from contracts.partitioner import partition_for
from contracts.project import Project
from gateway.model import cursors
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports
from tests import oracle, wire
from tests.nodes import Nodes
from tests.projects import HOUR_MS, START_MS, write_project

PARTITIONS = 2
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
WIDE = {"from": "1969-12-31T00:00:00Z", "to": "2027-01-01T00:00:00Z"}
AROUND = (0, START_MS)  # the windows of a key lie within an hour of one of these
# (topic, key, timestamp, value as JSON text): what a foreign producer wrote, unchecked
RAW = [
    ("bookings", "nan", START_MS, '{"trip": "A", "price": NaN, "seats": 1}'),
    ("bookings", "nan", START_MS + 1, '{"trip": "B", "price": 10.5, "seats": 2}'),
    ("bookings", "inf", START_MS, '{"trip": "C", "price": Infinity, "seats": 1}'),
    ("bookings", "inf", START_MS + 2, '{"trip": "D", "price": -Infinity, "seats": 1}'),
    ("bookings", "huge", START_MS, '{"trip": "E", "price": 1e999, "seats": 1}'),
    ("bookings", "big", START_MS, '{"trip": "F", "price": 1e308, "seats": 1}'),
    ("bookings", "big", START_MS + 3, '{"trip": "G", "price": 1.5e308, "seats": 1}'),
    ("bookings", "surrogate", START_MS, '{"trip": "x\\ud800y\\udc00", "price": 3.25, "seats": 1}'),
    ("bookings", "pair", START_MS, '{"trip": "\\ud83d\\ude86", "price": 2.0, "seats": 1}'),
    ("bookings", "epoch", 0, '{"trip": "H", "price": 1.5, "seats": 1}'),
    ("bookings", "epoch", 1, '{"trip": "I", "price": NaN, "seats": 1}'),
    ("trains", 0, 0, '{"delay": 4, "station": "\\udfff", "cancelled": false}'),
    ("trains", 7, HOUR_MS, '{"delay": 1, "station": "K\\u00f6ln", "cancelled": null}'),
]
TABLES = ["latestBooking", "customerTotals", "trainStatus", "trainDelays"]
WINDOWS = ["hourlyRevenue", "delaysHopping"]


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("values")
    project = projects.load(write_project(root, free_ports(2), PARTITIONS, replicas=1))
    write_raw(project)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, root)
    nodes.start_all()
    yield nodes
    nodes.stop_all()


def write_raw(project: Project) -> None:
    """One segment per topic partition, written with pyarrow as another producer would."""
    by_segment: dict[tuple[str, int], list[tuple[Any, int, str]]] = {}
    for topic, key, stamp, value in RAW:
        p = partition_for(key, project.topics[topic].key_type, PARTITIONS)
        by_segment.setdefault((topic, p), []).append((key, stamp, value))
    assert {p for _, p in by_segment} == set(range(PARTITIONS)), "both nodes must own keys"
    for (topic, p), rows in by_segment.items():
        folder = eventlog.partition_dir(project.log_dir, topic, p)
        folder.mkdir(parents=True)
        table = pa.table(
            {
                "offset": list(range(len(rows))),
                "timestamp": [stamp for _, stamp, _ in rows],
                "key": [key for key, _, _ in rows],
                "value": [value for _, _, value in rows],
            },
            schema=eventlog.record_schema(project.topics[topic]),
        )
        pq.write_table(table, folder / f"{0:020d}.parquet")


def millis(text: str) -> int:
    return (datetime.fromisoformat(text) - EPOCH) // timedelta(milliseconds=1)


def iso(ms: int) -> str:
    return (EPOCH + timedelta(milliseconds=ms)).isoformat()


def row_of(project: Project, name: str, record: dict[str, Any]) -> tuple:
    store = project.stores[name]
    window = (millis(record["windowStart"]),) if store.kind == "window" else ()
    key = wire.field(store.key_type, record["key"])
    return (key, *window, *(wire.field(t, record[c]) for c, t in store.columns.items()))


def fields(project: Project, name: str) -> str:
    window = ["windowStart"] if project.stores[name].kind == "window" else []
    return " ".join(["key", *window, *project.stores[name].columns])


def expected(project: Project, name: str) -> list[tuple]:
    rows = [r for part in oracle.expected_store(project, name).values() for r in part]
    width = 2 if project.stores[name].kind == "window" else 1
    return sorted(rows, key=lambda r: r[:width])


def key_type(project: Project, name: str) -> str:
    return "String" if project.stores[name].key_type == "string" else "Int"


def test_the_oracle_reads_the_awkward_values_by_the_policy(cluster: Nodes) -> None:
    totals = {r[0]: r for r in expected(cluster.project, "customerTotals")}
    # (key, bookings, revenue, seats, cheapest, dearest)
    assert totals["nan"] == ("nan", 2, 10.5, 3, 10.5, 10.5)
    assert totals["inf"] == ("inf", 2, None, 2, None, None)
    assert totals["big"] == ("big", 2, None, 2, 1e308, 1.5e308)  # the sum overflows
    latest = {r[0]: r for r in expected(cluster.project, "latestBooking")}
    assert latest["surrogate"][1] == "x\ufffdy\ufffd" and latest["pair"][1] == "🚆"
    assert latest["epoch"][2] is None
    hopping = [r[:2] for r in expected(cluster.project, "delaysHopping") if r[0] == 0]
    assert hopping == [(0, -HOUR_MS // 2), (0, 0)]  # timestamp 0 is epoch 0


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_every_query_kind_answers_the_oracle_on_every_node(cluster: Nodes, node: str) -> None:
    project = cluster.project
    for name in TABLES:
        rows = expected(project, name)
        keys = [r[0] for r in rows]
        got = cluster.data(
            node,
            f"query($keys: [{key_type(project, name)}!]!) {{ {name}Batch(keys: $keys) "
            f"{{ entries {{ record {{ {fields(project, name)} }} }} }} }}",
            {"keys": keys},
        )
        batch = [row_of(project, name, e["record"]) for e in got[f"{name}Batch"]["entries"]]
        assert batch == rows
        for row in rows:
            one = cluster.data(
                node,
                f"query($k: {key_type(project, name)}!) {{ {name}(key: $k) "
                f"{{ record {{ {fields(project, name)} }} }} }}",
                {"k": row[0]},
            )[name]["record"]
            assert row_of(project, name, one) == row
        assert scanned(cluster, node, f"{name}Range", name, {}) == rows
    for name in WINDOWS:
        rows = expected(project, name)
        assert scanned(cluster, node, f"{name}All", name, WIDE) == rows
        for key in sorted({r[0] for r in rows}, key=str):
            got = [
                window
                for at in AROUND
                for window in cluster.data(
                    node,
                    f"query($k: {key_type(project, name)}!, $from: DateTime!, $to: DateTime!) "
                    f"{{ {name}(key: $k, from: $from, to: $to) "
                    f"{{ windows {{ {fields(project, name)} }} }} }}",
                    {"k": key, "from": iso(at - HOUR_MS), "to": iso(at + HOUR_MS)},
                )[name]["windows"]
            ]
            mine = [r for r in rows if r[0] == key]
            assert [row_of(project, name, w) for w in got] == mine


def scanned(cluster: Nodes, node: str, field: str, name: str, span: dict[str, str]) -> list:
    """Every row of a scan, two per page, following the cursors."""
    rows, after = [], None
    args = ", ".join(f'{k}: "{v}"' for k, v in span.items())
    while True:
        page = cluster.data(
            node,
            f"query($after: String) {{ {field}({args}{', ' if args else ''}first: 2, "
            f"after: $after) {{ records {{ {fields(cluster.project, name)} }} "
            "pageInfo { hasNextPage endCursor } } }",
            {"after": after},
        )[field]
        rows += [row_of(cluster.project, name, r) for r in page["records"]]
        if not page["pageInfo"]["hasNextPage"]:
            return rows
        after = page["pageInfo"]["endCursor"]


def test_bounds_finer_than_a_millisecond_never_reach_outside_the_range(cluster: Nodes) -> None:
    query = (
        'query($from: DateTime!, $to: DateTime!) { hourlyRevenue(key: "epoch", from: $from, '
        "to: $to) { windows { windowStart } } }"
    )
    for node in cluster.ids:
        starts = [
            [
                millis(w["windowStart"])
                for w in cluster.data(node, query, span)["hourlyRevenue"]["windows"]
            ]
            for span in (
                {"from": "1969-12-31T23:59:59.9999Z", "to": "1970-01-01T00:00:00.0009Z"},
                {"from": "1970-01-01T00:00:00.0001Z", "to": "1970-01-01T02:00:00Z"},
            )
        ]
        assert starts == [[0], []]
        within_one = {"from": "1970-01-01T00:00:00.0001Z", "to": "1970-01-01T00:00:00.0009Z"}
        body = cluster.gql(node, query, within_one)
        assert body["errors"][0]["extensions"]["code"] == "INVALID_RANGE"


LONE = "\ud800"
CURSOR_CASES = [
    (
        cursors.encode("hourlyRevenue", ["epoch", 1]),
        "no window of hourlyRevenue starts at 1970-01-01T00:00:00.001+00:00 "
        "(they start every 3600000 ms from the epoch)",
    ),
    (
        cursors.encode("hourlyRevenue", ["epoch", -HOUR_MS]),
        "its window start 1969-12-31T23:00:00+00:00 is outside this query's from and to, "
        "[1970-01-01T00:00:00+00:00, 1970-01-02T00:00:00+00:00]",
    ),
    (cursors.encode("hourlyRevenue", ["epoch", 2 * START_MS]), "is outside this query's"),
    (cursors.encode("hourlyRevenue", ["epoch"]), "a key scan's cursor, not a window scan's"),
    (cursors.encode("latestBooking", ["epoch", 0]), 'another store, "latestBooking"'),
]


def escaped_post(cluster: Nodes, node: str, query: str, variables: dict) -> dict[str, Any]:
    """A request whose variables hold lone surrogates as JSON escapes (httpx refuses to
    encode them; Python's json writes them as another client would)."""
    response = cluster.client.post(
        f"{cluster.url(node)}/graphql",
        content=json.dumps({"query": query, "variables": variables}),
        headers={"content-type": "application/json"},
    )
    assert response.status_code in (200, 400), response.text
    body: dict[str, Any] = response.json()
    return body


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_bad_values_in_queries_get_their_codes(cluster: Nodes, node: str) -> None:
    literal = cluster.gql(node, '{ latestBooking(key: "\\uD800") { key } }')
    (error,) = literal["errors"]  # GraphQL's grammar has no lone surrogate escape
    assert error["extensions"]["code"] == "GRAPHQL_PARSE_FAILED"
    assert "Invalid Unicode escape sequence" in error["message"]
    refused = [
        ("query($k: String!) { latestBooking(key: $k) { key } }", {"k": LONE}),
        ("query($k: [String!]!) { customerTotalsBatch(keys: $k) { entries { key } } }",
         {"k": ["ok", "a" + LONE]}),
        ('query($k: String!) { latestBookingPrefix(prefix: $k) { records { key } } }', {"k": LONE}),
        ('query($k: String!) { latestBookingRange(from: $k) { records { key } } }', {"k": LONE}),
        ('query($k: String!) { hourlyRevenue(key: $k, from: "1970-01-01T00:00:00Z", '
         'to: "1970-01-01T01:00:00Z") { key } }', {"k": LONE}),
    ]  # fmt: skip
    for query, variables in refused:  # JSON that cannot be UTF-8: refused by the transport
        body = escaped_post(cluster, node, query, variables)
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "BAD_REQUEST", body
        assert "surrogate" in error["message"]
    for cursor, why in CURSOR_CASES:
        body = cluster.gql(
            node,
            f'{{ hourlyRevenueAll(from: "1970-01-01T00:00:00Z", to: "1970-01-02T00:00:00Z", '
            f'after: "{cursor}") {{ records {{ key }} }} }}',
        )
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "BAD_CURSOR" and why in error["message"], body
    wide_key = cursors.encode("trainStatus", [2**40])
    body = cluster.gql(node, f'{{ trainStatusRange(after: "{wide_key}") {{ records {{ key }} }} }}')
    assert body["errors"][0]["extensions"]["code"] == "BAD_CURSOR"
    assert cluster.data(node, '{ latestBooking(key: "epoch") { key } }')  # still serving


@pytest.mark.parametrize("node", ["node1", "node2"])
def test_by_value_reads_non_finite_doubles_as_null(cluster: Nodes, node: str) -> None:
    """Ranked by each double column, NaN and Infinity (read as null) come last and match
    isNull; totals skip them, as the oracle reads them."""
    project = cluster.project
    for name in ("latestBooking", "customerTotals"):
        store = project.stores[name]
        rows = expected(project, name)
        for i, (column, kind) in enumerate(store.columns.items(), start=1):
            if kind != "double":
                continue
            valued = sorted((r for r in rows if r[i] is not None), key=lambda r: (-r[i], r[0]))
            nulls = sorted((r for r in rows if r[i] is None), key=lambda r: r[0])
            order = "".join(f"_{c}" if c.isupper() else c for c in column).upper() + "_DESC"
            data = cluster.data(
                node,
                f"{{ ranked: {name}List(orderBy: [{order}], first: 100) "
                f"{{ records {{ {fields(project, name)} }} }} "
                f"nulls: {name}List(where: {{{column}: {{isNull: true}}}}) "
                f"{{ records {{ key }} }} "
                f"totals: {name}Aggregate {{ sum {{ {column} }} min {{ {column} }} "
                f"max {{ {column} }} }} }}",
            )
            ranked = [row_of(project, name, r) for r in data["ranked"]["records"]]
            assert ranked == valued + nulls, column
            assert [r["key"] for r in data["nulls"]["records"]] == [r[0] for r in nulls]
            values = [r[i] for r in valued]
            assert data["totals"]["sum"][column] == pytest.approx(sum(values), rel=1e-12)
            assert data["totals"]["min"][column] == min(values)
            assert data["totals"]["max"][column] == max(values)
