"""The continuous pipeline on a real Spark session: after several micro-batches the published
chains hold what the oracle computes from the raw log (tables with tombstones, aggregates,
windows, positions), each micro-batch adding small deltas (built in the driver, or by the
executors for a burst), with compaction folding them beside it."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from contracts import chains, eventlog
from contracts.durable import locked
from contracts.manifest import FILE_NAME, FRESH_LAYERS
from contracts.project import Project, load
from snapshot_store import open_store
from spark_pipeline.loop import PipelineLoop
from spark_pipeline.spark import LazySpark
from tests import progress
from tests.chains import chain_state
from tests.oracle import expected_chain_positions, expected_positions, expected_store, layer_names
from tests.projects import HOUR_MS, START_MS, produce_test_events, write_project

CAUGHT_UP_S = 90


def manifest_of(project: Project) -> dict:
    """The published manifest: the object store's when the project names one (the
    pipeline's folder holds a copy written after it), else the folder's."""
    if project.object_store is not None:
        found = open_store(project.object_store).read(FILE_NAME)
        assert found is not None, f"nothing published to {project.object_store}"
        raw = found[0]
    else:
        raw = (Path(project.snapshot_store) / FILE_NAME).read_bytes()
    body: dict = orjson.loads(raw)
    return body


def wait_caught_up(project: Project, timeout_s: float = CAUGHT_UP_S) -> dict:
    """The manifest once every partition's top layer is at the log's end."""
    return watch_caught_up(project, timeout_s)[0]


@dataclass(frozen=True)
class Seen:
    """A layer as the first manifest naming it showed it."""

    chain: int
    layer: dict
    below: dict[str, int] | None  # the position of the layer under it then (none: a base)
    fresh: bool  # among its chain's newest FRESH_LAYERS then: it counts its appends


def watch_caught_up(
    project: Project, timeout_s: float = CAUGHT_UP_S
) -> tuple[dict, dict[str, Seen]]:
    """The manifest once every chain's top layer is at the log's end, and every layer the
    manifests named meanwhile (a compaction may fold a delta before the end), by path."""
    expected = expected_chain_positions(project)
    deadline = time.monotonic() + timeout_s
    seen: dict[str, Seen] = {}
    while True:
        manifest = manifest_of(project)
        for p, entry in manifest.get("partitions", {}).items():
            layers, below = entry["layers"], None
            for layer in layers:
                fresh = layer["version"] > layers[-1]["version"] - FRESH_LAYERS
                seen.setdefault(layer["path"], Seen(int(p), layer, below, fresh))
                below = layer["position"]
        tops = {
            int(p): e["layers"][-1]["position"] for p, e in manifest.get("partitions", {}).items()
        }
        if tops == expected:
            return manifest, seen
        assert time.monotonic() < deadline, f"not caught up: {tops} vs {expected}"
        time.sleep(0.1)


def assert_state_is_the_oracles(
    project: Project, manifest: dict, store_dir: Path | None = None
) -> None:
    """Every chain's state, read from `store_dir` (the pipeline's folder), is the oracle's."""
    expected = {name: expected_store(project, name) for name in layer_names(project)}
    assert len(manifest["partitions"]) == chains.count(project)
    for p, entry in manifest["partitions"].items():
        state = chain_state(project, store_dir or Path(project.snapshot_store), entry, int(p))
        partition = chains.partition(project, int(p))
        for name in state:
            assert_rows_close(state[name], [tuple(r) for r in expected[name][partition]], name)


def assert_rows_close(actual: list, expected: list, where: str) -> None:
    assert len(actual) == len(expected), where
    for got, want in zip(actual, expected, strict=True):
        for a, b in zip(got, want, strict=True):
            if isinstance(b, float):
                assert a == pytest.approx(b, rel=1e-12), (where, got, want)
            else:
                assert a == b, (where, got, want)


@pytest.fixture(scope="module")
def stream_log() -> Iterator[list[str]]:
    """What the follower logs, from its start."""
    with progress.captured() as lines:
        yield lines


