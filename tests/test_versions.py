"""Versioned stores (KIP-889; spark_pipeline/versions.py, gateway/storage/memory/history.py): the
version of a key valid at a time, and every version valid within a span, on every node,
through a base, its deltas and a compaction, against the oracle computed from the raw log
(tests/oracle.py: history). The log holds random trains over six hours out of order (4h of
history: many arrive too late and are dropped) and one train's crafted story: versions out
of order, one replaced at its own time, a tombstone ending one, a late one dropped."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import duckdb
import pytest

from contracts.eventlog import Record
from contracts.manifest import read_manifest, write_manifest
from contracts.partitioner import partition_for
from spark_pipeline import compaction, job
from spark_pipeline.publish import notify_nodes
from spark_pipeline.spark import LazySpark
from tests import oracle
from tests.nodes import Served, metric, serve
from tests.oracle import History, Version
from tests.projects import HOUR_MS, START_MS, append, produce_test_events
from tests.test_plans import GENERAL, KNOWN, comparable, counted
from tests.test_switch import wait_for_manifest_versions
from tests.wire import as_row, iso, millis, selection

NODES = ["node1", "node2", "node3"]
STORE = "trainHistory"
TRAIN = 1001  # the crafted story's key
MINUTE = 60_000
T0 = START_MS + 6 * HOUR_MS  # after every random record
# the crafted story, in two runs (offset order), value A..E by delay
FIRST = [(T0 + 10 * MINUTE, 1), (T0 + 30 * MINUTE, 2), (T0 + 20 * MINUTE, 3)]
SECOND = [
    (T0 + 20 * MINUTE, 4),  # replaces 3, at its time
    (T0 + 40 * MINUTE, None),  # a tombstone: ends 2
    (T0 + 35 * MINUTE, 5),  # out of order, before the tombstone
    (T0 - 5 * HOUR_MS, 6),  # too late: dropped
    (T0 + 50 * MINUTE, 7),
]
PER_REQUEST = 60  # asOf fields per request
VERSION = "validFrom validTo record {{ {fields} }}"


def _story(project: Any, records: list[tuple[int, int | None]]) -> None:
    batch = [
        Record(TRAIN, None if delay is None else {"delay": delay, "station": "Köln"}, at)
        for at, delay in records
    ]
    append(project, "trains", batch)


@pytest.fixture(scope="module")
def cluster(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A base, then two runs of deltas: more random trains (from three hours in: some too
    late) and the crafted story."""
    served = serve(tmp_path_factory.mktemp("versions"), spark)
    try:
        project = served.project
        produce_test_events(project, seed=2, n_bookings=0, n_trains=300, start_ms=T0 - 3 * HOUR_MS)
        _story(project, FIRST)
        job.run(project, spark)
        _story(project, SECOND)
        produce_test_events(project, seed=3, n_bookings=0, n_trains=200, start_ms=T0 - 2 * HOUR_MS)
        job.run(project, spark)
        wait_for_manifest_versions(served, read_manifest(Path(project.snapshot_store)))
        yield served
    finally:
        served.nodes.stop_all()


def expected(cluster: Served) -> dict[int, History]:
    return oracle.expected_history(cluster.project, STORE)


def as_version(cluster: Served, found: dict[str, Any]) -> tuple:
    store = cluster.project.stores[STORE]
    end = None if found["validTo"] is None else millis(found["validTo"])
    return millis(found["validFrom"]), end, *as_row(store, found["record"])


def of(version: Version) -> tuple:
    assert version.row is not None
    return version.valid_from, version.valid_to, *version.row


def times_of(history: History, key: Any, rng: random.Random) -> list[int]:
    """Times to ask a key at: each version's edges and a few at random, in the history."""
    horizon = history.horizon_ms
    assert horizon is not None
    edges = {t for v in history.versions.get(key, ()) for t in (v.valid_from, v.valid_from - 1)}
    edges |= {v.valid_to - 1 for v in history.versions.get(key, ()) if v.valid_to}
    edges |= {rng.randrange(horizon, (history.stream_ms or horizon) + HOUR_MS) for _ in range(3)}
    return sorted(t for t in edges if t >= horizon)


