"""A real Kafka broker for the tests (stategate/broker.py), one per test process, started by the
first test that needs it; and the plain clients a test produces and reads with."""

from __future__ import annotations

import atexit
import tempfile
from collections.abc import Iterator
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from stategate.broker import Broker

CLIENT_S = 30.0  # the longest a test waits for the broker to answer


def create_topic(broker: Broker, name: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})  # held: its futures need it
    new = NewTopic(name, num_partitions=partitions, replication_factor=1)
    admin.create_topics([new], operation_timeout=CLIENT_S)[name].result(CLIENT_S)


def producer(broker: Broker) -> Producer:
    """Java's default partitioner (murmur2 over the key's bytes), as every Kafka client's
    default but librdkafka's (consistent_random)."""
    return Producer({"bootstrap.servers": broker.bootstrap, "partitioner": "murmur2_random"})


def read_all(broker: Broker, topic: str, partitions: int) -> Iterator[tuple[int, object]]:
    """(partition, message) of every record of the topic, read with no consumer group."""
    ends = {p: _end(broker, topic, p) for p in range(partitions)}
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tests",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in ends if ends[p]])
        left = sum(ends.values())
        while left:
            for message in consumer.consume(num_messages=left, timeout=CLIENT_S):
                assert message.error() is None, message.error()
                left -= 1
                yield message.partition(), message
    finally:
        consumer.close()


def _end(broker: Broker, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "tests"})
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), CLIENT_S)
        return int(high)
    finally:
        consumer.close()


def started(folder: Path) -> Broker:
    broker = Broker(folder)
    broker.start()
    return broker


_SHARED: list[Broker] = []  # the test process's broker, once a test needed it


def shared() -> Broker:
    """The test process's one broker (the `kafka` fixture's too), started when first asked
    for, in a folder of its own; stopped when the process ends (or by the fixture)."""
    if not _SHARED:
        broker = started(Path(tempfile.mkdtemp(prefix="stategate-kafka-")))
        _SHARED.append(broker)
        atexit.register(broker.stop)
    return _SHARED[0]