@pytest.fixture(scope="module")
def follower(
    spark: LazySpark, tmp_path_factory: pytest.TempPathFactory, stream_log: list[str]
) -> Iterator[PipelineLoop]:
    root = tmp_path_factory.mktemp("stream")
    project = load(write_project(root, ports=[18201, 18202, 18203]))
    fast = dataclasses.replace(
        project.settings, trigger_interval_s=0.5, compact_after_deltas=3, compact_delta_ratio=10.0
    )
    project = dataclasses.replace(project, settings=fast)
    produce_test_events(project, seed=11, n_bookings=600, n_trains=200)
    running = PipelineLoop(project, spark, notify=False)
    running.start()
    yield running
    running.stop()


def test_micro_batches_publish_what_the_oracle_computes(follower: PipelineLoop) -> None:
    project = follower.project
    first = wait_caught_up(project)
    assert all(len(e["layers"]) == 1 for e in first["partitions"].values()), "caught up: bases"
    for round_ in range(3):  # later hours, tombstones and all: windows, tables and aggregates move
        produce_test_events(
            project,
            seed=20 + round_,
            n_bookings=150,
            n_trains=60,
            start_ms=START_MS + (round_ + 1) * HOUR_MS,
        )
        manifest, seen = watch_caught_up(project)
        assert_state_is_the_oracles(project, manifest)
        assert any(one.layer["kind"] == "delta" for one in seen.values()), "deltas, not bases"
    assert follower.progress.batches >= 3 and follower.progress.records > 0


def test_every_layer_counts_its_new_records_by_append_time(follower: PipelineLoop) -> None:
    """Each layer a batch wrote carries its new records counted by the append time the log
    stamped on them, the newest append time of the state up to it, and stage times no sooner
    than those appends; the pipeline's histogram counts every record it published once per
    stage."""
    project = follower.project
    wait_caught_up(project)
    later = START_MS + 4 * HOUR_MS
    produce_test_events(project, seed=40, n_bookings=90, n_trains=30, start_ms=later)
    manifest, seen = watch_caught_up(project)
    stamps = {
        (topic, p): [r["append_ms"] for r in eventlog.read(project.log_dir, topic, p)]
        for topic in project.topics
        for p in range(project.cluster.partitions)
    }
    for entry in manifest["partitions"].values():
        top = entry["layers"][-1]["version"]
        for layer in entry["layers"]:
            if layer["version"] <= top - FRESH_LAYERS:  # older: the manifest stays small
                assert layer["appended"] == []
    checked = 0
    for one in seen.values():
        layer, at = one.layer, one.layer["position"]
        below = one.below or dict.fromkeys(project.topics, 0)
        partition = chains.partition(project, one.chain)
        state = [s for t in at for s in stamps[(t, partition)][: at[t]]]
        assert layer["newest_append_ms"] == max(state, default=None)
        if one.fresh and layer["read_ms"] is not None:  # written from records, not folded
            counted = chains.counted(project, one.chain)
            new = [s for t in counted for s in stamps[(t, partition)][below[t] : at[t]]]
            assert dict(layer["appended"]) == dict(Counter(new))
            stages = [layer["read_ms"], layer["written_ms"], layer["published_ms"]]
            assert max(new, default=stages[0]) <= stages[0] and stages == sorted(stages), layer
            checked += 1
    assert checked > 0
    deadline = time.monotonic() + 10  # the last batch counts just after its manifest
    while (counts := published_counts(follower)) != dict.fromkeys(
        counts, follower.progress.records
    ):
        assert time.monotonic() < deadline, (counts, follower.progress.records)
        time.sleep(0.05)


def published_counts(follower: PipelineLoop) -> dict[str, float | None]:
    """The records the follower's histogram counted at each of its stages."""
    return {
        stage: follower.registry.get_sample_value(
            "stategate_freshness_seconds_count", {"stage": stage}
        )
        for stage in ("read", "written", "published")
    }


