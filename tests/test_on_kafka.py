"""The state built from Kafka topics answers every query kind as the oracle says: the project's
topics live in a real broker (stategate/broker.py), the test events are produced to it with
Java's partitioner, the pipeline reads them by offset range (topics/kafka.py), and the
oracle reads the same topics back with another client (kafka-python: tests/oracle.py).
The query suites (tests/test_queries.py, tests/test_by_value.py, tests/test_global.py...)
run on such a cluster: the shared `served` one is on the test process's broker
(tests/nodes.py `serve`).

And what a team with a Kafka cluster meets: the pipeline refuses, in one line, topics that
are missing or have another partition count than the project declares, and a build that
needs records the log no longer holds; the published positions are the consumer group's
committed offsets, as Kafka's tools read them."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import orjson
from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kafka import KafkaAdminClient, TopicPartition

from contracts import project as projects
from contracts.partitioner import KeyType, partition_for
from contracts.project import Project
from contracts.records import Record
from spark_pipeline import job
from spark_pipeline.loop import TOPICS_CHECK_S
from spark_pipeline.spark import LazySpark
from stategate.broker import Broker
from stategate.launcher import free_ports
from tests import oracle
from tests.kafka import create_topic, producer, read_all
from tests.nodes import Served, following
from tests.projects import START_MS, produce_test_events, write_project
from tests.test_pipeline import assert_published_state_is_the_oracles
from tests.test_stream import manifest_of
from topics import open_log
from topics.kafka import (
    DEAD_LETTER_SUFFIX,
    ERROR_MESSAGE,
    ERROR_REASON,
    EVENT_TIME,
    SOURCE_OFFSET,
    SOURCE_PARTITION,
    SOURCE_TOPIC,
    KafkaLog,
)


def prefix() -> str:
    """Topics of this module's own on the test process's broker."""
    return f"t{uuid.uuid4().hex[:8]}."


def test_the_pipeline_refuses_topics_unlike_the_projects_in_one_line(
    kafka: Broker, tmp_path: Path
) -> None:
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    create_topic(kafka, f"{topics}bookings", 9)
    create_topic(kafka, f"{topics}trains", 12)  # partitions added since: keys map elsewhere
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(project.path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()[-1:]
    assert line.startswith("stategate: the Kafka topics differ from the project's: "), line
    assert f"'{topics}trains' has 12 partitions, the project declares 9 " in line
    assert f"'{topics}trips' does not exist" in line and "bookings" not in line
    assert "Traceback" not in done.stderr


def test_partitions_added_while_following_stop_the_pipeline_in_one_line(
    kafka: Broker, tmp_path: Path
) -> None:
    """Keys of a topic given more partitions map elsewhere: the pipeline, following, notices
    within TOPICS_CHECK_S and ends with one line saying the state must be rebuilt; what it
    published stays as it was."""
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    produce_test_events(project, seed=8, n_bookings=200, n_trains=100, n_trips=50)
    log = tmp_path / "pipeline.log"
    follow = following(project, log)
    try:
        published = manifest_of(project)
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
        added = admin.create_partitions([NewPartitions(f"{topics}trains", 12)])
        added[f"{topics}trains"].result(30)
        follow.wait(TOPICS_CHECK_S + 30)
    finally:
        follow.kill()
    last = log.read_text().strip().splitlines()[-1]
    assert follow.returncode == 2, log.read_text()[-3000:]
    assert last == (
        f"stategate: the Kafka topics differ from the project's: '{topics}trains' has 12 "
        "partitions, the project declares 9 (partitions were added: rebuild the state)"
    )
    assert "Traceback" not in log.read_text()
    assert manifest_of(project) == published


COMPACTED = {
    **EVENT_TIME,
    "cleanup.policy": "compact",
    "segment.ms": "100",  # the active segment is never cleaned: roll it at once
    "min.cleanable.dirty.ratio": "0.01",
    "min.compaction.lag.ms": "0",
    "delete.retention.ms": "100",  # tombstones go too
}


def test_a_compacted_topic_builds_the_state_of_what_compaction_left(
    spark: LazySpark, kafka: Broker, tmp_path: Path
) -> None:
    """cleanup.policy=compact: the cleaner keeps each key's last record, and offsets have gaps
    where the others were; a build from offset 0 reads what is left (every store as the
    oracle computes it from the same compacted topics), and each position is the log's end."""
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    log = open_log(project)
    assert isinstance(log, KafkaLog)
    log.create(COMPACTED)
    counts = produce_test_events(project, seed=9, n_bookings=900, n_trains=300, n_trips=60)
    time.sleep(0.3)  # past segment.ms: a record now starts each partition's next segment
    for topic in project.topics.values():
        log.append(topic, _one_tombstone_per_partition(topic.key_type))
    log.close()
    deadline = time.monotonic() + 60
    while (left := _records_left(project, "bookings")) >= counts["bookings"]:
        assert time.monotonic() < deadline, f"not compacted: {left} of {counts['bookings']}"
        time.sleep(0.5)
    time.sleep(3)  # every partition's turn (one cleaner thread)
    oracle.forget_kafka()
    job.run(project, spark, notify=False)
    assert_published_state_is_the_oracles(project, manifest_of(project))