def check_as_of(cluster: Served, node: str, seed: int) -> int:
    """Every key of every partition at its times, asked of `node`; the count checked."""
    store = cluster.project.stores[STORE]
    rng, asked = random.Random(seed), []
    for history in expected(cluster).values():
        for key in history.versions:
            asked += [(history, key, at) for at in times_of(history, key, rng)]
    fields = VERSION.format(fields=selection(store))
    for start in range(0, len(asked), PER_REQUEST):
        some = asked[start : start + PER_REQUEST]
        aliases = " ".join(
            f'a{i}: {STORE}AsOf(key: {key}, asOf: "{iso(at)}") '
            f"{{ key failure version {{ {fields} }} }}"
            for i, (_, key, at) in enumerate(some)
        )
        body = cluster.nodes.gql(node, f"{{ {aliases} }}")
        assert not body.get("errors"), body["errors"]
        for i, (history, key, at) in enumerate(some):
            got = body["data"][f"a{i}"]
            assert got["failure"] is None and got["key"] == key
            want = history.as_of(key, at)
            found = None if got["version"] is None else as_version(cluster, got["version"])
            assert found == (None if want is None else of(want)), (key, iso(at))
    return len(asked)


def check_history(cluster: Served, node: str, seed: int, first: int = 2) -> int:
    """Spans of keys, page by page, asked of `node`; the versions checked."""
    store = cluster.project.stores[STORE]
    rng, checked = random.Random(seed), 0
    query = (
        f"query($key: Int!, $from: DateTime, $to: DateTime, $after: String) {{ "
        f"{STORE}History(key: $key, from: $from, to: $to, first: {first}, after: $after) {{ "
        f"key partition failure versions {{ {VERSION.format(fields=selection(store))} }} "
        f"pageInfo {{ hasNextPage endCursor }} }} }}"
    )
    for partition, history in expected(cluster).items():
        keys = sorted(history.versions, key=str)
        for key in rng.sample(keys, min(4, len(keys))) + ([TRAIN] if TRAIN in keys else []):
            assert history.horizon_ms is not None and history.stream_ms is not None
            start = rng.randrange(history.horizon_ms, history.stream_ms + 1)
            end = rng.randrange(start, history.stream_ms + HOUR_MS)
            for span in ((start, end), (None, None), (start, None)):
                variables = {"key": key, "from": None, "to": None, "after": None}
                variables.update({"from": span[0] and iso(span[0]), "to": span[1] and iso(span[1])})
                got = []
                while True:
                    body = cluster.nodes.gql(node, query, variables)
                    assert not body.get("errors"), body["errors"]
                    page = body["data"][f"{STORE}History"]
                    assert page["partition"] == partition and page["failure"] is None
                    assert len(page["versions"]) <= first
                    got += [as_version(cluster, v) for v in page["versions"]]
                    if not page["pageInfo"]["hasNextPage"]:
                        break
                    variables["after"] = page["pageInfo"]["endCursor"]
                low = history.horizon_ms if span[0] is None else span[0]
                high = 2**62 if span[1] is None else span[1]
                want = [of(v) for v in history.between(key, low, high)]
                assert got == want, (key, span)
                checked += len(want)
    return checked


def test_the_story_and_the_data_cover_every_case(cluster: Served) -> None:
    """Guard the test data: the crafted train's versions are KIP-889's, and the random trains
    had records dropped as too late."""
    partition = partition_for(TRAIN, "int", cluster.project.cluster.partitions)
    history = expected(cluster)[partition]
    story = [(v.valid_from - T0, v.valid_to and v.valid_to - T0, v.row and v.row[1])
             for v in history.versions[TRAIN]]  # fmt: skip
    assert story == [
        (10 * MINUTE, 20 * MINUTE, 1),
        (20 * MINUTE, 30 * MINUTE, 4),
        (30 * MINUTE, 35 * MINUTE, 2),
        (35 * MINUTE, 40 * MINUTE, 5),
        (40 * MINUTE, 50 * MINUTE, None),
        (50 * MINUTE, None, 7),
    ]
    dropped = sum(h.dropped for h in expected(cluster).values())
    assert dropped > 100 and history.dropped >= 1


