from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import duckdb
import orjson
import pytest

from contracts import chains, eventlog
from contracts.generations import generation
from contracts.manifest import Layer, Manifest, PartitionEntry, read_manifest, write_manifest
from contracts.project import Project, load
from contracts.snapshot_file import Kind
from contracts.snapshot_file import relative_path as snapshot_path
from spark_pipeline.compaction import compact, rebase
from spark_pipeline.job import run, tables_of
from spark_pipeline.plan import LogBehindError, plan_run
from spark_pipeline.publish import notify_nodes, prune
from spark_pipeline.spark import LazySpark
from tests import progress
from tests.chains import chain_state, opened
from tests.oracle import (
    expected_chain_positions,
    expected_positions,
    expected_store,
    layer_names,
    layer_store,
)
from tests.projects import produce_test_events, with_seats_by_customer, write_project
from topics.files import FileLog

CHANGED = {1, 4, 7}
DUCK_TYPES = {  # the snapshot format's column types
    "string": "VARCHAR",
    "int": "INTEGER",
    "long": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    """Its runs go to Spark's executors, as a big log's would (this small one would be built
    in the driver, as the clusters the query tests read are)."""
    root = tmp_path_factory.mktemp("pipeline")
    settings = "driver_batch_records = 0"
    return load(write_project(root, ports=[18101, 18102, 18103], settings=settings))


@pytest.fixture(scope="module")
def first(project: Project, spark: LazySpark) -> dict:
    produce_test_events(project, seed=1)
    return _run_logged(project, spark)


@pytest.fixture(scope="module")
def second(project: Project, spark: LazySpark, first: dict) -> dict:
    produce_test_events(project, seed=2, n_bookings=300, n_trains=0, only={1, 4})
    produce_test_events(project, seed=3, n_bookings=0, n_trains=120, only={4, 7})
    return _run_logged(project, spark)


def _run_logged(project: Project, spark: LazySpark) -> dict:
    """A run, what it logged, and the log's end offsets it read up to (from the segments)."""
    ends = {
        p: {t: eventlog.end_offset(project.log_dir, t, p) for t in project.topics}
        for p in range(project.cluster.partitions)
    }
    with progress.captured() as lines:
        report = run(project, spark, notify=False)
    return {
        "report": report,
        "manifest": _manifest(project),
        "digests": _digests(project),
        "lines": list(lines),
        "ends": ends,
    }


def test_first_run_builds_every_partition_as_the_oracle_says(project: Project, first: dict):
    assert first["report"].versions == {c: (None, 1) for c in range(chains.count(project))}
    assert_published_state_is_the_oracles(project, first["manifest"])


def test_a_run_logs_each_partitions_offsets_records_and_layer(
    project: Project, first: dict, second: dict
) -> None:
    """The progress lines say what the raw log holds: each changed partition's offset range
    and record count per topic, then its new layer with the same records and positions."""
    starts = {p: dict.fromkeys(project.topics, 0) for p in first["ends"]}
    for done, changed in ((first, set(range(9))), (second, CHANGED)):
        ends, lines = done["ends"], done["lines"]
        expected = {
            p: {t: (starts[p][t], ends[p][t], ends[p][t] - starts[p][t]) for t in project.topics}
            for p in changed
        }
        assert progress.planned(lines) == expected
        records = {p: sum(n for _, _, n in expected[p].values()) for p in changed}
        layers = progress.written(lines)
        assert {p: (r, at) for p, (_, _, r, _, at) in layers.items()} == {
            p: (records[p], ends[p]) for p in changed
        }
        total, count = sum(records.values()), len(changed)
        read = (
            f"reading the file log {project.log_dir}: {total} new records, {count} of 9 partitions"
        )
        assert any(line.startswith(read) for line in lines), lines
        built = len(done["report"].layers)  # the partitions' chains (contracts/chains.py)
        assert (
            built > count
            and {chains.partition(project, c) for c in done["report"].layers} == changed
        )
        assert any(line.startswith(f"built {built} layers from {total} records") for line in lines)
        done_line = f": {total} records, {built} new layers"
        assert any(line.startswith("run done in") and line.endswith(done_line) for line in lines)
        starts = ends
    # the first run's layers are bases, each with its partition's whole state: as the oracle
    # counts it for the partitions the second run left alone
    state = {name: expected_store(project, name) for name in layer_names(project)}
    bases = {p: layer for p, layer in progress.written(first["lines"]).items() if p not in CHANGED}
    assert {layer[1] for layer in bases.values()} == {"base"}
    rows = {p: {s.name: len(state[s.name][p]) for s in chains.stores(project, p)} for p in bases}
    assert {p: layer[3] for p, layer in bases.items()} == rows


def test_the_oracle_sees_the_awkward_cases(project: Project, first: dict):
    """Guard the test data itself: tombstones, re-set keys, nulls and odd keys are present."""
    latest = {k: v for p in expected_store(project, "latestBooking").values() for k, *v in p}
    assert "gone" not in latest and latest["Zoë"][2] == 3
    assert {"", "日本語", "Zo", "Zoë"} <= latest.keys()
    trains = {k for p in expected_store(project, "trainStatus").values() for k, *_ in p}
    assert any(k < 0 for k in trains)
    records = [
        r
        for p in range(project.cluster.partitions)
        for r in eventlog.read(project.log_dir, "bookings", p)
    ]
    assert any(r["value"] is None for r in records)
    assert any(r["value"] and None in r["value"].values() for r in records)


def test_second_run_adds_a_delta_to_the_partitions_with_new_records_only(
    project: Project, first: dict, second: dict
):
    before, after = first["manifest"]["partitions"], second["manifest"]["partitions"]
    for p in range(project.cluster.partitions):
        if p in CHANGED:
            assert second["report"].versions[p] == (1, 2)
            assert second["report"].layers[p] == "delta"
            base, delta = after[str(p)]["layers"]
            assert base == before[str(p)]["layers"][0]
            assert (delta["version"], delta["kind"]) == (2, "delta")
            assert delta["position"] != base["position"]
            # a delta holds the changed keys only: far smaller than its base
            assert delta["size"] < base["size"]
        else:
            assert p not in second["report"].versions
            assert after[str(p)] == before[str(p)]
    # no file of the first run was touched, the changed partitions' v1 included
    for path, digest in first["digests"].items():
        assert second["digests"][path] == digest
    assert_published_state_is_the_oracles(project, second["manifest"])


def test_a_run_without_new_records_changes_nothing(
    project: Project, spark: LazySpark, second: dict
):
    manifest_bytes = (_store(project) / "manifest.json").read_bytes()
    report = run(project, spark, notify=False)
    assert report.records == 0
    assert report.versions == {}
    assert (_store(project) / "manifest.json").read_bytes() == manifest_bytes
    assert _digests(project) == second["digests"]
    assert not (_store(project) / ".staging").exists()


def test_a_run_says_what_built_the_chains_of_a_manifest_that_does_not(
    project: Project, spark: LazySpark, second: dict
):
    """A manifest of a release before `built`, of the same stores: the next run records it,
    changing nothing else, so that the next change of the stores builds only itself."""
    manifest_path = _store(project) / "manifest.json"
    written = manifest_path.read_bytes()
    without = {k: v for k, v in orjson.loads(written).items() if k != "built"}
    manifest_path.write_bytes(orjson.dumps(without))
    report = run(project, spark, notify=False)
    assert report.versions == {} and not report.rebuild
    assert manifest_path.read_bytes() == written


def test_stores_changed_since_a_manifest_that_does_not_say_what_built_it_are_all_rebuilt(
    project: Project, second: dict
):
    """A manifest written before `built`: every store is built again, from offset 0."""
    written = {k: v for k, v in second["manifest"].items() if k != "built"}
    manifest = Manifest.from_json(orjson.dumps({**written, "stores_digest": "other"}))
    plan = plan_run(project, manifest, FileLog(project))
    assert plan.rebuild is not None
    assert plan.rebuild.stores == {s.name for s in chains.every_store(project)}
    assert plan.changed == list(range(project.cluster.partitions))
    assert all(start == 0 for ranges in plan.ranges.values() for start, _ in ranges.values())


@pytest.mark.parametrize("built_in", ["executors", "driver"])
def test_a_change_of_the_stores_builds_only_the_stores_it_changes(
    tmp_path: Path, spark: LazySpark, built_in: str
) -> None:
    """A store added, a window resized and a store removed: the new store and the resized
    one's new generation (contracts/generations.py) are built from each partition's first
    record, every other store, the resized one's first generation with them, is folded from
    its chain and the records since, and a topic no new table reads is not read again. Every
    table of every chain is then the oracle's over the whole log, each generation by its own
    declaration; no node says it reads the first generation, so the next run keeps it."""
    settings = "driver_batch_records = 0" if built_in == "executors" else ""
    path = write_project(tmp_path, ports=[18111, 18112, 18113], settings=settings)
    before = load(path)
    produce_test_events(before, seed=1)
    run(before, spark, notify=False)
    text = path.read_text()
    removed = text.index('[[stores]]\nname = "departures"')
    text = text[:removed] + text[text.index("[[stores]]", removed + 1) :]
    resized = text.index('name = "delaysHopping"')
    text = text[:resized] + text[resized:].replace('size = "1h"', 'size = "2h"', 1)
    path.write_text(with_seats_by_customer(text))
    after = load(path)
    assert "departures" not in after.stores and "seatsByCustomer" in after.stores
    produce_test_events(after, seed=2, n_bookings=300, n_trains=100, n_trips=40, only={1, 4})

    published = read_manifest(_store(after))
    tables = tables_of(after, published)
    resized_now = generation(after.stores["delaysHopping"]).name
    assert tables.stores["delaysHopping"] == before.stores["delaysHopping"]  # kept beside it
    plan = plan_run(tables, published, FileLog(after))
    assert plan.rebuild is not None
    assert plan.rebuild.stores == {"seatsByCustomer", resized_now}
    assert plan.changed == list(range(after.cluster.partitions))
    for topic, ranges in plan.ranges.items():
        for p, (start, _) in ranges.items():
            read_again = topic in ("bookings", "trains")
            assert start == (0 if read_again else chains.position(after, published, p)[topic])
    report = run(after, spark, notify=False)
    assert report.rebuild and report.from_start == sorted(["seatsByCustomer", resized_now])
    manifest = _manifest(after)
    for chain, entry in manifest["partitions"].items():
        [base] = entry["layers"]  # every chain a base, above its published version
        assert base["kind"] == "base"
        assert base["version"] == published.partitions[int(chain)].version + 1
    assert_published_state_is_the_oracles(tables, manifest)
    again = run(after, spark, notify=False)  # the chains are the tables': extended
    assert not again.rebuild and again.versions == {}


def test_an_index_changed_builds_nothing_from_the_log(project: Project, second: dict):
    """The index is the nodes' own: another one folds the chains into new bases (which say
    what built their rows, index aside), reading no record again."""
    totals = project.stores["customerTotals"]
    reindexed = dataclasses.replace(totals, index=("seats",))
    changed = dataclasses.replace(project, stores={**project.stores, "customerTotals": reindexed})
    manifest = Manifest.from_json(orjson.dumps(second["manifest"]))
    plan = plan_run(changed, manifest, FileLog(project))
    assert plan.rebuild is not None and plan.rebuild.stores == frozenset()
    assert all(end == start for by_p in plan.ranges.values() for start, end in by_p.values())


def test_a_log_behind_the_published_positions_is_refused(project: Project, second: dict):
    manifest = orjson.loads(orjson.dumps(second["manifest"]))
    manifest["partitions"]["3"]["layers"][-1]["position"]["trains"] += 1
    with pytest.raises(LogBehindError, match="trains-3"):
        plan_run(project, Manifest.from_json(orjson.dumps(manifest)), FileLog(project))


def test_prune_removes_unnamed_layers_once_nodes_had_time_to_fetch_them(tmp_path: Path):
    named = [Layer(4, "base", snapshot_path(0, 4, "base"), "", 0, {}, 0)]
    named.append(Layer(5, "delta", snapshot_path(0, 5, "delta"), "", 0, {}, 0))
    folder = tmp_path / "p000"
    folder.mkdir()
    old, young = time.time() - 120, time.time()
    for version, kind, mtime in [
        (3, "base", old),  # folded into v4's base: gone
        (4, "delta", old),  # folded too
        (4, "base", old),  # named
        (5, "delta", old),  # named
        (6, "delta", young),  # a run publishing now, or just replaced: a node may fetch it
    ]:
        path = tmp_path / snapshot_path(0, version, kind)
        path.write_bytes(b"")
        os.utime(path, (mtime, mtime))
    write_manifest(tmp_path, Manifest(partitions={0: PartitionEntry(tuple(named))}))
    prune(tmp_path, read_manifest(tmp_path), grace_s=60)
    assert sorted(p.name for p in folder.iterdir()) == [
        "v000004.base.duckdb",
        "v000005.delta.arrow",
        "v000006.delta.arrow",
    ]


def test_notify_posts_to_the_nodes_hosting_changed_partitions(tmp_path: Path):
    seen: list[tuple[str, str | None]] = []

    class Node(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append((self.path, self.headers.get("x-stategate-secret")))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Node) for _ in range(2)]
    for server in servers:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as closed:  # a port nobody listens on: node2 is down
        closed.bind(("127.0.0.1", 0))
        down = closed.getsockname()[1]
    ports = [servers[0].server_port, down, servers[1].server_port]
    project = load(write_project(tmp_path, ports, partitions=9, replicas=1))
    try:
        results = notify_nodes(project, {0, 1})  # partition p lives on node(p % 3 + 1)
    finally:
        for server in servers:
            server.shutdown()
    assert results.keys() == {"node1", "node2"}
    assert results["node1"] == "ok"
    assert "ConnectError" in results["node2"]
    assert seen == [("/internal/sync", "test-secret")]


