"""Long keys and values past 2^53 stay exact on the wire: a Long is a decimal string in every
response (so a client whose numbers are doubles, JavaScript's, keeps every digit) and is read
from a decimal string or an integer. Built by the real pipeline, served by two real nodes
that own one partition each (so every query also crosses the internal hop), on the compiled
path and the general one, over HTTP and WebSocket, against the oracle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from contracts import eventlog
from contracts import project as projects
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from stategate.launcher import free_ports
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Nodes
from tests.projects import HOUR_MS, START_MS
from tests.wire import millis

PROJECT = """
[cluster]
partitions = 2
replicas = 1
secret = "test-secret"
nodes = [
  {{ id = "n1", address = "127.0.0.1:{ports[0]}", data_dir = "n1" }},
  {{ id = "n2", address = "127.0.0.1:{ports[1]}", data_dir = "n2" }},
]

[[topics]]
name = "accounts"
key = "long"
value = {{ balance = "long", owner = "string" }}

[[stores]]
name = "account"
kind = "table"
topic = "accounts"

[[stores]]
name = "accountTotals"
kind = "aggregate"
topic = "accounts"
aggregates = {{ updates = "count", total = "sum(balance)", largest = "max(balance)" }}

[[stores]]
name = "accountHourly"
kind = "window"
topic = "accounts"
size = "1h"
aggregates = {{ updates = "count", largest = "max(balance)" }}
"""
JS_LIMIT = 2**53  # past this, a double (a JavaScript number) no longer holds every integer
NEIGHBOURS = [JS_LIMIT, JS_LIMIT + 1, JS_LIMIT + 2]  # one double apart: 2^53 + 1 reads as 2^53
KEYS = [*NEIGHBOURS, 2**63 - 1, -(2**63), -JS_LIMIT - 1, -1, 0, 1, 42, 10**18 + 7]
BALANCES = [2**62 + 3, JS_LIMIT + 1, -(2**62) - 5, 7, 0, -3]
FIELDS = {
    "account": "key balance owner",
    "accountTotals": "key updates total largest",
    "accountHourly": "key windowStart updates largest",
}
TOTALS = "accountTotals(key: $k) { key partition record { key updates total largest } }"
# Keys of partition 0 at 2^62 and of partition 1 at -2^62: each partition's part of a sum of
# balances is past 64 bits, and the whole sum is not.
SUMMANDS = {k: (-1) ** partition_for(k, "long", 2) * 2**62 for k in range(100, 112)}
LONG = range(-(2**63), 2**63)


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nodes]:
    root = tmp_path_factory.mktemp("longs")
    path = root / "stategate.toml"
    path.write_text(PROJECT.format(ports=free_ports(2)))
    project = projects.load(path)
    assert {partition_for(k, "long", 2) for k in KEYS} == {0, 1}, "both nodes must own keys"
    records = [
        Record(key, {"balance": BALANCES[(i + j) % len(BALANCES)], "owner": f"o{i}"},
               START_MS + (i * 7 + j) * HOUR_MS // 3)
        for i, key in enumerate(KEYS)
        for j in range(1 + i % 3)
    ]  # fmt: skip
    records += [Record(k, {"balance": b, "owner": "big"}, START_MS) for k, b in SUMMANDS.items()]
    eventlog.produce(project.log_dir, project.topics["accounts"], 2, records)
    job.run(project, spark, notify=False)
    nodes = Nodes(project, root)
    nodes.start_all()
    yield nodes
    nodes.stop_all()


def expected(cluster: Nodes, store: str) -> list[tuple]:
    rows = [r for part in oracle.expected_store(cluster.project, store).values() for r in part]
    return sorted(rows, key=lambda r: r[:2] if store == "accountHourly" else r[:1])


def row_of(cluster: Nodes, store: str, record: dict[str, Any]) -> tuple:
    """A record as the oracle's row, each Long read back from its decimal string."""
    columns = cluster.project.stores[store].columns
    window = [millis(record["windowStart"])] if store == "accountHourly" else []
    values = [wire.field(t, record[c]) for c, t in columns.items()]
    return (wire.long(record["key"]), *window, *values)


def as_javascript(text: str) -> Any:
    """The response as JSON.parse reads it, failing where it would lose digits: any integer
    past 2^53 in the JSON (a Long must be a string)."""

    def number(digits: str) -> int:
        assert abs(int(digits)) <= JS_LIMIT, f"{digits} would be rounded by a JavaScript client"
        return int(digits)

    return json.loads(text, parse_int=number)


