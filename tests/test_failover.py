"""Serving that survives: a node dies, hangs, comes back; partitions fail over one by one."""

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
from tests.nodes import Served, metric, serve

QUERY = """query($keys: [String!]!) {
  totals: customerTotalsBatch(keys: $keys) {
    entries { key partition failure record { bookings revenue } }
    meta { partial partitionsAsked partitionsAnswered partitionsFailed
           partitions { partition node role failure message } }
  }
  page: latestBookingRange(first: 50) {
    records { key }
    meta { partial partitionsFailed partitions { partition node failure message } }
  }
}"""


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("failover"), spark, seed=2)
    yield served
    served.nodes.stop_all()


def expected_totals(cluster: Served) -> dict[str, tuple]:
    parts = oracle.expected_store(cluster.project, "customerTotals")
    return {r[0]: r for rows in parts.values() for r in rows}


def ask(cluster: Served, node: str, keys: list[str]) -> dict[str, Any]:
    body = cluster.nodes.gql(node, QUERY, {"keys": keys})
    assert not body.get("errors"), body["errors"]
    return body["data"]


def check_correct(data: dict[str, Any], expected: dict[str, tuple]) -> None:
    for entry in data["totals"]["entries"]:
        if entry["failure"] is None:
            got = entry["record"]
            got_row = (wire.long(got["bookings"]), got["revenue"])
            assert got_row == pytest.approx(expected[entry["key"]][1:3])


def failures(data: dict[str, Any]) -> str:
    """Each failed partition of an answer, with its reason: empty when nothing failed."""
    return "; ".join(
        f"{field} p{p['partition']} {p['failure']}: {p['message']}"
        for field in ("totals", "page")
        for p in data[field]["meta"]["partitions"]
        if p["failure"]
    )


def test_a_killed_node_costs_no_query_its_partitions_fail_over(cluster: Served) -> None:
    """Clients on node1 and node2 query all keys while node3 is killed: node2 routes
    partitions 2, 5, 8 to node3 until then, node1 keeps 1, 4, 7 of node2 and node3."""
    expected = expected_totals(cluster)
    keys = sorted(expected)
    outcomes: list[tuple[str, float, str]] = []  # entry node, seconds after the kill, outcome
    killed_at = time.monotonic() + 1.0
    stop_at = killed_at + 3.0  # past a health poll: requests after node3 is known down count

    def client(entry: str) -> None:
        while time.monotonic() < stop_at:
            try:
                data = ask(cluster, entry, keys)
                check_correct(data, expected)
                partial = data["totals"]["meta"]["partial"] or data["page"]["meta"]["partial"]
                outcome = failures(data) or ("partial" if partial else "ok")
            except AssertionError as exc:
                outcome = f"failed: {exc}"
            outcomes.append((entry, round(time.monotonic() - killed_at, 3), outcome))

    threads = [threading.Thread(target=client, args=(entry,)) for entry in ("node1", "node2")]
    for thread in threads:
        thread.start()
    time.sleep(max(0.0, killed_at - time.monotonic()))
    cluster.nodes.kill("node3")
    for thread in threads:
        thread.join(120)
    after = {
        entry: sum(1 for e, t, _ in outcomes if e == entry and t > 0)
        for entry in ("node1", "node2")
    }
    assert min(after.values()) >= 5, f"too few queries after the kill to tell: {after}"
    failed = [o for o in outcomes if o[2] != "ok"]
    assert failed == [], f"every partition has a live replica\n{cluster.nodes.logs_tail()}"

    # From node2, partitions whose active is node3 (2, 5, 8) are served by their standby node1.
    data = ask(cluster, "node2", keys)
    served_by = {p["partition"]: p["node"] for p in data["totals"]["meta"]["partitions"]}
    assert {served_by[p] for p in (2, 5, 8)} == {"node1"}
    assert metric(cluster.nodes.metrics("node2"), "stategate_peer_up", peer="node3") == 0


def test_partitions_without_a_live_replica_fail_in_band(cluster: Served) -> None:
    if "node3" in cluster.nodes.processes.procs:
        cluster.nodes.kill("node3")
    cluster.nodes.kill("node2")
    expected = expected_totals(cluster)
    data = ask(cluster, "node1", sorted(expected))
    meta = data["totals"]["meta"]
    # Partitions 1, 4, 7 live on node2 and node3 only.
    assert meta["partial"] and meta["partitionsAsked"] == 9
    assert meta["partitionsAnswered"] == 6 and meta["partitionsFailed"] == 3
    failed = {p["partition"]: p for p in meta["partitions"] if p["failure"]}
    assert set(failed) == {1, 4, 7}
    assert {p["failure"] for p in failed.values()} == {"NODE_UNAVAILABLE"}
    for entry in data["totals"]["entries"]:
        assert (entry["failure"] is not None) == (entry["partition"] in {1, 4, 7})
    check_correct(data, expected)
    page = data["page"]
    assert page["meta"]["partial"] and page["meta"]["partitionsFailed"] == 3
    answered_keys = sorted(
        k for k, r in expected.items() if r and _partition(cluster, k) not in {1, 4, 7}
    )
    assert [r["key"] for r in page["records"]] == answered_keys[:50]


def test_restarted_nodes_are_used_again(cluster: Served) -> None:
    for node in ("node2", "node3"):
        if node not in cluster.nodes.processes.procs:
            cluster.nodes.start(node)
    keys = sorted(expected_totals(cluster))
    deadline = time.monotonic() + 15
    while True:
        data = ask(cluster, "node2", keys)
        served_by = {p["partition"]: p["node"] for p in data["totals"]["meta"]["partitions"]}
        if not data["totals"]["meta"]["partial"] and served_by[2] == "node3":
            break
        assert time.monotonic() < deadline, data["totals"]["meta"]
        time.sleep(0.3)
    assert {served_by[p] for p in (2, 5, 8)} == {"node3"}


def test_a_hung_node_costs_one_timeout_then_is_skipped(cluster: Served) -> None:
    keys = sorted(expected_totals(cluster))
    timeout = cluster.project.settings.internal_timeout_s
    proc = cluster.nodes.processes.procs["node3"]
    before = cluster.nodes.metrics("node2")
    proc.send_signal(signal.SIGSTOP)
    try:
        took = []
        for _ in range(4):
            started = time.monotonic()
            data = ask(cluster, "node2", keys)
            took.append(time.monotonic() - started)
            assert not data["totals"]["meta"]["partial"]
        assert took[0] >= timeout * 0.9, "the first request waits for node3 once"
        assert max(took[1:]) < timeout * 0.75, f"later requests skip node3: {took}"
        # node2's metrics tell it too: a call to node3 that timed out, partitions moved on.
        after = cluster.nodes.metrics("node2")
        for name, labels in (
            ("stategate_internal_calls_total", {"peer": "node3", "outcome": "unreachable"}),
            ("stategate_failovers_total", {"peer": "node3", "reason": "NODE_UNAVAILABLE"}),
        ):
            assert metric(after, name, **labels) - metric(before, name, **labels) >= 1, name
    finally:
        proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        data = ask(cluster, "node2", keys)
        if data["totals"]["meta"]["partitions"][2]["node"] == "node3":
            return
        time.sleep(0.3)
    raise AssertionError("node3 was not used again after it woke up")


def _partition(cluster: Served, key: str) -> int:
    return partition_for(key, "string", cluster.project.cluster.partitions)
