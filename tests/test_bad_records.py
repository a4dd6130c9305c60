"""Bad records in the log (written straight into segments, past the producer's check) meet
settings.bad_records in the real pipeline: "skip" leaves each out of every store (the stores
equal an oracle of the good records alone), counts it by topic and reason, and writes it once
to the dead-letter file, even when a batch is published again after a crash; "fail" stops
the run naming the record's position and publishes nothing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts import chains, eventlog
from contracts.partitioner import partition_for
from contracts.project import Project, load
from spark_pipeline import job
from spark_pipeline.dead_letter import BadRecordError, dead_letter_path
from spark_pipeline.loop import PipelineLoop
from spark_pipeline.spark import LazySpark
from tests import progress
from tests.chains import chain_state
from tests.oracle import expected_store, layer_names
from tests.projects import START_MS, produce_test_events, write_project
from tests.test_pipeline import _assert_rows_equal
from tests.test_stream import wait_caught_up

PARTITIONS = 3
# (topic, key, timestamp, value as JSON text, the reason it is bad or None)
RAW = [
    ("bookings", "b1", START_MS, '{"trip": "x", "price": "cheap", "seats": 1}', "wrong_type"),
    ("bookings", "b2", START_MS, '{"seats": 1.5}', "not_an_integer"),
    ("bookings", "b3", START_MS, '{"seats": 2.0}', "not_an_integer"),
    ("bookings", "b4", START_MS, '{"trip": "y", "unknownField": 1}', "unknown_field"),
    ("bookings", "b5", START_MS, "not json", "not_json"),
    ("bookings", "b6", START_MS, "[1, 2]", "not_an_object"),
    ("bookings", "b7", START_MS, '{"price": 1, "price": 2}', "duplicate_field"),
    ("bookings", "b8", -5, '{"price": 1}', "bad_timestamp"),
    ("bookings", "b9", START_MS, '{"price": 9007199254740993}', "out_of_range"),
    # nested past what Python's JSON reader takes: explained, not a RecursionError
    ("bookings", "b10", START_MS, '{"trip": ' + "[" * 1000 + "]" * 1000 + "}", "wrong_type"),
    ("bookings", "ok1", START_MS + 1, '{"trip": "z", "price": 3, "seats": 2}', None),
    ("bookings", "ok2", START_MS + 2, None, None),
    ("trains", 5, START_MS, '{"delay": 3000000000}', "out_of_range"),
    ("trains", 6, START_MS, '{"cancelled": "yes"}', "wrong_type"),
    ("trains", 7, START_MS, '{"delay": 4, "station": "Köln", "cancelled": false}', None),
]
WIDE_KEY = 2**40  # an int topic's key past 32 bits, in a segment whose key column is int64


def write_raw(project: Project) -> set[tuple[str, int, int]]:
    """Append RAW as a foreign producer would, one segment per topic partition after what
    is there; returns the bad records' positions."""
    by_segment: dict[tuple[str, int], list[tuple[Any, int, str | None, str | None]]] = {}
    for topic, key, stamp, value, reason in RAW:
        p = partition_for(key, project.topics[topic].key_type, PARTITIONS)
        by_segment.setdefault((topic, p), []).append((key, stamp, value, reason))
    bad = set()
    for (topic, p), rows in by_segment.items():
        base = eventlog.end_offset(project.log_dir, topic, p)
        _segment(project, topic, p, base, [(k, s, v) for k, s, v, _ in rows])
        bad |= {(topic, p, base + i) for i, (*_, reason) in enumerate(rows) if reason}
    p = partition_for(WIDE_KEY % 2**31, "int", PARTITIONS)  # any partition will do
    base = eventlog.end_offset(project.log_dir, "trains", p)
    _segment(project, "trains", p, base, [(WIDE_KEY, START_MS, None)], pa.int64())
    return bad | {("trains", p, base)}


