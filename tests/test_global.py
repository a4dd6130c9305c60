"""Global stores (contracts/chains.py): every node holds every partition of them and answers
their queries alone, with no internal request, each partition's answer stating the
positions it was read at; all of it against the oracle computed from the raw log."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from contracts import chains
from contracts import project as projects
from contracts.partitioner import partition_for
from stategate.launcher import free_ports, wait_healthy
from tests import oracle, wire
from tests.nodes import Nodes, Served, metric
from tests.projects import reading, write_project
from tests.wire import as_row, selection

NODES = ["node1", "node2", "node3"]
GLOBAL = ["timetable", "tripTotals"]
META = "meta { partitions { partition node role version failure position { topic offset } } }"


def expected_rows(served, name: str) -> dict[Any, tuple]:
    return {r[0]: r for rows in oracle.expected_store(served.project, name).values() for r in rows}


def answered_alone(body: dict[str, Any], node: str) -> None:
    """The request's every sub-query ran on `node` itself, in one round."""
    assert not body.get("errors"), body["errors"]
    (round_,) = body["extensions"]["routing"]["rounds"]
    assert set(round_) == {node}


def check_partitions(served, meta: dict[str, Any], node: str) -> None:
    positions = oracle.expected_chain_positions(served.project)
    for part in meta["partitions"]:
        assert part["node"] == node and part["role"] == "ACTIVE" and part["failure"] is None
        chain = chains.global_chain(served.project, part["partition"])
        assert (
            wire.offsets(part["position"])
            == positions[chain]
            == {"trips": pytest.approx(positions[chain]["trips"])}
        )


@pytest.mark.parametrize("node", NODES)
def test_every_node_answers_every_key_of_a_global_store_alone(served, node: str) -> None:
    for name in GLOBAL:
        store = served.project.stores[name]
        assert store.is_global
        expected = expected_rows(served, name)
        keys = ["no such trip", *expected]
        query = (
            f"query($keys: [String!]!) {{ {name}Batch(keys: $keys) {{ entries {{ key partition "
            f"failure record {{ {selection(store)} }} }} {META} }} }}"
        )
        body = served.nodes.gql(node, query, {"keys": keys})
        answered_alone(body, node)
        result = body["data"][f"{name}Batch"]
        assert len(expected) > 10 and [e["key"] for e in result["entries"]] == keys
        for entry in result["entries"]:
            assert entry["failure"] is None
            assert entry["partition"] == partition_for(entry["key"], "string", 9)
            row = expected.get(entry["key"])
            assert (None if entry["record"] is None else as_row(store, entry["record"])) == (
                pytest.approx(row)
            )
        check_partitions(served, result["meta"], node)


@pytest.mark.parametrize("node", NODES)
def test_a_global_store_is_listed_by_value_without_leaving_the_node(served, node: str) -> None:
    store = served.project.stores["timetable"]
    rows = sorted(expected_rows(served, "timetable").values(), key=lambda r: (-r[2], r[0]))
    query = (
        f"{{ timetableList(orderBy: [FARE_DESC], first: 10) {{ records {{ {selection(store)} }} "
        f"{META} }} }}"
    )
    body = served.nodes.gql(node, query)
    answered_alone(body, node)
    page = body["data"]["timetableList"]
    got = [as_row(store, r) for r in page["records"]]
    assert len(got) == 10 and all(g == pytest.approx(e) for g, e in zip(got, rows, strict=False))
    assert sorted(p["partition"] for p in page["meta"]["partitions"]) == list(range(9))
    check_partitions(served, page["meta"], node)


def test_every_node_holds_every_global_chain_and_only_its_own_partitions(served) -> None:
    project = served.project
    for node in NODES:
        held = {int(p) for p in served.nodes.status(node)["partitions"]}
        own = set(project.cluster.hosted_by(node))
        assert held == own | set(chains.global_chains(project))
        ready = served.nodes.client.get(f"{served.nodes.url(node)}/ready").json()
        assert ready["ready"] and set(ready["versions"]) == {str(p) for p in own}


def referenced(served) -> tuple[set[str], set[str]]:
    """The trips the log deletes (set, then a tombstone last) and those it never sets."""
    log = oracle.records(served.project, "trips")
    latest = {r["key"]: r["value"] for r in sorted(log, key=lambda r: r["offset"])}
    deleted = {key for key, value in latest.items() if value is None}
    bookings = expected_rows(served, "latestBooking").values()
    never = {row[1] for row in bookings if row[1] is not None} - set(latest)
    return deleted, never


@pytest.mark.parametrize("node", NODES)
def test_every_booking_joins_its_trip_as_the_log_says(served, node: str) -> None:
    bookings, trips = expected_rows(served, "latestBooking"), expected_rows(served, "timetable")
    store, timetable = served.project.stores["latestBooking"], served.project.stores["timetable"]
    deleted, never = referenced(served)
    trips_of = {row[1] for row in bookings.values()}
    assert trips_of & deleted and trips_of & never and None in trips_of, "the data covers them"
    query = (
        f"query($keys: [String!]!) {{ latestBookingBatch(keys: $keys) {{ entries {{ key "
        f"record {{ {selection(store)} journey {{ {selection(timetable)} }} }} }} "
        f"meta {{ partitionsAsked partitions {{ store partition node role failure "
        f"position {{ topic offset }} }} }} }} }}"
    )
    body = served.nodes.gql(node, query, {"keys": list(bookings)})
    assert not body.get("errors"), body["errors"]
    result = body["data"]["latestBookingBatch"]
    for entry in result["entries"]:
        record = entry["record"]
        assert as_row(store, record) == pytest.approx(bookings[entry["key"]])
        trip = trips.get(record["trip"])
        journey = record["journey"]
        assert (None if journey is None else as_row(timetable, journey)) == pytest.approx(trip)
    joined = [p for p in result["meta"]["partitions"] if p["store"] == "timetable"]
    asked = {partition_for(t, "string", 9) for t in trips_of if t is not None}
    assert sorted(p["partition"] for p in joined) == sorted(asked)
    check_partitions(served, {"partitions": joined}, node)
    own = [p for p in result["meta"]["partitions"] if p["store"] == "latestBooking"]
    assert result["meta"]["partitionsAsked"] == len(own) + len(joined)