def _one_tombstone_per_partition(key_type: KeyType, partitions: int = 9) -> list[Record]:
    """A tombstone of a key never produced, for each partition."""
    keys: dict[int, object] = {}
    for i in itertools.count(10**6):
        key = i if key_type != "string" else f"roll-{i}"
        keys.setdefault(partition_for(key, key_type, partitions), key)
        if len(keys) == partitions:
            return [Record(key, None, START_MS) for key in keys.values()]
    raise AssertionError("unreachable")


def _records_left(project: Project, topic: str) -> int:
    """The records the topic holds now (offsets have gaps: not its end)."""
    oracle.forget_kafka()
    partitions = range(project.cluster.partitions)
    return sum(len(oracle.kafka_records(project, topic, p)) for p in partitions)


BAD = {  # (key, value) -> its reason, as another producer might write them
    (b"b1", b'{"trip": "x", "price": "cheap", "seats": 1}'): "wrong_type",
    (b"b5", b"not json"): "not_json",
    (b"b4", b'{"trip": "y", "unknownField": 1}'): "unknown_field",
}


def test_bad_records_skipped_go_to_the_dead_letter_topic_once_with_why_in_headers(
    spark: LazySpark, kafka: Broker, tmp_path: Path
) -> None:
    """bad_records = "skip" on Kafka: each bad record goes to `<topic>.dead-letter`, its
    partition's, with its key, value and timestamp as read and its source and reason in its
    headers; a build from scratch reads them again and writes none twice."""
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    produce_test_events(project, seed=10, n_bookings=100, n_trains=50, n_trips=20)
    sender = producer(kafka)
    for key, value in BAD:
        sender.produce(f"{topics}bookings", value, key, timestamp=START_MS)
    sender.flush(30)
    del sender
    sources = {
        (m.key(), m.value()): (p, m.offset())
        for p, m in read_all(kafka, f"{topics}bookings", 9)
        if (m.key(), m.value()) in BAD
    }
    assert len(sources) == len(BAD)
    report = job.run(project, spark, notify=False)
    assert report.bad_records == {"bookings": Counter(BAD.values())}
    letters = _dead_letters(kafka, f"{topics}bookings{DEAD_LETTER_SUFFIX}")
    assert sorted(letters) == sorted(BAD)
    for record, (partition, headers, timestamp) in letters.items():
        source_partition, offset = sources[record]
        assert partition == source_partition and timestamp == START_MS
        assert headers[SOURCE_TOPIC] == f"{topics}bookings".encode()
        assert headers[SOURCE_PARTITION] == str(partition).encode()
        assert headers[SOURCE_OFFSET] == str(offset).encode()
        assert headers[ERROR_REASON] == BAD[record].encode()
        assert headers[ERROR_MESSAGE]
    shutil.rmtree(project.snapshot_store)
    report = job.run(project, spark, notify=False)  # every record read again
    assert report.bad_records == {"bookings": Counter(BAD.values())}
    assert len(list(read_all(kafka, f"{topics}bookings{DEAD_LETTER_SUFFIX}", 9))) == len(BAD)


def _dead_letters(kafka: Broker, topic: str) -> dict[tuple[bytes, bytes], tuple]:
    """(key, value) -> (partition, headers, timestamp) of each record of the topic."""
    return {
        (m.key(), m.value()): (p, dict(m.headers() or []), m.timestamp()[1])
        for p, m in read_all(kafka, topic, 9)
    }