@pytest.mark.parametrize("node", NODES)
def test_as_of_on_every_node_is_the_oracles(cluster: Served, node: str) -> None:
    assert check_as_of(cluster, node, seed=NODES.index(node)) > 500


@pytest.mark.parametrize("node", NODES)
def test_a_known_as_of_answers_as_the_oracle_and_the_general_path(
    cluster: Served, node: str
) -> None:
    """A one-field asOf document with variables, asked again (then a known read,
    resolvers/transport/known.py: from memory where the node reads the key at once, through
    the router elsewhere), gives the oracle's version, and the general path's answer
    (meta and routing included); a time before the history, or one that is no DateTime,
    the general path's coded error."""
    store = cluster.project.stores[STORE]
    fields = VERSION.format(fields=selection(store))
    meta = "meta { partitions { partition node role version failure } consistencyToken }"
    query = (
        f"query A($key: Int!, $at: DateTime!) {{ {STORE}AsOf(key: $key, asOf: $at) "
        f"{{ key partition failure version {{ {fields} }} {meta} }} }}"
    )
    rng, asked = random.Random(7 + NODES.index(node)), []
    for history in expected(cluster).values():
        assert history.horizon_ms is not None
        keys = rng.sample(sorted(history.versions), 4)
        asked += [(history, key, at) for key in keys for at in times_of(history, key, rng)[:3]]
        asked.append((history, keys[0], history.horizon_ms - 1))  # OUTSIDE_HISTORY
    asked.append((history, keys[0], None))  # not a DateTime: refused by the scalar
    at_once, routed = (counted(cluster, node, family) for family in KNOWN)
    for history, key, at in asked:
        variables = {"key": key, "at": "yesterday" if at is None else iso(at)}
        first, known = (cluster.nodes.gql(node, query, variables) for _ in range(2))
        general = cluster.nodes.gql(node, query + GENERAL, variables)
        assert comparable(first) == comparable(known) == comparable(general), (key, at)
        if at is None or at < cast(int, history.horizon_ms):
            (error,) = known["errors"]
            code = "BAD_USER_INPUT" if at is None else "OUTSIDE_HISTORY"
            assert error["extensions"]["code"] == code, error
            continue
        assert "data" in known, known
        got = known["data"][f"{STORE}AsOf"]["version"]
        want = history.as_of(key, at)
        found = None if got is None else as_version(cluster, got)
        assert found == (None if want is None else of(want)), (key, iso(at))
    assert counted(cluster, node, KNOWN[0]) - at_once > len(asked) // 6, "memory at once ran"
    assert counted(cluster, node, KNOWN[1]) - routed > len(asked) // 6, "the routed read ran"


@pytest.mark.parametrize("node", NODES)
def test_history_pages_on_every_node_are_the_oracles(cluster: Served, node: str) -> None:
    assert check_history(cluster, node, seed=NODES.index(node)) > 50


def test_the_latest_version_is_the_newest_by_time_not_the_last_appended(cluster: Served) -> None:
    rows = oracle.expected_store(cluster.project, STORE)
    expected_rows = {r[0]: r for part in rows.values() for r in part}
    store = cluster.project.stores[STORE]
    assert expected_rows[TRAIN][1] == 7
    keys = sorted(expected_rows)
    body = cluster.nodes.gql(
        "node2",
        f"query($keys: [Int!]!) {{ {STORE}Batch(keys: $keys) {{ entries {{ key record "
        f"{{ {selection(store)} }} }} }} }}",
        {"keys": keys},
    )
    got = {e["key"]: as_row(store, e["record"]) for e in body["data"][f"{STORE}Batch"]["entries"]}
    assert got == expected_rows