def _segment(
    project: Project,
    topic: str,
    p: int,
    base: int,
    rows: list[tuple[Any, int, str | None]],
    key_type: pa.DataType | None = None,
) -> None:
    schema = eventlog.record_schema(project.topics[topic])
    if key_type is not None:
        schema = schema.set(2, pa.field("key", key_type))
    table = pa.table(
        {
            "offset": list(range(base, base + len(rows))),
            "timestamp": [stamp for _, stamp, _ in rows],
            "key": [key for key, _, _ in rows],
            "value": [value for _, _, value in rows],
        },
        schema=schema,
    )
    folder = eventlog.partition_dir(project.log_dir, topic, p)
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, folder / f"{base:020d}.parquet")


def dead_letters(project: Project) -> dict[tuple[str, int, int], dict[str, Any]]:
    store = Path(project.snapshot_store)
    found = {}
    for topic in project.topics:
        for p in range(PARTITIONS):
            path = dead_letter_path(store, topic, p)
            for line in path.read_text().splitlines() if path.exists() else []:
                entry = json.loads(line)
                assert (entry["topic"], entry["partition"]) == (topic, p)
                found[(topic, p, entry["offset"])] = entry
    return found


@pytest.fixture(scope="module")
def skipped(spark: LazySpark, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    project = load(write_project(tmp_path_factory.mktemp("skip"), [18301], PARTITIONS, 1))
    produce_test_events(project, seed=5, n_bookings=300, n_trains=100)
    bad = write_raw(project)
    produce_test_events(project, seed=6, n_bookings=100, n_trains=50)  # good ones after them
    report = job.run(project, spark, notify=False)
    return {"project": project, "bad": bad, "report": report}


def test_skip_leaves_bad_records_out_of_every_store(skipped: dict[str, Any]) -> None:
    project, bad = skipped["project"], skipped["bad"]
    manifest = orjson.loads((Path(project.snapshot_store) / "manifest.json").read_bytes())
    expected = {name: expected_store(project, name, bad) for name in layer_names(project)}
    for chain in range(chains.count(project)):
        entry, p = manifest["partitions"][str(chain)], chains.partition(project, chain)
        topics = chains.topics(project, chain)
        ends = {t: eventlog.end_offset(project.log_dir, t, p) for t in topics}
        assert entry["layers"][-1]["position"] == ends  # bad records are consumed too
        state = chain_state(project, Path(project.snapshot_store), entry, chain)
        for name in state:
            _assert_rows_equal(state[name], expected[name][p], f"{name} p{p}")
    assert "b9" not in {row[0] for rows in expected["latestBooking"].values() for row in rows}


def expected_counts() -> dict[str, dict[str, int]]:
    """topic -> reason -> the bad records write_raw writes."""
    reasons: dict[str, dict[str, int]] = {}
    for topic, _, _, _, reason in RAW:
        if reason:
            reasons.setdefault(topic, {}).setdefault(reason, 0)
            reasons[topic][reason] += 1
    reasons["trains"]["out_of_range"] += 1  # the wide key
    return reasons


def test_skip_counts_bad_records_by_topic_and_reason(skipped: dict[str, Any]) -> None:
    assert skipped["report"].bad_records == expected_counts()


def test_skip_writes_each_bad_record_to_the_dead_letter_file_once(
    skipped: dict[str, Any], spark: LazySpark
) -> None:
    project, bad = skipped["project"], skipped["bad"]
    letters = dead_letters(project)
    assert set(letters) == bad
    raw = {(t, k): (s, v, r) for t, k, s, v, r in RAW}
    for (topic, _, _), entry in letters.items():
        key = entry["key"]
        stamp, value, reason = raw.get((topic, key), (START_MS, None, "out_of_range"))
        assert (entry["timestamp"], entry["value"], entry["reason"]) == (stamp, value, reason)
    assert (
        letters[next(k for k in bad if k[0] == "bookings" and letters[k]["key"] == "b2")]["message"]
        == "value.seats: expected int (a JSON integer in -2147483648..2147483647), got 1.5"
    )
    # a crash after the layers (and dead letters) were written, before the manifest: the run
    # that follows reads the same records again, and writes no dead letter twice
    store = Path(project.snapshot_store)
    (store / "manifest.json").unlink()  # as if never published: every record is read again
    before = {
        path.name: path.read_bytes() for path in (store / "dead-letter").iterdir() if path.suffix
    }
    report = job.run(project, spark, notify=False)
    assert report.bad_records == skipped["report"].bad_records
    after = {
        path.name: path.read_bytes() for path in (store / "dead-letter").iterdir() if path.suffix
    }
    assert after == before


def test_fail_stops_the_run_naming_the_record_and_publishes_nothing(
    spark: LazySpark, tmp_path: Path
) -> None:
    path = write_project(tmp_path, [18302], PARTITIONS, 1, settings='bad_records = "fail"')
    project = load(path)
    produce_test_events(project, seed=7, n_bookings=50, n_trains=0)
    key = "b2"
    p = partition_for(key, "string", PARTITIONS)
    base = eventlog.end_offset(project.log_dir, "bookings", p)
    _segment(project, "bookings", p, base, [(key, START_MS, '{"seats": 1.5}')])
    with pytest.raises(BadRecordError) as caught:
        job.run(project, spark, notify=False)
    assert str(caught.value).startswith(
        f"bad record at bookings-{p} offset {base}: not_an_integer: value.seats: expected int "
        "(a JSON integer in -2147483648..2147483647), got 1.5"
    )
    assert not (Path(project.snapshot_store) / "manifest.json").exists()
    assert not (Path(project.snapshot_store) / "dead-letter").exists()


def test_fail_stops_a_restart_before_spark_naming_the_record(
    spark: LazySpark, tmp_path: Path
) -> None:
    """`stategate pipeline --follow` restarted over a bad record publishes nothing in its
    catch-up before Spark starts: it names the record and exits 1, without a traceback."""
    path = write_project(tmp_path, [18304], PARTITIONS, 1, settings='bad_records = "fail"')
    project = load(path)
    produce_test_events(project, seed=7, n_bookings=50, n_trains=0)
    job.run(project, spark, notify=False)
    manifest = Path(project.snapshot_store) / "manifest.json"
    before = manifest.read_bytes()
    key = "b2"
    p = partition_for(key, "string", PARTITIONS)
    base = eventlog.end_offset(project.log_dir, "bookings", p)
    _segment(project, "bookings", p, base, [(key, START_MS, '{"seats": 1.5}')])
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(path)]
    done = subprocess.run(
        [*command, "--follow", "--no-notify"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"stopped: bad record at bookings-{p} offset {base}: not_an_integer" in done.stderr
    assert "Traceback" not in done.stderr and "starting Spark" not in done.stderr
    assert manifest.read_bytes() == before


def test_the_follower_skips_bad_records_micro_batch_by_micro_batch(
    spark: LazySpark, tmp_path: Path
) -> None:
    project = load(write_project(tmp_path, [18303], PARTITIONS, 1))
    fast = dataclasses.replace(project.settings, trigger_interval_s=0.3)
    project = dataclasses.replace(project, settings=fast)
    produce_test_events(project, seed=8, n_bookings=80, n_trains=20)
    with progress.captured() as lines:
        running = PipelineLoop(project, spark, notify=False)
        running.start()
        try:
            wait_caught_up(project)
            bad = write_raw(project)  # while following
            manifest = wait_caught_up(project)
        finally:
            running.stop()
    assert running.progress.bad_records == expected_counts()
    json.dumps(dataclasses.asdict(running.progress), default=str)  # as --follow prints it
    assert set(dead_letters(project)) == bad
    assert any(line.startswith(f"left out {len(bad)} bad records (bookings: ") for line in lines)
    expected = {name: expected_store(project, name, bad) for name in layer_names(project)}
    for p, entry in manifest["partitions"].items():
        state = chain_state(project, Path(project.snapshot_store), entry, int(p))
        for name in state:
            partition = chains.partition(project, int(p))
            _assert_rows_equal(state[name], expected[name][partition], f"{name} p{p}")
