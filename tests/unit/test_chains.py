"""A partition's chains (contracts/chains.py) carry the positions of the topics their stores
read, and a batch extends only the chains whose topics have new records: the demo's
timetable, a global store no partitioned store reads, costs the bookings' micro-batches
nothing, and its chains stand where the trips topic does."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import chains, eventlog
from contracts.eventlog import Record
from contracts.manifest import Manifest, read_manifest, write_manifest
from contracts.project import Project, load
from spark_pipeline.batch import publish_here
from spark_pipeline.plan import plan_run
from stategate.demo import bookings
from tests.chains import chain_state
from tests.oracle import expected_chain_positions, expected_positions, expected_store
from tests.projects import demo_project, write_project
from topics.files import FileLog


@pytest.fixture
def demo(tmp_path: Path) -> Project:
    project = demo_project(tmp_path)
    bookings.generate(project, customers=50, events=300, end_ms=1_767_225_600_000)
    return project


def test_each_chain_carries_the_topics_its_stores_read(demo: Project, tmp_path: Path) -> None:
    assert chains.count(demo) == 2 * demo.cluster.partitions
    assert chains.topics(demo, 0) == ("bookings",)
    assert chains.topics(demo, chains.global_chain(demo, 0)) == ("trips",)
    (tmp_path / "shared").mkdir()
    shared = load(write_project(tmp_path / "shared", [1, 2, 3]))  # departures reads trips too
    assert chains.topics(shared, 0) == ("bookings", "trains", "trips")
    assert chains.topics(shared, chains.global_chain(shared, 0)) == ("trips",)
    assert chains.held(demo, [4, 1]) == [1, 4, *range(9, 18)]


def publish(project: Project) -> tuple[Manifest, Manifest]:
    store = Path(project.snapshot_store)
    before = read_manifest(store)
    log = FileLog(project)
    whole = publish_here(project, store, before, log, plan_run(project, before, log).until())
    write_manifest(store, whole.manifest)
    return before, whole.manifest


def test_only_the_chains_whose_topics_moved_get_a_layer(demo: Project) -> None:
    _, first = publish(demo)
    assert sorted(first.partitions) == list(range(chains.count(demo)))
    booked = Record("C000001", {"trip": "Berlin→Hamburg", "price": 10.0, "seats": 1}, 1)
    eventlog.produce(demo.log_dir, demo.topics["bookings"], demo.cluster.partitions, [booked])
    before, after = publish(demo)
    changed = {c for c in after.partitions if after.partitions[c] != before.partitions[c]}
    assert len(changed) == 1 and not chains.is_global(demo, changed.pop()), "no global layer"
    retimed = Record("Berlin→Hamburg", {"minutes": 95, "fare": 39.9, "operator": "ICE"}, 2)
    eventlog.produce(demo.log_dir, demo.topics["trips"], demo.cluster.partitions, [retimed])
    before, after = publish(demo)
    changed = {c for c in after.partitions if after.partitions[c] != before.partitions[c]}
    assert len(changed) == 1 and chains.is_global(demo, chain := changed.pop())
    assert after.partitions[chain].top.kind == "delta"
    positions, ends = expected_chain_positions(demo), expected_positions(demo)
    assert after.log_end == {
        t: {p: ends[p][t] for p in range(demo.cluster.partitions)} for t in demo.topics
    }
    for chain, entry in after.partitions.items():
        assert entry.position == positions[chain]
        layers = {"layers": [vars(layer) for layer in entry.layers]}
        state = chain_state(demo, Path(demo.snapshot_store), layers, chain)
        partition = chains.partition(demo, chain)
        for name, rows in state.items():
            want = expected_store(demo, name)[partition]
            assert len(rows) == len(want), name
            assert all(tuple(g) == pytest.approx(tuple(w)) for g, w in zip(rows, want, strict=True))