def test_compaction_folds_chains_beside_the_micro_batches(follower: PipelineLoop) -> None:
    project = follower.project
    deadline = time.monotonic() + CAUGHT_UP_S
    while follower.progress.compactions == 0:
        assert time.monotonic() < deadline, "no compaction ran"
        time.sleep(0.2)
    manifest = wait_caught_up(project)
    bases = [e["layers"][0] for e in manifest["partitions"].values()]
    assert any(b["version"] > 1 for b in bases), "a base folded deltas at a later version"
    assert_state_is_the_oracles(project, manifest)


def test_each_micro_batch_logs_its_records_partitions_and_positions(
    follower: PipelineLoop, stream_log: list[str]
) -> None:
    """One line per micro-batch, not per record: together they count the records produced,
    name the partitions that got them, and end at the raw log's positions."""
    project, lines = follower.project, stream_log
    before = wait_caught_up(project)
    deadline = time.monotonic() + 10
    while len(batch_lines(lines)) < follower.progress.batches:  # the last one's line is due
        assert time.monotonic() < deadline
        time.sleep(0.05)
    seen = len(batch_lines(lines))
    start = {int(p): e["layers"][-1]["position"] for p, e in before["partitions"].items()}
    produce_test_events(
        project, seed=30, n_bookings=90, n_trains=30, start_ms=START_MS + 9 * HOUR_MS, only={2, 5}
    )
    end = expected_positions(project)
    produced = sum(end[p][t] - start[p][t] for p in end for t in project.topics)
    changed = {p for p in end if end[p] != start[p]}
    assert produced > 0 and changed == {2, 5}
    deadline = time.monotonic() + CAUGHT_UP_S
    while True:
        batches = batch_lines(lines)[seen:]
        last: dict[int, dict[str, int]] = {}
        for _, _, _, at in batches:
            last.update(at)
        if last == {p: end[p] for p in changed}:
            break
        assert time.monotonic() < deadline, (batches, end)
        time.sleep(0.1)
    assert sum(records for _, records, _, _ in batches) == produced
    assert set().union(*(partitions for _, _, partitions, _ in batches)) == changed
    assert all(set(partitions) == set(at) for _, _, partitions, at in batches)
    # batches this small are built in the driver, without a Spark stage
    built = [m.group(4) for line in list(lines) if (m := progress.MICRO_BATCH.match(line))]
    assert set(built) == {"driver"}, built


def batch_lines(lines: list[str]) -> list[tuple[int, int, list[int], dict[int, dict[str, int]]]]:
    """(batch, records, partitions, positions) of each micro-batch line."""
    found = []
    for line in list(lines):
        match = progress.MICRO_BATCH.match(line)
        if match:
            batch, records, partitions, _, at = match.groups()
            changed = [int(p) for p in partitions.split(", ") if p]
            found.append((int(batch), int(records), changed, progress.positions(at)))
    return found


def test_a_burst_past_driver_batch_records_runs_on_the_executors_capped(
    follower: PipelineLoop, stream_log: list[str]
) -> None:
    """More new records than driver_batch_records go to Spark's executors, at most about
    max_records_per_batch a micro-batch (every partition with records moves), and the chains
    still hold what the oracle computes."""
    project = follower.project
    wait_caught_up(project)
    seen = len(list(stream_log))
    burst = dataclasses.replace(
        project.settings, driver_batch_records=100, max_records_per_batch=150
    )
    follower.project = dataclasses.replace(project, settings=burst)
    try:
        with locked(Path(project.snapshot_store)):  # the loop sees the burst whole
            produce_test_events(
                project, seed=40, n_bookings=300, n_trains=100, start_ms=START_MS + 10 * HOUR_MS
            )
        manifest = wait_caught_up(project)
    finally:
        follower.project = project
    assert_state_is_the_oracles(project, manifest)
    batches = [m for line in list(stream_log)[seen:] if (m := progress.MICRO_BATCH.match(line))]
    on_executors = [int(m.group(2)) for m in batches if m.group(4) == "executors"]
    assert len(on_executors) >= 2, batches  # 400 records, 150 a batch
    assert max(on_executors) <= 150 + project.cluster.partitions * len(project.topics)