def post(cluster: Nodes, node: str, query: str, variables: dict[str, Any] | None = None) -> Any:
    response = cluster.client.post(
        f"{cluster.url(node)}/graphql", json={"query": query, "variables": variables or {}}
    )
    assert response.status_code == 200, response.text
    body = as_javascript(response.text)
    assert not body.get("errors"), body["errors"]
    return body["data"]


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_every_key_and_value_past_two_to_the_53_comes_back_exact(cluster: Nodes, node: str) -> None:
    for store in ("account", "accountTotals"):
        rows = expected(cluster, store)
        keys = [str(r[0]) for r in rows]
        data = post(
            cluster,
            node,
            f"query($ks: [Long!]!) {{ {store}Batch(keys: $ks) "
            f"{{ entries {{ key record {{ {FIELDS[store]} }} }} }} }}",
            {"ks": keys},
        )
        entries = data[f"{store}Batch"]["entries"]
        assert [e["key"] for e in entries] == keys
        assert [row_of(cluster, store, e["record"]) for e in entries] == rows
        scanned, after = [], None
        while True:  # a range scan from the smallest Long to the largest, three rows a page
            page = post(
                cluster,
                node,
                f'query($after: String) {{ {store}Range(from: "{-(2**63)}", '
                f'to: "{2**63 - 1}", first: 3, after: $after) {{ records {{ {FIELDS[store]} }} '
                "pageInfo { hasNextPage endCursor } } }",
                {"after": after},
            )[f"{store}Range"]
            scanned += [row_of(cluster, store, r) for r in page["records"]]
            if not page["pageInfo"]["hasNextPage"]:
                break
            after = page["pageInfo"]["endCursor"]
        assert scanned == rows
    windows = expected(cluster, "accountHourly")
    data = post(
        cluster,
        node,
        'query { accountHourlyAll(from: "2026-01-01T00:00:00Z", to: "2026-01-03T00:00:00Z", '
        f"first: 1000) {{ records {{ {FIELDS['accountHourly']} }} }} }}",
    )
    got = [row_of(cluster, "accountHourly", r) for r in data["accountHourlyAll"]["records"]]
    assert got == windows and len(got) > len(KEYS)


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_neighbours_one_double_apart_are_told_apart_however_the_key_is_written(
    cluster: Nodes, node: str
) -> None:
    rows = {r[0]: r for r in expected(cluster, "accountTotals")}
    for key in NEIGHBOURS:
        answers = [
            post(cluster, node, f"query($k: Long!) {{ {TOTALS} }}", {"k": str(key)}),
            post(cluster, node, f"query($k: Long!) {{ {TOTALS} }}", {"k": key}),  # convenience
            post(cluster, node, TOTALS.replace("$k", f'"{key}"').join(["{ ", " }"])),
            post(cluster, node, TOTALS.replace("$k", str(key)).join(["{ ", " }"])),
            # __typename takes the general path, not the compiled plan: the same answer
            post(cluster, node, f"query($k: Long!) {{ __typename {TOTALS} }}", {"k": str(key)}),
        ]
        for data in answers:
            lookup = data["accountTotals"]
            assert lookup["key"] == str(key)
            assert lookup["partition"] == partition_for(key, "long", 2)
            assert row_of(cluster, "accountTotals", lookup["record"]) == rows[key]
        assert all(a["accountTotals"] == answers[0]["accountTotals"] for a in answers)


def test_a_subscription_pushes_long_keys_and_offsets_as_strings(cluster: Nodes) -> None:
    key = JS_LIMIT + 1
    rows = {r[0]: r for r in expected(cluster, "accountTotals")}
    for node in cluster.ids:
        socket = Socket(cluster.url(node))
        try:
            socket.subscribe(
                "s",
                "subscription($k: Long!) { accountTotals(key: $k) { key record "
                "{ key updates total largest } meta { position { topic partition offset } } } }",
                {"k": str(key)},
            )
            payload = socket.next_of("s")
        finally:
            socket.close()
        result = as_javascript(json.dumps(payload))["data"]["accountTotals"]
        assert result["key"] == str(key)
        assert row_of(cluster, "accountTotals", result["record"]) == rows[key]
        (position,) = result["meta"]["position"]
        ends = oracle.expected_positions(cluster.project)[partition_for(key, "long", 2)]
        assert wire.long(position["offset"]) == ends["accounts"]
        extension = payload["extensions"]["position"]["accounts"]
        assert extension == {str(position["partition"]): position["offset"]}


@pytest.mark.parametrize("node", ["n1", "n2"])
def test_a_long_sum_is_exact_when_a_partitions_part_of_it_is_past_64_bits(
    cluster: Nodes, node: str
) -> None:
    """Issue 47 B: the partitions' parts of a sum are merged exactly; only a total past the
    Long range is null, and an average is the exact total over the count."""
    rows = expected(cluster, "account")
    for where, kept in (
        ("", rows),
        ('(where: { owner: { eq: "big" } })', [r for r in rows if r[2] == "big"]),
    ):
        balances = [r[1] for r in kept if r[1] is not None]
        parts = [
            sum(r[1] for r in kept if r[1] is not None and partition_for(r[0], "long", 2) == p)
            for p in (0, 1)
        ]
        total = sum(balances)
        assert total in LONG and not any(part in LONG for part in parts), "the data covers it"
        data = post(
            cluster, node, f"{{ accountAggregate{where} {{ totalCount sum {{ balance }} "
            "avg { balance } } }"
        )["accountAggregate"]  # fmt: skip
        assert wire.long(data["totalCount"]) == len(kept)
        assert wire.long(data["sum"]["balance"]) == total
        assert data["avg"]["balance"] == pytest.approx(total / len(balances))
