"""Subscriptions over graphql-transport-ws on real nodes: each subscription gets its first
result at once, then exactly the changes that touch what it reads (checked against the
oracle after every pipeline run), with positions that only move forward, on every node;
identical subscriptions are evaluated once; a client that stops reading costs one pending
update, not a queue; limits and protocol mistakes get coded answers."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from websockets.sync.client import connect
from websockets.typing import Subprotocol

from contracts.eventlog import Record
from contracts.partitioner import partition_for
from spark_pipeline import job
from spark_pipeline.spark import LazySpark
from tests import oracle, wire
from tests.live import Socket, Unread, closed_code
from tests.nodes import Served, serve
from tests.projects import HOUR_MS, START_MS, append
from tests.wire import iso

PER_CONNECTION = 50
PER_NODE = 120
SETTINGS = f"""max_subscriptions = {PER_NODE}
max_subscriptions_per_connection = {PER_CONNECTION}
connection_init_timeout_s = 1.0
"""
TOTALS = """subscription Totals($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) {
    entries { key partition record { bookings revenue seats } }
    meta { partitions { partition position { topic offset } } }
  }
}"""
QUIET_S = 2.0  # no message for this long after the nodes switched: none is coming


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("live"), spark, seed=11, settings=SETTINGS)
    yield served
    served.nodes.stop_all()


def customers_in(cluster: Served, partitions: int) -> dict[int, str]:
    """One existing customer of each of the first `partitions` partitions."""
    rows = oracle.expected_store(cluster.project, "customerTotals")
    return {p: rows[p][0][0] for p in range(partitions)}


def expected_totals(cluster: Served, keys: list[str]) -> list[dict[str, Any]]:
    count = cluster.project.cluster.partitions
    rows = {
        row[0]: row
        for part in oracle.expected_store(cluster.project, "customerTotals").values()
        for row in part
    }
    entries = []
    for key in keys:
        row = rows.get(key)
        record = (
            None
            if row is None
            else {"bookings": str(row[1]), "revenue": row[2], "seats": wire.sent(row[3])}
        )
        entries.append(
            {"key": key, "partition": partition_for(key, "string", count), "record": record}
        )
    return entries


def book(cluster: Served, keys: list[str], seed: int) -> None:
    """Produce one booking per key, then run the pipeline (which notifies the nodes)."""
    rng = random.Random(seed)
    records = [
        Record(key, {"trip": "A→B", "price": round(rng.uniform(10, 99), 2), "seats": 1}, START_MS)
        for key in keys
    ]
    append(cluster.project, "bookings", records)


def publish(cluster: Served, spark: LazySpark) -> None:
    job.run(cluster.project, spark)


def entries(payload: dict[str, Any]) -> list[dict[str, Any]]:
    assert "errors" not in payload, payload
    result: list[dict[str, Any]] = payload["data"]["customerTotalsBatch"]["entries"]
    return result


def offsets(payload: dict[str, Any]) -> dict[str, int]:
    """The result's position from its extensions (offsets are decimal strings, as in data)."""
    position: dict[str, dict[str, str]] = payload["extensions"]["position"]
    return {f"{t}/{p}": wire.long(o) for t, parts in position.items() for p, o in parts.items()}


def assert_forward(before: dict[str, int], after: dict[str, int]) -> None:
    behind = {tp: (before[tp], o) for tp, o in after.items() if tp in before and o < before[tp]}
    assert not behind, f"positions moved back: {behind}"


