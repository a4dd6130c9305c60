"""`stategate produce`: JSON lines in, records on the partitions Kafka would choose; a line
that does not fit the topic appends nothing, or with --skip-bad is left out and reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from contracts import eventlog
from contracts import project as config
from contracts.manifest import FILE_NAME as MANIFEST
from contracts.partitioner import partition_for
from contracts.records import Record
from tests.projects import write_project
from topics import TopicsError
from topics.files import FileLog

TOPICS = ("bookings", "trains")


def produce(
    config_path: Path, topic: str, lines: list[str], *flags: str
) -> subprocess.CompletedProcess[str]:
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
            *flags,
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
    assert wrong_type.returncode == 2 and "key: expected int (a JSON integer" in wrong_type.stderr
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
        ('{"key": 1, "value": {"delay": NaN}}', "value.delay: expected int"),
        ('{"key": "b", "value": {"price": 1e999}}', "value.price: expected double"),
        ('{"key": "b", "value": {"price": -Infinity}}', "got -inf"),
        ('{"key": 1, "value": {"station": "a\\ud800"}}', "value.station is not valid Unicode"),
        ('{"key": 1, "value": {"\\udc00": 1}}', "value.\\udc00: not a field of topic"),
        (json.dumps({"key": 1, "value": ok, "timestamp": -1}), "outside 0.."),
        (json.dumps({"key": 1, "value": ok, "timestamp": 1.5}), "integer of milliseconds"),
        (json.dumps({"key": 1, "value": ok, "timestamp": True}), "integer of milliseconds"),
    ]
    for line, message in refused:
        done = produce(path, "bookings" if "price" in line else "trains", [line])
        assert done.returncode == 2 and message in done.stderr, (line, done.stderr)
    assert all(eventlog.end_offset(project.log_dir, t, p) == 0 for t in TOPICS for p in range(9))
    surrogate_key = produce(path, "bookings", ['{"key": "\\ud800", "value": null}'])
    assert surrogate_key.returncode == 2 and "key is not valid Unicode" in surrogate_key.stderr

    at_zero = produce(path, "trains", [json.dumps({"key": 1, "value": ok, "timestamp": 0})])
    assert at_zero.returncode == 0, at_zero.stderr
    p = partition_for(1, "int", project.cluster.partitions)
    assert [r["timestamp"] for r in eventlog.read(project.log_dir, "trains", p)] == [0]


# What issue 22 found appended: each line refused with one line naming it, the field, the
# expected type and the value.
BAD_BOOKINGS = [
    (
        {"key": "C1", "value": {"price": "cheap", "seats": 1, "trip": "x"}},
        "line 1: value.price: expected double (a finite JSON number; an integer within "
        '±9007199254740992), got "cheap"; nothing was appended',
    ),
    (
        {"key": "C1", "value": {"seats": 1.5}},
        "line 1: value.seats: expected int (a JSON integer in -2147483648..2147483647), "
        "got 1.5; nothing was appended",
    ),
    (
        {"key": "C1", "value": {"seats": 2.0}},
        "line 1: value.seats: expected int (a JSON integer in -2147483648..2147483647), "
        "got 2.0; nothing was appended",
    ),
    (
        {"key": "C1", "value": {"trip": "x", "unknownField": 1}},
        "line 1: value.unknownField: not a field of topic 'bookings' (its fields: trip, "
        "price, seats; each may be missing or null); nothing was appended",
    ),
    ({"value": None}, "line 1: missing field 'key'; nothing was appended"),
    ({"key": "C1"}, "line 1: missing field 'value' (null for a tombstone); nothing was appended"),
]


def test_produce_refuses_values_the_declaration_does_not_allow(tmp_path: Path) -> None:
    path = write_project(tmp_path, [1, 2])
    project = config.load(path)
    good = json.dumps({"key": "C0", "value": {"trip": "A→B", "price": 3, "seats": 1}})
    for item, message in BAD_BOOKINGS:
        done = produce(path, "bookings", [json.dumps(item), good])
        assert done.returncode == 2, done
        assert done.stderr == f"stategate: {message}\n"
        assert done.stdout == ""
    assert all(eventlog.end_offset(project.log_dir, t, p) == 0 for t in TOPICS for p in range(9))


def test_long_keys_and_values_take_integers_and_decimal_strings(tmp_path: Path) -> None:
    path = tmp_path / "stategate.toml"
    path.write_text(
        write_project(tmp_path, [1]).read_text().replace("replicas = 2", "replicas = 1")
        + '\n[[topics]]\nname = "accounts"\nkey = "long"\nvalue = { balance = "long" }\n'
    )
    project = config.load(path)
    lines = [
        '{"key": "-9223372036854775808", "value": {"balance": "9223372036854775807"}}',
        '{"key": 42, "value": {"balance": -1}}',
    ]
    done = produce(path, "accounts", lines)
    assert done.returncode == 0, done.stderr
    stored = [
        (r["key"], r["value"])
        for p in range(9)
        for r in eventlog.read(project.log_dir, "accounts", p)
    ]
    assert sorted(stored) == [(-(2**63), {"balance": 2**63 - 1}), (42, {"balance": -1})]
    too_big = produce(path, "accounts", ['{"key": 9223372036854775808, "value": null}'])
    assert too_big.returncode == 2 and "Traceback" not in too_big.stderr
    assert too_big.stderr == (
        "stategate: line 1: key: expected long (a JSON integer or decimal string in "
        "-9223372036854775808..9223372036854775807), got 9223372036854775808; nothing was "
        "appended\n"
    )


def test_skip_bad_appends_the_good_lines_and_reports_each_bad_one(tmp_path: Path) -> None:
    path = write_project(tmp_path, [1, 2])
    project = config.load(path)
    lines = [
        json.dumps({"key": "a", "value": {"trip": "A→B", "price": 9.5, "seats": 2}}),
        json.dumps({"key": "b", "value": {"seats": 1.5}}),
        "{not json",
        json.dumps({"key": "c", "value": None}),
    ]
    done = produce(path, "bookings", lines, "--skip-bad")
    assert done.returncode == 1
    assert json.loads(done.stdout)["appended"] == 2 and json.loads(done.stdout)["refused"] == 2
    assert done.stderr.splitlines() == [
        "stategate: line 2: value.seats: expected int (a JSON integer in "
        "-2147483648..2147483647), got 1.5; left out",
        "stategate: line 3: not JSON: Expecting property name enclosed in double quotes: "
        "line 1 column 2 (char 1); left out",
    ]
    stored = sorted(
        r["key"] for p in range(9) for r in eventlog.read(project.log_dir, "bookings", p)
    )
    assert stored == ["a", "c"]
    all_good = produce(path, "bookings", [lines[0]], "--skip-bad")
    assert all_good.returncode == 0 and json.loads(all_good.stdout)["refused"] == 0


def test_a_file_log_keeps_the_partition_count_its_records_were_routed_by(
    tmp_path: Path,
) -> None:
    """A project whose partitions changed over a file log (it cannot be repartitioned in
    place: every key would be looked for elsewhere) is refused by the producer and by the
    pipeline, in one line, before anything is appended, read or published."""
    path = write_project(tmp_path, [1, 2, 3], partitions=3)
    line = json.dumps({"key": 7, "value": {"delay": 1}, "timestamp": 1_000})
    assert produce(path, "trains", [line]).returncode == 0
    log_dir = config.load(path).log_dir
    before = {p: eventlog.end_offset(log_dir, "trains", p) for p in range(3)}

    write_project(tmp_path, [1, 2, 3], partitions=4)
    refused = produce(path, "trains", [line])
    assert refused.returncode == 2, refused.stderr
    assert "'trains' of" in refused.stderr and "written with 3 partitions" in refused.stderr
    pipeline = subprocess.run(
        [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(path), "--no-notify"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert pipeline.returncode == 2, pipeline.stderr
    said = [line for line in pipeline.stderr.splitlines() if line.startswith("stategate:")]
    assert len(said) == 1 and "'trains' was written with 3 partitions" in said[0], said
    assert "Traceback" not in pipeline.stderr
    assert {p: eventlog.end_offset(log_dir, "trains", p) for p in range(3)} == before
    assert not eventlog.segments(log_dir, "trains", 3)
    assert not (Path(config.load(path).snapshot_store) / MANIFEST).exists()


def test_a_file_log_written_segment_by_segment_is_held_to_its_folders(tmp_path: Path) -> None:
    """A log no `produce` wrote down (segments written by another tool) is refused for a
    partition folder past the declared count."""
    project = config.load(write_project(tmp_path, [1, 2, 3], partitions=2))
    record = Record(key=7, value={"delay": 1}, timestamp_ms=1_000)
    eventlog.append(project.log_dir, project.topics["trains"], 1, [record])
    FileLog(project).check()
    eventlog.append(project.log_dir, project.topics["trains"], 2, [record])
    with pytest.raises(TopicsError, match="'trains' has a partition 2"):
        FileLog(project).check()


def test_a_following_pipeline_told_of_other_partitions_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGHUP with a file whose partition count differs: the pipeline keeps following the
    file it had, and says why in one line (the change takes a restart)."""
    from stategate.cli import _read_again

    path = write_project(tmp_path, [1, 2, 3], partitions=3)
    project = config.load(path)
    write_project(tmp_path, [1, 2, 3], partitions=4)
    assert _read_again(project) is None
    said = [r.getMessage() for r in caplog.records if "SIGHUP" in r.getMessage()]
    assert said == [
        "SIGHUP: nothing changed: [cluster] partitions differ (3, the file 4), which takes a "
        "log of as many partitions and a rebuild: a restart"
    ]


def test_a_line_that_is_not_utf8_is_named_so(tmp_path: Path) -> None:
    """Whatever the locale, bytes that are not UTF-8 are refused as such, not read as lone
    surrogates and refused for those."""
    path = write_project(tmp_path, [1, 2])
    good = json.dumps({"key": "a", "value": {"seats": 2}}).encode()
    bad = b'{"key": "b", "value": {"trip": "caf\xe9"}}'
    argv = [sys.executable, "-m", "stategate.cli", "produce", "--config", str(path)]
    done = subprocess.run(
        [*argv, "--topic", "bookings", "--skip-bad"],
        input=good + b"\n" + bad + b"\n",
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert json.loads(done.stdout)["appended"] == 1
    assert done.stderr.decode().splitlines() == [
        "stategate: line 2: not UTF-8 text: invalid continuation byte at byte 35; left out"
    ]
