"""A second pipeline run: positions advance, and the nodes switch to the new versions without
a restart and without failing a query in flight."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contracts import chains
from contracts.clock import now_ms
from contracts.freshness import STAGES
from contracts.manifest import Manifest, read_manifest, write_manifest
from contracts.partitioner import partition_for
from contracts.positions import decode_token
from spark_pipeline import compaction, job
from spark_pipeline.publish import notify_nodes
from spark_pipeline.spark import LazySpark
from tests import oracle, wire
from tests.nodes import Samples, Served, metric, serve
from tests.projects import produce_test_events

QUERY = """{
  delays: trainDelaysRange(first: 1000) {
    records { key reports totalDelay worstDelay }
    meta { partial partitions { partition version failure position { topic offset } } }
  }
  latest: latestBookingRange(first: 1000) { records { key } meta { partial } }
}"""

BOUNDED = """query($c: ConsistencyInput) {
  trainDelaysRange(first: 1000, consistency: $c) {
    meta { consistencyToken
           partitions { partition node version failure message position { topic offset } } }
  }
}"""


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    served = serve(tmp_path_factory.mktemp("switch"), spark, seed=5)
    yield served
    served.nodes.stop_all()


def by_partition(cluster: Served) -> dict[int, list[tuple]]:
    parts = oracle.expected_store(cluster.project, "trainDelays")
    return {p: sorted(r[:4] for r in part) for p, part in parts.items()}


def as_rows(records: list[dict[str, Any]]) -> list[tuple]:
    return [
        (r["key"], wire.long(r["reports"]), wire.maybe_long(r["totalDelay"]), r["worstDelay"])
        for r in records
    ]


def test_nodes_switch_to_new_versions_under_load(cluster: Served, spark: LazySpark) -> None:
    expected = {1: by_partition(cluster)}
    seen: list[dict[str, Any]] = []
    problems: list[str] = []
    stop = threading.Event()

    def client(node: str) -> None:
        while not stop.is_set():
            body = cluster.nodes.gql(node, QUERY)
            if body.get("errors") or body["data"]["delays"]["meta"]["partial"]:
                problems.append(str(body)[:500])
            else:
                seen.append(body["data"]["delays"])

    threads = [threading.Thread(target=client, args=(n,)) for n in cluster.nodes.ids]
    for thread in threads:
        thread.start()
    try:
        produce_test_events(
            cluster.project, seed=6, n_bookings=300, n_trains=400, start_ms=1_767_400_000_000
        )
        report = job.run(cluster.project, spark, notify=True)
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert set(report.notify.values()) == {"ok"}
    assert problems == []
    assert seen, "the clients got answers during the switch"

    expected[2] = by_partition(cluster)
    assert expected[2] != expected[1]
    after = sorted(r for part in expected[2].values() for r in part)
    positions = oracle.expected_positions(cluster.project)
    for node in cluster.nodes.ids:
        data = cluster.nodes.data(node, QUERY)["delays"]
        assert as_rows(data["records"]) == after
        for part in data["meta"]["partitions"]:
            assert part["version"] == 2
            assert wire.offsets(part["position"]) == positions[part["partition"]]
    # During the switch, every partition of every answer was one whole version: its rows are
    # exactly the oracle's for the version it reports.
    for answer in seen:
        got: dict[int, list[tuple]] = {p: [] for p in range(9)}
        for row in as_rows(answer["records"]):
            got[partition_for(row[0], "int", 9)].append(row)
        for part in answer["meta"]["partitions"]:
            assert got[part["partition"]] == expected[part["version"]][part["partition"]]
    assert seen[0]["meta"]["partitions"][0]["version"] == 1
    # Each node holds its partitions' chains: the base and the new delta over it, nothing else.
    for node in cluster.project.cluster.nodes:
        folders = sorted((node.data_dir / "snapshots").glob("p*"))
        assert folders
        for folder in folders:
            names = sorted(p.name for p in folder.glob("v*"))
            assert names == ["v000001.base.duckdb", "v000002.delta.arrow"], (folder, names)


def test_a_token_from_a_node_that_just_switched_is_served_by_every_node(
    cluster: Served, spark: LazySpark
) -> None:
    """What a node knows of its peers' positions is up to a poll old. A token minted the
    moment node1 switched, sent to the other nodes before they polled node1, is still served
    by replicas at or past it: only a replica itself may answer NOT_UP_TO_BOUND."""
    produce_test_events(
        cluster.project, seed=7, n_bookings=50, n_trains=200, start_ms=1_767_500_000_000
    )
    job.run(cluster.project, spark, notify=False)  # the nodes find it on their own sync
    hosted = cluster.project.cluster.hosted_by("node1")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        versions = cluster.nodes.status("node1")["partitions"]
        if all(versions[str(p)]["version"] == 3 for p in hosted):
            break
        time.sleep(0.002)
    else:
        raise AssertionError(f"node1 did not switch to version 3: {versions}")
    meta = cluster.nodes.data("node1", BOUNDED)["trainDelaysRange"]["meta"]
    token = meta["consistencyToken"]
    bound = decode_token(token)
    for node in ("node2", "node3"):
        meta = cluster.nodes.data(node, BOUNDED, {"c": {"token": token}})["trainDelaysRange"][
            "meta"
        ]
        assert [p for p in meta["partitions"] if p["failure"]] == []
        served = {
            (o["topic"], part["partition"]): wire.long(o["offset"])
            for part in meta["partitions"]
            for o in part["position"]
        }
        assert all(served[tp] >= offset for tp, offset in bound.items())


FRESHNESS = """{
  trainDelaysRange(first: 1) {
    meta { newestRecordAgeMs partitions { partition appendedMs position { topic offset } } }
  }
}"""


def test_nodes_count_installed_records_by_delay_and_answer_how_old_they_are(
    cluster: Served, spark: LazySpark
) -> None:
    """Every record a new version brings is counted once per stage in each hosting node's
    freshness histogram, each stage no sooner than the one before; and an answer's meta
    names, per partition, the append time of the newest record at its position, as the log
    stamped it."""
    project = cluster.project
    old = read_manifest(Path(project.snapshot_store))
    wait_for_manifest_versions(cluster, old)  # the earlier tests' installs are counted before
    before = {node: cluster.nodes.metrics(node) for node in cluster.nodes.ids}
    produce_test_events(project, seed=8, n_bookings=80, n_trains=120, start_ms=1_767_600_000_000)
    job.run(project, spark)
    new = read_manifest(Path(project.snapshot_store))
    wait_for_manifest_versions(cluster, new)
    stamps = {
        (topic, p): [r["append_ms"] for r in oracle.partition_records(project, topic, p)]
        for topic in project.topics
        for p in range(project.cluster.partitions)
    }
    brought = {  # the records each chain counts (contracts/chains.py: counted)
        chain: sum(o - was(old, chain, t) for t, o in entry.position.items()
                   if t in chains.counted(project, chain))
        for chain, entry in new.partitions.items()
    }  # fmt: skip
    for node in cluster.nodes.ids:
        after = cluster.nodes.metrics(node)

        def grew(name: str, stage: str, after: Samples = after, node: str = node) -> float:
            key = f"stategate_freshness_seconds_{name}"
            return metric(after, key, stage=stage) - metric(before[node], key, stage=stage)

        held = chains.held(project, project.cluster.hosted_by(node))
        assert {grew("count", stage) for stage in STAGES} == {sum(brought[c] for c in held)}
        sums = [grew("sum", stage) for stage in STAGES]
        assert sums == sorted(sums) and sums[0] >= 0, sums
        started = now_ms()
        meta = cluster.nodes.data(node, FRESHNESS)["trainDelaysRange"]["meta"]
        newest = []
        for part in meta["partitions"]:
            at = {o["topic"]: wire.long(o["offset"]) for o in part["position"]}
            appended = [s for t in at for s in stamps[(t, part["partition"])][: at[t]]]
            assert wire.long(part["appendedMs"]) == max(appended), part
            newest.append(max(appended))
        age = wire.long(meta["newestRecordAgeMs"])
        assert started - max(newest) <= age <= now_ms() - max(newest)


def was(manifest: Manifest, chain: int, topic: str) -> int:
    """Where a chain stood in a topic: 0 before it was published."""
    entry = manifest.partitions.get(chain)
    return entry.position.get(topic, 0) if entry else 0


def test_nodes_switch_to_a_compacted_base_under_load(cluster: Served) -> None:
    """A compaction folds each chain into a base at the same version: the nodes switch to it
    while clients query, every answer stays the oracle's, and the deltas' files go away."""
    store_dir = Path(cluster.project.snapshot_store)
    wait_for_manifest_versions(cluster, read_manifest(store_dir))
    expected = sorted(r for part in by_partition(cluster).values() for r in part)
    problems: list[str] = []
    answers = 0
    stop = threading.Event()

    def client(node: str) -> None:
        nonlocal answers
        while not stop.is_set():
            body = cluster.nodes.gql(node, QUERY)
            data = body.get("data") or {}
            if body.get("errors") or as_rows(data["delays"]["records"]) != expected:
                problems.append(str(body)[:500])
            answers += 1

    threads = [threading.Thread(target=client, args=(n,)) for n in cluster.nodes.ids]
    for thread in threads:
        thread.start()
    try:
        manifest = read_manifest(store_dir)
        due = {p: e for p, e in manifest.partitions.items() if len(e.layers) > 1}
        assert due, "the earlier runs left chains with deltas"
        bases = compaction.compact(cluster.project, store_dir, due)
        write_manifest(store_dir, compaction.rebase(manifest, due, bases))
        notified = notify_nodes(cluster.project, set(bases))
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert set(notified.values()) == {"ok"}
    assert problems == [] and answers > 0
    for node in cluster.project.cluster.nodes:
        for folder in sorted((node.data_dir / "snapshots").glob("p*")):
            partition = int(folder.name[1:])
            if partition in due:
                names = sorted(p.name for p in folder.glob("v*"))
                assert names == [f"v{due[partition].version:06d}.base.duckdb"], (folder, names)


def wait_for_manifest_versions(cluster: Served, manifest: Manifest, timeout_s: float = 30) -> None:
    """Until every node serves each chain it holds at the manifest's version."""
    deadline = time.monotonic() + timeout_s
    project = cluster.project
    for node in cluster.nodes.ids:
        while True:
            versions = cluster.nodes.status(node)["partitions"]
            held = chains.held(project, project.cluster.hosted_by(node))
            if all(
                str(p) in versions and versions[str(p)]["version"] == manifest.partitions[p].version
                for p in held
            ):
                break
            assert time.monotonic() < deadline, versions
            time.sleep(0.05)


