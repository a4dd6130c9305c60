"""`stategate produce`: JSON lines in, records on the partitions Kafka would choose; a bad
line appends nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from contracts import eventlog
from contracts import project as config
from contracts.partitioner import partition_for
from tests.projects import write_project


def produce(config_path: Path, topic: str, lines: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "stategate.cli",
            "produce",
            "--config",
            str(config_path),
            "--topic",
            topic,
        ],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_produce_routes_like_kafka_and_refuses_bad_lines(tmp_path: Path) -> None:
    path = write_project(tmp_path, [1, 2, 3])
    project = config.load(path)
    records = [
        {
            "key": k,
            "value": {"delay": i, "station": "Köln", "cancelled": False},
            "timestamp": 1_000 + i,
        }
        for i, k in enumerate([7, -7, 7, 2**31 - 1, 0])
    ]
    records.append({"key": 7, "value": None, "timestamp": 2_000})  # a tombstone
    done = produce(path, "trains", [json.dumps(r) for r in records])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["appended"] == len(records)

    stored: dict[int, list[dict]] = {}
    for p in range(project.cluster.partitions):
        stored[p] = list(eventlog.read(project.log_dir, "trains", p))
        assert [r["offset"] for r in stored[p]] == list(range(len(stored[p])))
    for record in records:
        p = partition_for(record["key"], "int", project.cluster.partitions)
        assert any(
            r["key"] == record["key"]
            and r["value"] == record["value"]
            and r["timestamp"] == record["timestamp"]
            for r in stored[p]
        )

    before = {p: eventlog.end_offset(project.log_dir, "trains", p) for p in stored}
    bad = produce(path, "trains", [json.dumps(records[0]), "{not json", json.dumps(records[1])])
    assert bad.returncode == 2 and "line 2" in bad.stderr
    wrong_type = produce(path, "trains", [json.dumps({"key": "seven", "value": {}})])
    assert wrong_type.returncode == 2 and "integer key" in wrong_type.stderr
    not_object = produce(path, "trains", [json.dumps({"key": 1, "value": [1, 2]})])
    assert not_object.returncode == 2 and "JSON object" in not_object.stderr
    unknown = produce(path, "nope", [json.dumps(records[0])])
    assert unknown.returncode == 2 and "unknown topic" in unknown.stderr
    after = {p: eventlog.end_offset(project.log_dir, "trains", p) for p in stored}
    assert after == before


def test_produce_refuses_what_the_log_must_not_hold_and_keeps_timestamp_zero(
    tmp_path: Path,
) -> None:
    path = write_project(tmp_path, [1, 2])
    project = config.load(path)
    ok = {"delay": 1, "station": "Köln", "cancelled": False}
    refused = [
        ('{"key": 1, "value": {"delay": 1, "station": "x", "ratio": NaN}}', "value.ratio is nan"),
        ('{"key": 1, "value": {"ratio": 1e999}}', "value.ratio is inf"),
        ('{"key": 1, "value": {"ratio": -Infinity}}', "value.ratio is -inf"),
        ('{"key": 1, "value": {"station": "a\\ud800"}}', "value.station is not valid Unicode"),
        ('{"key": 1, "value": {"\\udc00": 1}}', "a field name in value is not valid Unicode"),
        (json.dumps({"key": 1, "value": ok, "timestamp": -1}), "outside 0.."),
        (json.dumps({"key": 1, "value": ok, "timestamp": 1.5}), "integer of milliseconds"),
        (json.dumps({"key": 1, "value": ok, "timestamp": True}), "integer of milliseconds"),
    ]
    for line, message in refused:
        done = produce(path, "trains", [line])
        assert done.returncode == 2 and message in done.stderr, (line, done.stderr)
    assert all(eventlog.end_offset(project.log_dir, "trains", p) == 0 for p in range(9))
    surrogate_key = produce(path, "bookings", ['{"key": "\\ud800", "value": null}'])
    assert surrogate_key.returncode == 2 and "key is not valid Unicode" in surrogate_key.stderr

    at_zero = produce(path, "trains", [json.dumps({"key": 1, "value": ok, "timestamp": 0})])
    assert at_zero.returncode == 0, at_zero.stderr
    p = partition_for(1, "int", project.cluster.partitions)
    assert [r["timestamp"] for r in eventlog.read(project.log_dir, "trains", p)] == [0]