def assert_published_state_is_the_oracles(project: Project, manifest: dict) -> None:
    store_dir = _store(project)
    positions, tops = expected_positions(project), expected_chain_positions(project)
    expected = {name: expected_store(project, name) for name in layer_names(project)}
    assert manifest["log_end"] == {
        t: {str(p): positions[p][t] for p in positions} for t in project.topics
    }
    assert len(manifest["partitions"]) == chains.count(project)
    for chain in range(chains.count(project)):
        entry, p = manifest["partitions"][str(chain)], chains.partition(project, chain)
        assert entry["layers"][-1]["position"] == tops[chain]
        held = chains.stores(project, chain)
        for layer in entry["layers"]:
            assert layer["path"] == snapshot_path(chain, layer["version"], layer["kind"])
            with opened(store_dir / layer["path"]) as con:
                for store in held:
                    # a delta's every store, true for a deleted table key
                    deleted = [("_deleted", "BOOLEAN")] if layer["kind"] == "delta" else []
                    expected_schema = _expected_schema(project, store.name) + deleted
                    assert _schema(con, store.name) == expected_schema
        state = chain_state(project, store_dir, entry, chain)
        assert set(state) == {store.name for store in held}
        for store in held:
            name = store.name
            _assert_rows_equal(state[name], expected[name][p], f"{name} p{p}")
            assert store.kind == "table" or state[name], f"{name} p{p} is empty: weak test data"
            # the rows the manifest states (what every node's scan cost reads): a base's
            # exactly, a chain's newest layer's at least its state's (Layer.rows)
            stated = entry["layers"][-1]["rows"][name]
            if len(entry["layers"]) == 1:
                assert stated == len(state[name]), (name, chain)
            else:
                assert stated >= len(state[name]), (name, chain)