@pytest.mark.parametrize("node", NODES)
def test_a_time_before_the_history_is_refused_with_one_clear_error(
    cluster: Served, node: str
) -> None:
    partition = partition_for(TRAIN, "int", cluster.project.cluster.partitions)
    horizon = expected(cluster)[partition].horizon_ms
    assert horizon is not None
    for field in (
        f'{STORE}AsOf(key: {TRAIN}, asOf: "{iso(horizon - 1)}") {{ key }}',
        f'{STORE}History(key: {TRAIN}, from: "{iso(horizon - 1)}") {{ key }}',
    ):
        body = cluster.nodes.gql(node, f"{{ {field} }}")
        (error,) = body["errors"]
        assert error["extensions"]["code"] == "OUTSIDE_HISTORY", error
        assert "keeps 4h of history" in error["message"] and iso(horizon)[:19] in error["message"]
    at_horizon = f'{{ {STORE}AsOf(key: {TRAIN}, asOf: "{iso(horizon)}") {{ key failure }} }}'
    assert cluster.nodes.gql(node, at_horizon)["data"][f"{STORE}AsOf"]["failure"] is None


def test_bad_spans_and_cursors_are_refused(cluster: Served) -> None:
    for field, code in (
        (f'{STORE}History(key: 1, from: "{iso(T0)}", to: "{iso(T0 - 1)}")', "INVALID_RANGE"),
        (f'{STORE}History(key: 1, after: "nonsense")', "BAD_CURSOR"),
    ):
        body = cluster.nodes.gql("node1", f"{{ {field} {{ key }} }}")
        assert body["errors"][0]["extensions"]["code"] == code, body
    page = cluster.nodes.gql("node1", f"{{ {STORE}History(key: {TRAIN}, first: 1) "
                                      "{ pageInfo { endCursor } } }")  # fmt: skip
    cursor = page["data"][f"{STORE}History"]["pageInfo"]["endCursor"]
    body = cluster.nodes.gql("node1", f'{{ {STORE}History(key: 7, after: "{cursor}") {{ key }} }}')
    assert body["errors"][0]["extensions"]["code"] == "BAD_CURSOR"


def test_after_a_compaction_the_base_keeps_the_retained_versions_alone(cluster: Served) -> None:
    """Compacting every chain drops the versions no query may ask for; every node answers
    as before."""
    project, store_dir = cluster.project, project_store(cluster)
    manifest = read_manifest(store_dir)
    due = {p: e for p, e in manifest.partitions.items() if len(e.layers) > 1}
    assert due, "the runs left chains with deltas"
    bases = compaction.compact(project, store_dir, due)
    write_manifest(store_dir, compaction.rebase(manifest, due, bases))
    assert set(notify_nodes(project, set(bases)).values()) == {"ok"}
    wait_for_manifest_versions(cluster, read_manifest(store_dir))
    history = oracle.expected_store(project, f"{STORE}_history")
    for partition, layer in bases.items():
        if partition < project.cluster.partitions:
            assert layer.kind == "base"
            with duckdb.connect(str(store_dir / layer.path), read_only=True) as con:
                (count,) = con.execute(f'SELECT count(*) FROM "{STORE}_history"').fetchone()
            assert count == len(history[partition])
    for node in NODES:
        check_as_of(cluster, node, seed=7)
    check_history(cluster, "node3", seed=8)


def project_store(cluster: Served) -> Path:
    return Path(cluster.project.snapshot_store)


@pytest.mark.parametrize("node", NODES)
def test_every_node_reports_the_history_it_keeps_in_memory(cluster: Served, node: str) -> None:
    """The history of every partition a node holds is indexed, and what the index keeps in
    memory is in /metrics: at least where each key's versions start (8 bytes a key); the
    versions themselves are a mapped file's pages."""
    project = cluster.project
    held = set(project.cluster.hosted_by(node))
    keys = sum(
        len({row[0] for row in rows})
        for partition, rows in oracle.expected_store(project, f"{STORE}_history").items()
        if partition in held
    )
    size = metric(cluster.nodes.metrics(node), "stategate_history_memory_bytes", store=STORE)
    assert keys > 50 and size >= 8 * keys