def test_every_node_pushes_exactly_the_changes_a_subscription_reads(
    cluster: Served, spark: LazySpark
) -> None:
    watched = customers_in(cluster, 2)  # partitions 0 and 1
    keys = [watched[0], watched[1], "nobody-at-all"]
    others = customers_in(cluster, 9)
    unread = [
        others[p] for p in range(9) if p not in {0, 1, partition_for("nobody-at-all", "string", 9)}
    ]
    sockets = {n: Socket(cluster.nodes.url(n)) for n in cluster.nodes.ids}
    try:
        last: dict[str, dict[str, Any]] = {}
        for node_id, socket in sockets.items():
            socket.subscribe("totals", TOTALS, {"keys": keys})
            last[node_id] = socket.next_of("totals")
            assert entries(last[node_id]) == expected_totals(cluster, keys)
        rounds = [([watched[0]], True), (unread[:3], False), ([watched[1], unread[3]], True)]
        for number, (booked, touches) in enumerate(rounds):
            book(cluster, booked, seed=number)
            publish(cluster, spark)
            for node_id, socket in sockets.items():
                if not touches:
                    assert socket.drain(QUIET_S) == [], f"{node_id} pushed an unchanged result"
                    continue
                payload = socket.next_of("totals", timeout=15)
                assert entries(payload) == expected_totals(cluster, keys), node_id
                assert (
                    payload["extensions"]["revision"] == last[node_id]["extensions"]["revision"] + 1
                )
                assert_forward(offsets(last[node_id]), offsets(payload))
                last[node_id] = payload
                assert socket.drain(QUIET_S) == [], f"{node_id} pushed the same change twice"
    finally:
        for socket in sockets.values():
            socket.close()


JOURNEY = """subscription Journey($key: String!) {
  latestBooking(key: $key) { record { trip journey { fare } } }
}"""


def journey_of(cluster: Served, key: str) -> dict[str, Any] | None:
    """The booking's journey as the oracle joins it: its trip's timetable fare, or None."""
    project = cluster.project
    (booking,) = [r for part in oracle.expected_store(project, "latestBooking").values()
                  for r in part if r[0] == key]  # fmt: skip
    trips = {r[0]: r for part in oracle.expected_store(project, "timetable").values() for r in part}
    trip = trips.get(booking[1])
    return None if trip is None else {"fare": trip[2]}


def test_a_subscription_pushes_when_the_record_it_joins_changes(
    cluster: Served, spark: LazySpark
) -> None:
    """A booking joins its trip in the global timetable: a new fare for the trip, then its
    deletion, reach every node's subscriber, each the oracle's join."""
    project = cluster.project
    trips = {r[0] for part in oracle.expected_store(project, "timetable").values() for r in part}
    key, trip = next(
        (r[0], r[1])
        for part in oracle.expected_store(project, "latestBooking").values()
        for r in part
        if r[1] in trips
    )
    topic = project.topics["trips"]
    sockets = {n: Socket(cluster.nodes.url(n)) for n in cluster.nodes.ids}
    try:
        for socket in sockets.values():
            socket.subscribe("journey", JOURNEY, {"key": key})
            first = socket.next_of("journey")["data"]["latestBooking"]["record"]
            assert first == {"trip": trip, "journey": journey_of(cluster, key)}
        for value in ({"route": "retimed", "fare": 1234.5, "departs": START_MS}, None):
            append(project, topic.name, [Record(trip, value, START_MS)])
            publish(cluster, spark)
            expected = journey_of(cluster, key)
            assert expected == (None if value is None else {"fare": 1234.5})
            for node_id, socket in sockets.items():
                pushed = socket.next_of("journey", timeout=15)["data"]["latestBooking"]
                assert pushed["record"]["journey"] == expected, node_id
    finally:
        for socket in sockets.values():
            socket.close()


AS_OF = """subscription AsOf($key: Int!, $at: DateTime!) {
  trainHistoryAsOf(key: $key, asOf: $at) { version { validFrom validTo record { delay } } }
}"""