def _schema(con: duckdb.DuckDBPyConnection, table: str) -> list[tuple[str, str]]:
    return [(row[0], row[1]) for row in con.execute(f'DESCRIBE "{table}"').fetchall()]


def _expected_schema(project: Project, name: str) -> list[tuple[str, str]]:
    store = layer_store(project, name)
    identity = {"window": [("window_start", "BIGINT")], "versions": [("valid_from", "BIGINT")]}
    columns = [(c, DUCK_TYPES[t]) for c, t in store.stored_columns.items()]
    return [("key", DUCK_TYPES[store.key_type]), *identity.get(store.kind, []), *columns]


def _assert_rows_equal(actual: list[tuple], expected: list[tuple], where: str) -> None:
    """Equal in order (so the file is sorted); floats within rounding, the rest exactly."""
    assert len(actual) == len(expected), where
    for got, want in zip(actual, expected, strict=True):
        assert len(got) == len(want), where
        for a, b in zip(got, want, strict=True):
            if isinstance(b, float):
                assert isinstance(a, float) and math.isclose(a, b, rel_tol=1e-12), (
                    where,
                    got,
                    want,
                )
            else:
                assert type(a) is type(b) and a == b, (where, got, want)


def _store(project: Project) -> Path:
    return Path(project.snapshot_store)


