"""Subscriptions over graphql-transport-ws on real nodes: each subscription gets its first
result at once, then exactly the changes that touch what it reads (checked against the
oracle after every pipeline run), with positions that only move forward, on every node;
identical subscriptions are evaluated once; a client that stops reading costs one pending
update, not a queue; limits and protocol mistakes get coded answers."""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from pyspark.sql import SparkSession

from contracts import eventlog
from contracts.eventlog import Record
from contracts.partitioner import partition_for
from spark_pipeline import job
from tests import oracle
from tests.live import Socket
from tests.nodes import Served, serve
from tests.projects import START_MS

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
def cluster(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
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
        record = None if row is None else {"bookings": row[1], "revenue": row[2], "seats": row[3]}
        entries.append(
            {"key": key, "partition": partition_for(key, "string", count), "record": record}
        )
    return entries


def book(cluster: Served, keys: list[str], seed: int) -> None:
    """Produce one booking per key, then run the pipeline (which notifies the nodes)."""
    rng = random.Random(seed)
    topic = cluster.project.topics["bookings"]
    records = [
        Record(key, {"trip": "A→B", "price": round(rng.uniform(10, 99), 2), "seats": 1}, START_MS)
        for key in keys
    ]
    eventlog.produce(cluster.project.log_dir, topic, cluster.project.cluster.partitions, records)


def publish(cluster: Served, spark: SparkSession) -> None:
    job.run(cluster.project, spark)


def entries(payload: dict[str, Any]) -> list[dict[str, Any]]:
    assert "errors" not in payload, payload
    result: list[dict[str, Any]] = payload["data"]["customerTotalsBatch"]["entries"]
    return result


def offsets(payload: dict[str, Any]) -> dict[str, int]:
    position: dict[str, dict[str, int]] = payload["extensions"]["position"]
    return {f"{t}/{p}": o for t, parts in position.items() for p, o in parts.items()}


def assert_forward(before: dict[str, int], after: dict[str, int]) -> None:
    behind = {tp: (before[tp], o) for tp, o in after.items() if tp in before and o < before[tp]}
    assert not behind, f"positions moved back: {behind}"


def test_every_node_pushes_exactly_the_changes_a_subscription_reads(
    cluster: Served, spark: SparkSession
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


def live_status(cluster: Served, node_id: str) -> dict[str, int]:
    status: dict[str, int] = cluster.nodes.status(node_id)["live"]
    return status


def test_identical_subscriptions_are_evaluated_once(cluster: Served, spark: SparkSession) -> None:
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


def node_rss(cluster: Served, node_id: str) -> int:
    pid = cluster.nodes.processes.pid(node_id)
    return int(psutil.Process(pid).memory_info().rss)