def test_an_as_of_subscription_pushes_when_a_late_record_changes_the_version_then(
    cluster: Served, spark: LazySpark
) -> None:
    """A versioned store's key as of a time: a record that arrives late, with a timestamp
    just before that time, becomes the version valid then, and every node's subscriber gets
    it, as the oracle places it."""
    project = cluster.project
    store = project.stores["trainHistory"]
    at = START_MS + 5 * HOUR_MS
    history = oracle.expected_history(project, store.name)
    key = next(k for h in history.values() for k in sorted(h.versions, key=str)
               if h.as_of(k, at) is not None)  # fmt: skip
    partition = history[partition_for(key, "int", project.cluster.partitions)]
    assert partition.horizon_ms is not None and partition.horizon_ms < at - 60_000

    def version() -> dict[str, Any] | None:
        found = oracle.expected_history(project, store.name)
        v = found[partition_for(key, "int", project.cluster.partitions)].as_of(key, at)
        if v is None or v.row is None:
            return None
        end = None if v.valid_to is None else iso(v.valid_to)
        return {"validFrom": iso(v.valid_from), "validTo": end, "record": {"delay": v.row[1]}}

    def shown(pushed: dict[str, Any]) -> dict[str, Any] | None:
        found = pushed["data"]["trainHistoryAsOf"]["version"]
        if found is None:
            return None
        when = {k: found[k] and iso(wire.millis(found[k])) for k in ("validFrom", "validTo")}
        return {**found, **when}

    sockets = {n: Socket(cluster.nodes.url(n)) for n in cluster.nodes.ids}
    try:
        for socket in sockets.values():
            socket.subscribe("as-of", AS_OF, {"key": key, "at": iso(at)})
            assert shown(socket.next_of("as-of")) == version()
        late = Record(key, {"delay": 4321, "station": "Köln", "cancelled": False}, at - 60_000)
        append(project, "trains", [late])
        publish(cluster, spark)
        expected = version()
        assert expected is not None and expected["record"] == {"delay": 4321}
        for node_id, socket in sockets.items():
            assert shown(socket.next_of("as-of", timeout=15)) == expected, node_id
    finally:
        for socket in sockets.values():
            socket.close()


def live_status(cluster: Served, node_id: str) -> dict[str, int]:
    status: dict[str, int] = cluster.nodes.status(node_id)["live"]
    return status