def _manifest(project: Project) -> dict:
    """The manifest as written: JSON, read without the project's own parser."""
    manifest: dict = orjson.loads((_store(project) / "manifest.json").read_bytes())
    return manifest


def _digests(project: Project) -> dict[str, str]:
    return {
        str(p.relative_to(_store(project))): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(_store(project).glob("p*/v*"))
    }


def test_compaction_folds_a_chain_into_a_base_at_the_same_version(project: Project, second: dict):
    store_dir = _store(project)
    manifest = read_manifest(store_dir)
    chains = {p: manifest.partitions[p] for p in CHANGED}
    bases = compact(project, store_dir, chains)
    write_manifest(store_dir, rebase(manifest, chains, bases))
    after = _manifest(project)["partitions"]
    for p in CHANGED:
        (base,) = after[str(p)]["layers"]
        assert (base["kind"], base["version"]) == ("base", 2)
        folded = second["manifest"]["partitions"][str(p)]["layers"]
        assert base["position"] == folded[-1]["position"]
    assert_published_state_is_the_oracles(project, _manifest(project))


def test_rebase_keeps_the_deltas_published_while_a_compaction_ran() -> None:
    def layer(version: int, kind: Kind) -> Layer:
        return Layer(version, kind, snapshot_path(0, version, kind), "", 0, {}, version)

    folded = PartitionEntry((layer(1, "base"), layer(2, "delta")))
    now = PartitionEntry((*folded.layers, layer(3, "delta")))
    rebuilt = PartitionEntry((layer(4, "base"),))
    new_base = layer(2, "base")
    rebased = rebase(Manifest({0: now}), {0: folded}, {0: new_base})
    published = dataclasses.replace(new_base, published_ms=rebased.updated_ms)  # named now
    assert rebased.partitions[0].layers == (published, layer(3, "delta"))
    untouched = rebase(Manifest({0: rebuilt}), {0: folded}, {0: new_base})
    assert untouched.partitions[0] == rebuilt


def test_a_run_folds_a_chain_due_for_compaction_into_its_new_layer(
    project: Project, spark: LazySpark, second: dict
):
    produce_test_events(project, seed=4, n_bookings=200, n_trains=0, n_trips=0, only={2})
    produce_test_events(project, seed=5, n_bookings=100, n_trains=0, n_trips=0, only={2})
    eager = dataclasses.replace(
        project, settings=dataclasses.replace(project.settings, compact_after_deltas=1)
    )
    assert run(eager, spark, notify=False).layers == {2: "delta"}  # [v1 base, v2 delta]
    produce_test_events(project, seed=6, n_bookings=100, n_trains=30, n_trips=0, only={2})
    report = run(eager, spark, notify=False)
    assert report.layers == {2: "base"}  # [v1, v2] is due: v3 folds it
    (base,) = _manifest(project)["partitions"]["2"]["layers"]
    assert base["version"] == 3
    assert_published_state_is_the_oracles(project, _manifest(project))
