"""A built workload on Kafka: its file log's records copied into a broker's topics, each
partition in offset order, so that the positions its snapshots were published at name the
same records there; its project file then names the broker instead of the file log.

The copy keeps each record's timestamp (the topics keep CreateTime, as the demo's) and its
key as Kafka's serializer writes it; a record goes to its partition by number, which Java's
partitioner would choose too (contracts/partitioner.py). 5M records take about 20 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from contracts import eventlog
from contracts import project as config
from contracts.partitioner import serialize_key
from contracts.project import Project
from topics import open_log
from topics.kafka import CALL_S, EVENT_TIME, KafkaLog

COPY_SETTINGS = {
    "enable.idempotence": True,  # retries keep the order: offsets match the file log's
    "linger.ms": 20,
    "batch.size": 1 << 20,
    "queue.buffering.max.messages": 1_000_000,
}


def onto_kafka(project: Project, bootstrap: str) -> Project:
    """The project (on the file log) with its topics copied to the broker at `bootstrap`,
    written to name the broker instead; each partition's end must come out the same."""
    path = project.path
    text = re.sub(
        r'\[log\]\ndir = "[^"]*"\n', f'[kafka]\nbootstrap = "{bootstrap}"\n', path.read_text()
    )
    path.write_text(text)
    on_kafka = config.load(path)
    log = open_log(on_kafka)
    assert isinstance(log, KafkaLog)
    try:
        log.create(EVENT_TIME)
        _copy(project, log)
        ends = log.end_offsets()
    finally:
        log.close()
    for topic, by_partition in ends.items():
        for partition, end in by_partition.items():
            expected = eventlog.end_offset(project.log_dir, topic, partition)
            assert end == expected, (
                f"{topic}-{partition}: Kafka ends at {end}, the log at {expected}"
            )
    return on_kafka


def _copy(project: Project, log: KafkaLog) -> None:
    producer = Producer({**log.settings, **COPY_SETTINGS})
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for name, topic in sorted(project.topics.items()):
        kafka_name = log.kafka_names[name]
        for partition in range(project.cluster.partitions):
            for _, segment in eventlog.segments(project.log_dir, name, partition):
                table = eventlog.read_segment(segment)
                rows = zip(
                    table.column("key").to_pylist(),
                    table.column("value").to_pylist(),
                    table.column("timestamp").to_pylist(),
                    strict=True,
                )
                for key, value, timestamp in rows:
                    _produce(producer, kafka_name, partition, serialize_key(key, topic.key_type),
                             value, timestamp, delivered)  # fmt: skip
    if producer.flush(CALL_S * 10) or failed:
        raise RuntimeError(f"the copy to Kafka failed: {failed[:3]}")


def _produce(
    producer: Producer,
    topic: str,
    partition: int,
    key: bytes,
    value: str | None,
    timestamp: int,
    delivered: Callable[[Any, Any], None],
) -> None:
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, timestamp=timestamp,
                             on_delivery=delivered)  # fmt: skip
            return
        except BufferError:  # its queue is full: let it send
            producer.poll(0.05)


def broker_folder(root: Path) -> Path:
    return root / "kafka"