def test_value_ordered_pages_go_on_across_a_switch(cluster: Served, spark: LazySpark) -> None:
    """Pages of latestBooking by price (indexed: answered from memory) and by seats (not:
    SQL), begun before a switch and followed after it with their cursors, from every node:
    the first page is the old version's, the rest exactly the new version's rows past the
    cursor, and no row comes twice in a page."""
    from tests.test_by_value import ordered, same_rows

    store = cluster.project.stores["latestBooking"]
    names = ["key", *store.columns]

    def expected_rows() -> list[dict[str, Any]]:  # uncached: the log grows in this test
        parts = oracle.expected_store(cluster.project, store.name).values()
        return [dict(zip(names, row, strict=True)) for part in parts for row in part]

    query = """query($order: [LatestBookingOrderBy!], $after: String) {
      latestBookingList(orderBy: $order, first: 40, after: $after) {
        records { key trip price seats } pageInfo { hasNextPage endCursor } meta { partial }
      }
    }"""
    orders = {"PRICE_DESC": [("price", True)], "SEATS_DESC": [("seats", True)]}
    before = expected_rows()
    firsts = {}
    for node in cluster.nodes.ids:
        for order in orders:
            page = cluster.nodes.data(node, query, {"order": [order]})["latestBookingList"]
            firsts[node, order] = page
            want = ordered(before, orders[order])[:40]
            same_rows([wire.as_row(store, r) for r in page["records"]],
                      [tuple(r[n] for n in names) for r in want])  # fmt: skip
    produce_test_events(
        cluster.project, seed=11, n_bookings=400, n_trains=10, start_ms=1_767_600_000_000
    )
    report = job.run(cluster.project, spark, notify=True)
    assert set(report.notify.values()) == {"ok"}
    wait_for_manifest_versions(cluster, read_manifest(Path(cluster.project.snapshot_store)))
    after = expected_rows()
    assert after != before
    for (node, order), first in firsts.items():
        rows: list[tuple] = []
        page = first
        while page["pageInfo"]["hasNextPage"]:
            variables = {"order": [order], "after": page["pageInfo"]["endCursor"]}
            page = cluster.nodes.data(node, query, variables)["latestBookingList"]
            assert not page["meta"]["partial"]
            got = [wire.as_row(store, r) for r in page["records"]]
            assert len({r[0] for r in got}) == len(got)
            rows += got
        last = dict(zip(names, wire.as_row(store, first["records"][-1]), strict=True))
        rest = ordered([*after, last], orders[order])
        # by identity: when the cursor's row is unchanged, `after` holds an equal copy of it
        # (stably sorted before this one), and neither is past the cursor
        cursor = next(i for i, row in enumerate(rest) if row is last)
        want = rest[cursor + 1 :]
        same_rows(rows, [tuple(r[n] for n in names) for r in want])