@pytest.mark.parametrize("node", NODES)
def test_a_page_joins_its_records_and_a_request_without_the_join_reads_no_trip(
    served, node: str
) -> None:
    bookings, trips = expected_rows(served, "latestBooking"), expected_rows(served, "timetable")
    top = sorted(
        (row for row in bookings.values() if row[2] is not None), key=lambda r: (-r[2], r[0])
    )[:25]
    page = (
        "latestBookingList(orderBy: [PRICE_DESC], first: 25) { records { key trip %s } "
        "meta { partitions { store } } }"
    )
    body = served.nodes.gql(node, "{ %s }" % (page % "journey { key fare }"))
    assert not body.get("errors"), body["errors"]
    records = body["data"]["latestBookingList"]["records"]
    assert [r["key"] for r in records] == [row[0] for row in top]
    for record in records:
        trip = trips.get(record["trip"])
        expected = None if trip is None else {"key": trip[0], "fare": pytest.approx(trip[2])}
        assert record["journey"] == expected
    plain = served.nodes.gql(node, "{ %s }" % (page % ""))
    assert len(plain["extensions"]["routing"]["rounds"]) == 1
    meta = plain["data"]["latestBookingList"]["meta"]
    assert {p["store"] for p in meta["partitions"]} == {"latestBooking"}


@pytest.mark.parametrize("node", NODES)
def test_a_join_whose_field_is_null_in_every_row_is_null(served, node: str) -> None:
    """README, Global stores and joins: "null when the field is null", also when no row of
    the answer has a value to join on (so no joined store is read at all)."""
    bookings = expected_rows(served, "latestBooking")
    tripless = sorted(key for key, row in bookings.items() if row[1] is None)
    assert tripless, "the data has bookings without a trip"
    record = "record { key trip journey { key fare } }"
    one = served.nodes.gql(
        node, f"query($k: String!) {{ latestBooking(key: $k) {{ {record} }} }}", {"k": tripless[0]}
    )
    assert not one.get("errors"), one["errors"]
    assert one["data"]["latestBooking"]["record"] == {
        "key": tripless[0], "trip": None, "journey": None
    }  # fmt: skip
    batch = served.nodes.gql(
        node,
        f"query($k: [String!]!) {{ latestBookingBatch(keys: $k) {{ entries {{ {record} }} }} }}",
        {"k": tripless},
    )
    assert not batch.get("errors"), batch["errors"]
    entries = batch["data"]["latestBookingBatch"]["entries"]
    assert [e["record"] for e in entries] == [
        {"key": key, "trip": None, "journey": None} for key in tripless
    ]
    page = served.nodes.gql(
        node,
        "{ latestBookingList(where: { trip: { isNull: true } }, first: 100) "
        "{ records { key trip journey { key } } } }",
    )
    assert not page.get("errors"), page["errors"]
    records = page["data"]["latestBookingList"]["records"]
    assert records == [{"key": key, "trip": None, "journey": None} for key in tripless]


def test_every_node_reports_what_it_holds_of_the_global_stores(served) -> None:
    for node in NODES:
        samples = served.nodes.metrics(node)
        assert metric(samples, "stategate_global_layers_bytes") > 0
        for name in GLOBAL:
            assert metric(samples, "stategate_global_store_memory_bytes", store=name) > 0


def test_global_stores_past_max_global_mb_are_refused_and_the_rest_serves(
    served, tmp_path: Path
) -> None:
    cluster = bounded(served, tmp_path, settings="max_global_mb = 0.001")
    try:
        cluster.nodes.start("node1")
        url = cluster.nodes.url("node1")
        wait_healthy(url)
        ready = cluster.nodes.client.get(f"{url}/ready")
        assert ready.status_code == 503
        message = ready.json()["error"]["message"]
        assert "of the global stores: [0, 1, 2, 3, 4, 5, 6, 7, 8]" in message
        assert "over max_global_mb (0.001): not installed" in message
        own = cluster.project.cluster.hosted_by("node1")
        assert {int(p) for p in cluster.nodes.status("node1")["partitions"]} == set(own)
        assert all(
            "max_global_mb" in e for e in cluster.nodes.status("node1")["sync_errors"].values()
        )
        key = next(k for k in expected_rows(cluster, "latestBooking")
                   if partition_for(k, "string", 9) in own)  # fmt: skip
        data = cluster.nodes.data("node1", f'{{ latestBooking(key: "{key}") {{ failure }} }}')
        assert data["latestBooking"]["failure"] is None
        body = cluster.nodes.gql("node1", '{ timetable(key: "Berlin→Hamburg") { failure } }')
        assert body["data"]["timetable"]["failure"] in ("NOT_PRESENT", "NODE_UNAVAILABLE")
    finally:
        cluster.nodes.stop_all()


def bounded(served, root: Path, settings: str) -> Served:
    """The served cluster's log and snapshot store, read by nodes of their own (on other
    ports, with their own folders) under other `settings`: nothing is built again."""
    path = write_project(root, free_ports(3), settings=settings)
    reading(path, served.project)
    project = projects.load(path)
    return Served(root, project, Nodes(project, root))