def test_identical_subscriptions_are_evaluated_once(cluster: Served, spark: LazySpark) -> None:
    key = customers_in(cluster, 3)[2]
    node_id = cluster.nodes.ids[0]
    sockets = [Socket(cluster.nodes.url(node_id)) for _ in range(2)]
    try:
        for socket in sockets:
            for i in range(10):
                socket.subscribe(f"s{i}", TOTALS, {"keys": [key]})
        firsts = [socket.next_of(f"s{i}") for socket in sockets for i in range(10)]
        assert all(f == firsts[0] for f in firsts)
        status = live_status(cluster, node_id)
        assert (status["subscriptions"], status["cohorts"]) == (20, 1)
        before = status["evaluations"]
        book(cluster, [key], seed=99)
        publish(cluster, spark)
        updates = [socket.next_of(f"s{i}", timeout=15) for socket in sockets for i in range(10)]
        assert all(u == updates[0] for u in updates), [u["extensions"] for u in updates]
        assert entries(updates[0]) == expected_totals(cluster, [key])
        # One evaluation per switch it heard of (its own, its peers'), not one per subscriber.
        assert live_status(cluster, node_id)["evaluations"] - before <= 3
    finally:
        for socket in sockets:
            socket.close()
    deadline = time.monotonic() + 5
    while live_status(cluster, node_id)["subscriptions"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert live_status(cluster, node_id) | {"evaluations": 0} == {
        "subscriptions": 0,
        "cohorts": 0,
        "evaluations": 0,
    }


MOST_ROUNDS = 6
ROUNDS_S = 20.0  # start no round after this: the unread socket must outlive the rounds
LATEST_S = 60.0

PAGE = """subscription Page($to: DateTime!) {
  hourlyRevenueAll(from: "2026-01-01T00:00:00Z", to: $to, first: 1000) {
    records { key windowStart bookings revenue meanPrice }
  }
}"""


def test_a_client_that_stops_reading_costs_one_pending_update(
    cluster: Served, spark: LazySpark
) -> None:
    """Forty subscriptions of large pages on a connection that stops reading: the node
    keeps the latest update of each and says how many it skipped; its memory stays flat."""
    node_id = cluster.nodes.ids[1]
    slow = Unread(cluster.nodes.url(node_id))  # reads only in next_of and drain
    ids = [f"page{i}" for i in range(40)]
    try:
        for i, id in enumerate(ids):  # distinct bounds: forty cohorts, forty payloads
            slow.subscribe(id, PAGE, {"to": f"2026-01-02T00:00:{i:02d}Z"})
        for id in ids:
            slow.next_of(id)
        rss_before = cluster.nodes.rss(node_id)
        customers = list(customers_in(cluster, 9).values())
        # The client reads nothing meanwhile, so it answers no ping either: the rounds stop
        # well within uvicorn's ping interval plus timeout (20 + 20 s), however slow Spark is.
        started, rounds = time.monotonic(), 0
        while rounds < MOST_ROUNDS and (rounds < 2 or time.monotonic() - started < ROUNDS_S):
            book(cluster, customers, seed=100 + rounds)
            publish(cluster, spark)
            rounds += 1
        time.sleep(QUIET_S)
        grown = cluster.nodes.rss(node_id) - rss_before
        messages = drain_until_latest(slow, ids, cluster)
    finally:
        slow.close()
    by_id: dict[str, list[dict[str, Any]]] = {}
    for message in messages:
        assert message["type"] == "next", message
        by_id.setdefault(message["id"], []).append(message["payload"])
    expected = expected_page(cluster)
    skipped = 0
    for id in ids:
        payloads = by_id[id]
        revisions = [p["extensions"]["revision"] for p in payloads]
        assert revisions == sorted(set(revisions))
        # Every change after the first result was either sent or counted as skipped...
        skips = sum(p["extensions"].get("skipped", 0) for p in payloads)
        assert len(payloads) + skips == revisions[-1] - 1
        skipped += skips
        # ...and the last one sent is the latest state.
        assert payloads[-1]["data"]["hourlyRevenueAll"]["records"] == expected
    assert skipped > 0, "the node queued every update of a client that did not read"
    assert grown < 48 * 2**20, f"the node grew {grown / 2**20:.0f} MiB"


def drain_until_latest(socket: Unread, ids: list[str], cluster: Served) -> list[dict[str, Any]]:
    """Every message until the last of each subscription is at the log's end, as its
    positions say (however long a loaded machine takes to send the backlog), or LATEST_S."""
    end = {
        str(p): str(at["bookings"]) for p, at in oracle.expected_positions(cluster.project).items()
    }
    messages: list[dict[str, Any]] = []
    last: dict[str, Any] = {}
    deadline = time.monotonic() + LATEST_S
    while time.monotonic() < deadline:
        for message in socket.drain(QUIET_S):
            messages.append(message)
            extensions = message.get("payload", {}).get("extensions", {})
            last[message.get("id", "")] = extensions.get("position", {}).get("bookings")
        if all(last.get(id) == end for id in ids):
            break
    return messages


def expected_page(cluster: Served) -> list[dict[str, Any]]:
    rows = sorted(
        row
        for part in oracle.expected_store(cluster.project, "hourlyRevenue").values()
        for row in part
        if row[1] <= 1_767_312_000_000  # 2026-01-02T00:00:00Z
    )[:1000]
    return [
        {
            "key": key,
            "windowStart": iso(start),
            "bookings": str(bookings),
            "revenue": revenue,
            "meanPrice": mean,
        }
        for key, start, bookings, revenue, mean in rows
    ]


def error_codes(message: dict[str, Any]) -> list[str]:
    assert message["type"] == "error", message
    return [error["extensions"]["code"] for error in message["payload"]]


def test_subscription_limits_answer_with_coded_errors(cluster: Served) -> None:
    node_id = cluster.nodes.ids[2]
    url = cluster.nodes.url(node_id)
    sockets = [Socket(url) for _ in range(3)]
    try:
        first = sockets[0]
        for i in range(PER_CONNECTION):
            first.subscribe(f"s{i}", TOTALS, {"keys": ["C0001"]})
        first.subscribe("one-too-many", TOTALS, {"keys": ["C0001"]})
        refused = [m for m in first.drain(QUIET_S) if m.get("id") == "one-too-many"]
        assert [error_codes(m) for m in refused] == [["TOO_MANY_SUBSCRIPTIONS"]]
        for socket in sockets[1:]:  # up to the node's limit
            for i in range((PER_NODE - PER_CONNECTION) // 2):
                socket.subscribe(f"s{i}", TOTALS, {"keys": ["C0001"]})
            socket.drain(QUIET_S)
        assert live_status(cluster, node_id)["subscriptions"] == PER_NODE
        sockets[2].complete("s0")  # a completed one frees its place...
        sockets[2].subscribe("again", TOTALS, {"keys": ["C0001"]})
        assert sockets[2].next_of("again")["data"]
        sockets[2].subscribe("past-the-node", TOTALS, {"keys": ["C0001"]})
        (message,) = sockets[2].drain(QUIET_S)
        assert error_codes(message) == ["TOO_MANY_SUBSCRIPTIONS"]
        assert "max_subscriptions" in message["payload"][0]["message"]
    finally:
        for socket in sockets:
            socket.close()


def test_bad_documents_and_variables_get_error_messages_on_a_live_connection(
    cluster: Served,
) -> None:
    socket = Socket(cluster.nodes.url(cluster.nodes.ids[0]))
    try:
        cases = {
            "syntax": ("subscription {", None, "GRAPHQL_PARSE_FAILED"),
            "field": ("subscription { nope }", None, "GRAPHQL_VALIDATION_FAILED"),
            "two-roots": (
                'subscription { latestBooking(key: "a") { key } customerTotals(key: "a") { key } }',
                None,
                "GRAPHQL_VALIDATION_FAILED",
            ),
            "variables": (TOTALS, {"keys": 5}, "BAD_USER_INPUT"),
            "query-variables": (
                TOTALS.replace("subscription", "query"),
                {"keys": 5},
                "BAD_USER_INPUT",
            ),
            "unnamed": (
                "subscription A { stores { name } } subscription B { stores { name } }",
                None,
                "BAD_USER_INPUT",
            ),
        }
        for id, (query, variables, code) in cases.items():
            socket.subscribe(id, query, variables)
            (message,) = socket.drain(QUIET_S)
            assert message["id"] == id
            assert error_codes(message) == [code], message
        # The connection still serves: a query gets one result, then complete, like over HTTP.
        query = '{ latestBooking(key: "C0001") { key record { trip price } } }'
        socket.subscribe("q", query)
        over_http = cluster.nodes.data(cluster.nodes.ids[0], query)
        assert socket.next_of("q")["data"] == over_http
        assert socket.receive() == {"id": "q", "type": "complete"}
    finally:
        socket.close()


def test_protocol_mistakes_close_with_the_protocols_codes(cluster: Served) -> None:
    url = cluster.nodes.url(cluster.nodes.ids[0])
    ws_url = url.replace("http://", "ws://") + "/graphql"
    for offered in (None, [Subprotocol("graphql-ws")]):  # opened, then closed: not ours
        with connect(ws_url, subprotocols=offered) as ws:
            assert ws.subprotocol is None
            assert closed_code(ws) == 4406
    with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:  # no init in time
        assert closed_code(ws) == 4408
    with connect(ws_url, subprotocols=["graphql-transport-ws"]) as ws:
        ws.send(
            json.dumps(
                {"id": "1", "type": "subscribe", "payload": {"query": "{ stores { name } }"}}
            )
        )
        assert closed_code(ws) == 4401
    for message, code in (
        ("not json", 4400),
        (json.dumps({"type": "no-such-type"}), 4400),
        (json.dumps({"type": "subscribe", "id": "", "payload": {"query": "{x}"}}), 4400),
        (json.dumps({"type": "connection_init"}), 4429),
    ):
        socket = Socket(url)
        socket.ws.send(message)
        assert closed_code(socket.ws) == code, message
    socket = Socket(url)
    socket.subscribe("same", TOTALS, {"keys": ["C0001"]})
    socket.subscribe("same", TOTALS, {"keys": ["C0001"]})
    assert closed_code(socket.ws) == 4409
    socket = Socket(url)  # and the node serves on
    socket.send({"type": "ping"})
    assert socket.receive() == {"type": "pong"}
    socket.close()


def test_a_subscription_posted_over_http_is_refused_with_a_code(cluster: Served) -> None:
    body = cluster.nodes.gql(cluster.nodes.ids[0], "subscription { stores { name } }")
    assert "data" not in body  # a request error: nothing ran
    assert [e["extensions"]["code"] for e in body["errors"]] == ["SUBSCRIPTION_OVER_HTTP"]
