"""A micro-batch built in the driver (spark_pipeline/batch.py: publish_here) publishes each
partition on its own as soon as its layer is written: one commit per changed partition,
each manifest extending the one before, none naming a partition twice; and the chains it
leaves hold what the oracle computes from the raw log, round after round."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts import chains
from contracts.manifest import read_manifest, write_manifest
from contracts.project import Project, load
from spark_pipeline.batch import Published, publish_here
from spark_pipeline.plan import plan_run
from tests.chains import chain_state
from tests.oracle import expected_chain_positions, expected_store
from tests.projects import HOUR_MS, START_MS, produce_test_events, write_project
from topics.files import FileLog

PARTITIONS = 3


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return load(write_project(tmp_path, [1, 2, 3], partitions=PARTITIONS))


def test_each_partition_is_committed_alone_as_its_layer_is_written(project: Project) -> None:
    store = Path(project.snapshot_store)
    log = FileLog(project)
    committed: list[Published] = []

    def commit(one: Published) -> None:
        committed.append(one)
        write_manifest(store, one.manifest)

    for round_ in range(3):  # bases, then deltas
        produce_test_events(
            project, seed=round_, n_bookings=120, n_trains=40, start_ms=START_MS + round_ * HOUR_MS
        )
        before, earlier = read_manifest(store), len(committed)
        plan = plan_run(project, before, log)
        whole = publish_here(project, store, before, log, plan.until(), commit)
        commits = committed[earlier:]
        assert sorted(p for c in commits for p in c.layers) == list(range(chains.count(project)))
        seen = dict(before.partitions)
        for one in commits:
            (partition,) = {chains.partition(project, chain) for chain in one.layers}
            assert sorted(one.layers) == chains.of_partition(project, partition), "together"
            assert one.manifest.partitions == {
                **seen,
                **{chain: one.manifest.partitions[chain] for chain in one.layers},
            }
            for chain in one.layers:
                assert one.manifest.partitions[chain].top == one.layers[chain]
            seen = dict(one.manifest.partitions)
        assert whole.manifest == commits[-1].manifest
        assert whole.layers == {p: layer for c in commits for p, layer in c.layers.items()}
        assert whole.records == sum(c.records for c in commits) == plan.records(set(project.topics))
        assert_state_is_the_oracles(project)


def assert_state_is_the_oracles(project: Project) -> None:
    store = Path(project.snapshot_store)
    manifest = read_manifest(store)
    positions = expected_chain_positions(project)
    assert project.global_stores, "the test project has both kinds of chain"
    for chain, entry in manifest.partitions.items():
        partition = chains.partition(project, chain)
        assert entry.position == positions[chain]
        layers = {"layers": [vars(layer) for layer in entry.layers]}
        state = chain_state(project, store, layers, chain)
        assert set(state) == {s.name for s in chains.stores(project, chain)}
        for name in state:
            expected = [tuple(row) for row in expected_store(project, name)[partition]]
            assert len(state[name]) == len(expected), name
            for got, want in zip(state[name], expected, strict=True):
                assert tuple(got) == pytest.approx(want), (name, got, want)


def test_a_partition_reads_what_was_appended_after_the_plan(project: Project) -> None:
    """A micro-batch's partition reads to the log's end when its task starts (plan.until_now):
    records appended after the plan are published in the same batch, up to the spare."""
    store = Path(project.snapshot_store)
    log = FileLog(project)
    produce_test_events(project, seed=0, n_bookings=120, n_trains=40)
    empty = read_manifest(store)
    write_manifest(
        store,
        publish_here(
            project,
            store,
            empty,
            log,
            plan_run(project, empty, log).until(),
        ).manifest,
    )

    produce_test_events(project, seed=1, n_bookings=60, n_trains=20, start_ms=START_MS + HOUR_MS)
    before = read_manifest(store)
    plan = plan_run(project, before, log)
    produce_test_events(project, seed=2, n_bookings=60, n_trains=20, start_ms=START_MS + HOUR_MS)
    ends = plan_run(project, before, log).ends

    held = publish_here(project, store, before, log, plan.until_now(log, spare=0))
    assert held.records == plan.records(set(project.topics)), "no spare: the plan's ends"
    one = 1
    capped = publish_here(project, store, before, log, plan.until_now(log, spare=one))
    assert capped.records == sum(
        min(ends[t][p], end + one) - start
        for t, by_p in plan.ranges.items()
        for p, (start, end) in by_p.items()
    )
    whole = publish_here(project, store, before, log, plan.until_now(log, spare=10**9))
    assert whole.records > plan.records(set(project.topics))
    write_manifest(store, whole.manifest)
    assert_state_is_the_oracles(project)
