"""Faults that pass: a node resumed from a pause longer than its timeouts does not blame the
peers it could not hear meanwhile (SIGSTOP); a subscription that saw a partition fail
answers again once a replica of it is back, with nothing new published (real nodes)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from contracts.partitioner import partition_for
from spark_pipeline.spark import LazySpark
from tests import oracle, wire
from tests.live import Socket
from tests.nodes import Served, serve

TIMEOUT_S = 1.0
INTERVAL_S = 0.5
SETTINGS = f"internal_timeout_s = {TIMEOUT_S}\nhealth_interval_s = {INTERVAL_S}\n"
PAUSE_S = 2 * (TIMEOUT_S + INTERVAL_S)  # every poll of the paused node times out
AFTER_S = 2.0  # how long the resumed node is watched
PAUSED = "node1"
RECOVERY_S = 5.0  # a restarted replica's answer reaches a subscription within this
QUERY = """query($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) {
    entries { key partition failure record { bookings revenue } }
    meta { partial partitions { partition node failure message } }
  }
}"""


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("faults"), spark, seed=3, settings=SETTINGS, start=False)
    served.nodes.start_all()  # and each has polled the others
    yield served
    served.nodes.stop_all()


def totals(cluster: Served) -> dict[str, tuple[int, float]]:
    """Each customer's (bookings, revenue), from the raw log."""
    rows = oracle.expected_store(cluster.project, "customerTotals")
    return {row[0]: (row[1], row[2]) for part in rows.values() for row in part}


def away_keys(cluster: Served, node: str) -> list[str]:
    """The customers of the partitions `node` does not host."""
    hosted = set(cluster.project.cluster.hosted_by(node))
    count = cluster.project.cluster.partitions
    return sorted(k for k in totals(cluster) if partition_for(k, "string", count) not in hosted)


def wrong(body: dict[str, Any], expected: dict[str, tuple[int, float]]) -> str:
    """What is wrong with an answer: errors, failed partitions, values the log disagrees
    with; empty when nothing is."""
    if body.get("errors"):
        return f"errors: {body['errors']}"
    batch = body["data"]["customerTotalsBatch"]
    failed = [p for p in batch["meta"]["partitions"] if p["failure"]]
    if failed or batch["meta"]["partial"]:
        return f"partial: {failed}"
    got = {
        e["key"]: (wire.long(e["record"]["bookings"]), e["record"]["revenue"])
        for e in batch["entries"]
    }
    differ = [k for k in got if got[k] != pytest.approx(expected[k])]
    return f"differs from the log: {differ}" if differ else ""


def test_a_node_resumed_from_a_pause_does_not_blame_its_peers(cluster: Served) -> None:
    """node1 stops for longer than a health poll's timeout; every answer it gives after it
    resumes, and the one to a request that waited for it, comes from live peers."""
    expected = totals(cluster)
    keys = away_keys(cluster, PAUSED)

    def ask() -> dict[str, Any]:
        return cluster.nodes.gql(PAUSED, QUERY, {"keys": keys})

    assert wrong(ask(), expected) == ""
    proc = cluster.nodes.processes.procs[PAUSED]
    queued: list[dict[str, Any]] = []
    proc.send_signal(signal.SIGSTOP)
    try:
        waiting = threading.Thread(target=lambda: queued.append(ask()))
        waiting.start()  # its request waits for node1 to run again
        time.sleep(PAUSE_S)
    finally:
        proc.send_signal(signal.SIGCONT)
    outcomes = []
    resumed = time.monotonic()
    while (after := time.monotonic() - resumed) < AFTER_S:
        outcomes.append((round(after, 3), wrong(ask(), expected)))
    waiting.join(30)
    outcomes.append((-1.0, wrong(queued[0], expected)))  # -1: the request queued in the pause
    bad = [o for o in outcomes if o[1]]
    shown = bad[:2] + bad[-1:]  # the first ones after the pause, and the last (queued?)
    assert not bad, f"{len(bad)} of {len(outcomes)} answers: {shown}\n{cluster.nodes.logs_tail()}"


TOTALS = """subscription Totals($keys: [String!]!) {
  customerTotalsBatch(keys: $keys) { entries { key failure record { bookings revenue } } }
}"""


def entries(payload: dict[str, Any]) -> dict[str, tuple[str | None, tuple[int, float] | None]]:
    """key -> (failure, (bookings, revenue) or None)."""
    assert "errors" not in payload, payload
    return {
        e["key"]: (
            e["failure"],
            e["record"] and (wire.long(e["record"]["bookings"]), e["record"]["revenue"]),
        )
        for e in payload["data"]["customerTotalsBatch"]["entries"]
    }


def test_a_subscription_that_saw_a_failure_answers_once_a_replica_is_back(
    cluster: Served,
) -> None:
    """Partitions 1, 4 and 7 live on node2 and node3 only: both are killed, a subscription
    on node1 sees its key of partition 1 fail; they restart on the same snapshots, nothing
    is produced, and the subscription gets the key's record from them."""
    expected = totals(cluster)
    count = cluster.project.cluster.partitions
    by_partition = {partition_for(k, "string", count): k for k in sorted(expected)}
    away, home = by_partition[1], by_partition[0]
    replicas = cluster.project.cluster.replica_map[1]
    for node in replicas:
        cluster.nodes.kill(node)
    socket = Socket(cluster.nodes.url(PAUSED))
    try:
        socket.subscribe("totals", TOTALS, {"keys": [away, home]})
        first = entries(socket.next_of("totals"))
        assert first[away] == ("NODE_UNAVAILABLE", None)
        assert first[home] == (None, pytest.approx(expected[home]))
        for node in replicas:
            cluster.nodes.start(node)
        back = time.monotonic()
        try:
            again = entries(socket.next_of("totals", timeout=RECOVERY_S))
        except TimeoutError:
            pytest.fail(f"nothing pushed {RECOVERY_S} s after {replicas} were back")
        assert time.monotonic() - back < RECOVERY_S
        assert again == {k: (None, pytest.approx(expected[k])) for k in (away, home)}
    finally:
        socket.close()
