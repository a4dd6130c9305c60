"""The partition map as GET /cluster writes it: offsets and lag, the GraphQL API's Longs, as
decimal strings, exact past 2^53; the rest as the API has them."""

from __future__ import annotations

import orjson

from contracts import project as projects
from gateway.cluster.status import (
    KeyRoute,
    NodeStatus,
    PartitionInfo,
    PartitionMap,
    ReplicaInfo,
    key_routes,
)
from stategate.demo import PROJECT_TEMPLATE

PAST_DOUBLES = 2**53 + 1  # a JSON number a double cannot hold


def test_cluster_json_writes_offsets_and_lag_as_decimal_strings() -> None:
    replicas = [
        ReplicaInfo("node1", "127.0.0.1:1", True, True, 7, {"t": PAST_DOUBLES}, PAST_DOUBLES),
        ReplicaInfo("node2", "127.0.0.1:2", False, False, None, {}, None),
    ]
    warming = [ReplicaInfo("node3", "127.0.0.1:3", False, True, 6, {"t": 5}, 9)]
    partition_map = PartitionMap(
        "node1", 1, 2, {"t": "long"}, {"node1": "127.0.0.1:1", "node2": "127.0.0.1:2"},
        [PartitionInfo(0, replicas, warming)], 1_767_225_600_000, 3, None, None,
        [KeyRoute("trains", "key", "t", "long")], {"node1": ("0.1.0+gabc", "0123456789ab")},
        {"node1": ("seatsByCustomer",)},
    )  # fmt: skip
    body = orjson.loads(partition_map.to_json())
    (partition,) = body["partitions"]
    active, standby = partition["replicas"]
    assert active == {
        "node": "node1", "address": "127.0.0.1:1", "alive": True, "version": 7,
        "position": {"t": "9007199254740993"}, "lag": "9007199254740993", "role": "ACTIVE",
    }  # fmt: skip
    assert (standby["position"], standby["lag"], standby["role"]) == ({}, None, "STANDBY")
    (copying,) = partition["warming"]
    assert (copying["position"], copying["lag"], copying["role"]) == ({"t": "5"}, "9", "WARMING")
    assert body["nodes"] == [  # node2's release and stores not known yet (it has not said)
        {"id": "node1", "address": "127.0.0.1:1", "release": "0.1.0+gabc",
         "schema": "0123456789ab", "pending": ["seatsByCustomer"]},
        {"id": "node2", "address": "127.0.0.1:2", "release": None, "schema": None,
         "pending": None},
    ]  # fmt: skip
    assert body["generated_ms"] == 1_767_225_600_000 and body["partitions_count"] == 1
    assert body["assignment_version"] == 3  # an Int in the API
    assert body["routes"] == [
        {"field": "trains", "argument": "key", "topic": "t", "key_type": "long"}
    ]


def test_the_routes_are_the_root_fields_that_read_by_key() -> None:
    """The demo's: lookups, batches, windows and histories of its partitioned stores; no
    pages, filters or totals (they read every partition), nothing of the global timetable."""
    routes = {r.field: (r.argument, r.topic, r.key_type) for r in key_routes(
        projects.load(PROJECT_TEMPLATE))}  # fmt: skip
    assert routes == {
        "customerTotals": ("key", "bookings", "string"),
        "customerTotalsBatch": ("keys", "bookings", "string"),
        "latestBooking": ("key", "bookings", "string"),
        "latestBookingBatch": ("keys", "bookings", "string"),
        "latestBookingAsOf": ("key", "bookings", "string"),
        "latestBookingHistory": ("key", "bookings", "string"),
        "hourlyRevenue": ("key", "bookings", "string"),
    }


def test_a_status_from_a_node_of_an_earlier_release_reads_as_not_saying_its_release() -> None:
    """A rolling upgrade puts nodes of two releases side by side: a status without the
    release and schema a later one adds still reads (as not known), and one with them reads
    them; anything else it carries that this release does not know is left alone."""
    live = {"subscriptions": 0, "cohorts": 0, "evaluations": 0}
    earlier = {"node": "node2", "partitions": {}, "sync_errors": {}, "internal_requests": 3,
               "changes": 1, "live": live}  # fmt: skip
    status = NodeStatus.from_json(orjson.dumps(earlier))
    assert (status.release, status.schema) == ("", "")
    later = {**earlier, "release": "0.2.0", "schema": "ba9876543210", "something": [1]}
    status = NodeStatus.from_json(orjson.dumps(later))
    assert (status.release, status.schema) == ("0.2.0", "ba9876543210")


def test_a_status_says_the_formats_its_node_reads_and_an_earlier_one_read_protocol_1() -> None:
    live = {"subscriptions": 0, "cohorts": 0, "evaluations": 0}
    earlier = {"node": "node2", "partitions": {}, "sync_errors": {}, "internal_requests": 3,
               "changes": 1, "live": live}  # fmt: skip
    status = NodeStatus.from_json(orjson.dumps(earlier))
    assert status.reads("protocol", 1) and not status.reads("protocol", 2)
    assert not status.reads("snapshot", 3)  # unstated: only its calls are known
    later = NodeStatus.from_json(orjson.dumps({**earlier, "formats": {"protocol": [2, 3]}}))
    assert later.reads("protocol", 2) and not later.reads("protocol", 1)
    assert NodeStatus.from_json(later.to_json()).formats == {"protocol": [2, 3]}


def test_a_status_says_the_tables_its_schema_reads_and_an_earlier_one_said_nothing() -> None:
    live = {"subscriptions": 0, "cohorts": 0, "evaluations": 0}
    earlier = {"node": "node2", "partitions": {}, "sync_errors": {}, "internal_requests": 3,
               "changes": 1, "live": live}  # fmt: skip
    assert NodeStatus.from_json(orjson.dumps(earlier)).serving is None
    later = {**earlier, "serving": ["customerTotals_g0123abcd", "latestBooking"]}
    status = NodeStatus.from_json(orjson.dumps(later))
    assert status.serving == ["customerTotals_g0123abcd", "latestBooking"]
    assert NodeStatus.from_json(status.to_json()).serving == status.serving