def test_the_published_positions_are_the_groups_committed_offsets(served: Served) -> None:
    """What kafka-consumer-groups and lag exporters show: the group's committed offset of
    every partition is the position the manifest published (read by kafka-python)."""
    project = served.project
    assert project.kafka is not None
    admin = KafkaAdminClient(bootstrap_servers=project.kafka.bootstrap)
    try:
        committed = admin.list_group_offsets(project.kafka.group)[project.kafka.group]
    finally:
        admin.close()
    positions = oracle.expected_positions(project)
    for topic in project.topics:
        for partition in range(project.cluster.partitions):
            where = TopicPartition(project.kafka.topic(topic), partition)
            assert committed[where].offset == positions[partition][topic], where


def test_records_gone_from_the_log_are_refused_not_skipped(kafka: Broker, tmp_path: Path) -> None:
    """A build that needs records retention (here, a deletion) removed from a topic refuses
    in one line naming the topic, the partition, the offset needed and the log's start."""
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    produce_test_events(project, seed=4, n_bookings=300, n_trains=40, n_trips=20)
    partition = partition_for("C000001", "string", 9)
    gone = KafkaPartition(f"{topics}bookings", partition, 3)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap})
    admin.delete_records([gone])[gone].result(30)
    command = [sys.executable, "-m", "stategate.cli", "pipeline", "--config", str(project.path)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    line = done.stderr.strip().splitlines()[-1]
    assert line == (
        f"stategate: {topics}bookings partition {partition}: the state needs its records from "
        "offset 0, but the log starts at offset 3 (retention or a deletion removed them): "
        "they cannot be read again"
    ), line
    assert "Traceback" not in done.stderr
    assert not (Path(project.snapshot_store) / "manifest.json").exists(), "nothing published"


def test_a_build_on_sparks_executors_reads_kafka_as_the_oracle_does(
    spark: LazySpark, kafka: Broker, tmp_path: Path
) -> None:
    """A run past driver_batch_records is read and built by Spark's tasks, each reading its
    partitions' offset ranges from Kafka itself: every chain's state and position is the
    oracle's (tests/test_pipeline.py's check, the layers read back the plain way)."""
    settings = "driver_batch_records = 0"  # everything on the executors
    project = projects.load(
        write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, prefix()), settings=settings)
    )
    produce_test_events(project, seed=6)
    report = job.run(project, spark, notify=False)
    assert report.records > 0 and report.versions
    assert_published_state_is_the_oracles(project, manifest_of(project))


def test_an_aborted_transactions_records_reach_no_store(
    spark: LazySpark, kafka: Broker, tmp_path: Path
) -> None:
    """read_committed: a transaction aborted around a committed one leaves offsets the state
    skips (its records, and every transaction's marker), and the published position is the
    log's end, past the last marker: a position is the next offset to read, not a count."""
    topics = prefix()
    project = projects.load(write_project(tmp_path, free_ports(3), kafka=(kafka.bootstrap, topics)))
    produce_test_events(project, seed=7, n_bookings=300, n_trains=300, n_trips=120)
    name = f"{topics}bookings"
    sender = Producer({"bootstrap.servers": kafka.bootstrap, "partitioner": "murmur2_random",
                       "transactional.id": f"{topics}tx"})  # fmt: skip
    sender.init_transactions(30)
    for commit, price in ((False, 1.0), (True, 2.0), (False, 3.0)):
        sender.begin_transaction()
        value = orjson.dumps({"trip": "Köln→Bonn", "price": price, "seats": 1})
        sender.produce(name, value, b"C000001", timestamp=START_MS)
        sender.flush(30)
        if commit:
            sender.commit_transaction(30)
        else:
            sender.abort_transaction(30)
    del sender  # librdkafka's handle: its threads would outlive the broker
    job.run(project, spark, notify=False)
    manifest = manifest_of(project)
    assert_published_state_is_the_oracles(project, manifest)  # positions: the log's ends
    p = partition_for("C000001", "string", 9)
    rows = {r[0]: r for r in oracle.expected_store(project, "latestBooking")[p]}
    assert rows["C000001"][2] == 2.0, "the committed transaction's price, no aborted one's"
    state = oracle.kafka_records(project, "bookings", p)
    assert manifest["log_end"]["bookings"][str(p)] > state[-1]["offset"] + 1, "a gap at the end"
