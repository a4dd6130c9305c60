"""The Kafka every end-to-end test will read (stategate/broker.py), against what stategate assumes
of it: a key lands where contracts/partitioner.py says, produced by confluent-kafka (with
Java's partitioner) and by kafka-python alike; records carry the broker's append time; and a
broker killed with -9 comes back with every record."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME
from kafka import KafkaProducer

from contracts.partitioner import partition_for, serialize_key
from stategate.broker import Broker
from tests.kafka import create_topic, producer, read_all, started
from tests.projects import SPECIAL_CUSTOMERS, SPECIAL_TRAINS

PARTITIONS = 9
KEYS = {
    "string": [*SPECIAL_CUSTOMERS, *(f"C{i:06d}" for i in range(300)), "x" * 1000],
    "int": [*SPECIAL_TRAINS, *range(-50, 250)],
    "long": [2**63 - 1, -(2**63), 2**53 + 1, *range(-50, 250)],
}


@pytest.mark.parametrize("key_type", sorted(KEYS))
def test_every_client_puts_a_key_where_the_partitioner_says(kafka: Broker, key_type: str) -> None:
    topic = f"keys-{key_type}"
    create_topic(kafka, topic, PARTITIONS)
    keys = KEYS[key_type]
    confluent = producer(kafka)
    for key in keys:
        confluent.produce(topic, value=b"confluent", key=serialize_key(key, key_type))  # type: ignore[arg-type]
    assert confluent.flush(30) == 0
    java_like = KafkaProducer(bootstrap_servers=kafka.bootstrap, acks=1)
    for key in keys:
        java_like.send(topic, value=b"kafka-python", key=serialize_key(key, key_type))  # type: ignore[arg-type]
    java_like.flush(30)
    java_like.close()
    placed: dict[bytes, set[int]] = {}
    for partition, message in read_all(kafka, topic, PARTITIONS):
        placed.setdefault(message.key(), set()).add(partition)  # type: ignore[attr-defined]
    for key in keys:
        expected = partition_for(key, key_type, PARTITIONS)  # type: ignore[arg-type]
        assert placed[serialize_key(key, key_type)] == {expected}, (key, key_type)  # type: ignore[arg-type]


def test_records_carry_the_brokers_append_time(kafka: Broker) -> None:
    create_topic(kafka, "appended", 1)
    before = int(time.time() * 1000)
    send = producer(kafka)
    send.produce("appended", value=b"{}", key=b"k", timestamp=1_000)  # a producer's own time
    assert send.flush(30) == 0
    ((_, message),) = list(read_all(kafka, "appended", 1))
    kind, millis = message.timestamp()  # type: ignore[attr-defined]
    assert kind == TIMESTAMP_LOG_APPEND_TIME and before <= millis <= time.time() * 1000 + 1


def test_a_broker_killed_comes_back_with_every_record(tmp_path: Path) -> None:
    broker = started(tmp_path / "kafka")
    try:
        create_topic(broker, "kept", 3)
        send = producer(broker)
        for i in range(300):
            send.produce("kept", value=struct.pack(">i", i), key=str(i).encode())
        assert send.flush(30) == 0
        broker.kill()
        broker.start()
        values = sorted(struct.unpack(">i", m.value())[0] for _, m in read_all(broker, "kept", 3))  # type: ignore[attr-defined]
        assert values == list(range(300))
    finally:
        broker.stop()
