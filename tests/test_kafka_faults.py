"""Broker faults under the pipeline and the nodes (issue 49): a 3-broker KRaft cluster
(stategate/broker.py `Brokers`: replication factor 3, min.insync.replicas 2), the continuous
pipeline following it, 3 nodes serving, and an idempotent producer writing all along.

- A partition's leader killed with -9: producing pauses for the election only, and nothing
  it acknowledged is lost or doubled.
- A second broker killed: writes stop (fewer in-sync replicas than min.insync.replicas) and
  the nodes serve the last state, whole, at the positions it was published at.
- Both back: the pipeline catches up, and the published state is the oracle's of every
  record the topic holds (each acknowledged append once)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from spark_pipeline.spark import LazySpark
from stategate.broker import Brokers
from tests import oracle
from tests.nodes import following, serve
from tests.test_pipeline import assert_published_state_is_the_oracles
from tests.test_stream import manifest_of

pytestmark = pytest.mark.e2e
TOPICS = "faults."
ELECTION_S = 10.0  # the longest producing may pause for a leader's election (2 busy cores)
WRITE_FAILS_S = 5.0  # a write with one broker left must fail within this (message.timeout)
CAUGHT_UP_S = 60.0
SCAN = "{ customerTotalsRange(first: 1000) { meta { partial position { partition offset } } } }"


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[Brokers]:
    cluster = Brokers(tmp_path / "kafka", 3)
    cluster.start()
    yield cluster
    oracle.close_kafka()
    cluster.stop()


class Writer(threading.Thread):
    """An idempotent producer (acks=all) writing a booking every 20 ms until stopped; the time
    of each acknowledgement, and the errors."""

    def __init__(self, bootstrap: str) -> None:
        super().__init__(daemon=True)
        settings = {"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                    "enable.idempotence": True, "acks": "all", "linger.ms": 0}  # fmt: skip
        self.producer = Producer(settings)
        self.acked: list[float] = []
        self.errors: list[str] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stopping.wait(0.02):
            value = orjson.dumps({"trip": "Köln→Bonn", "price": 10.0 + i % 7, "seats": 1})
            self.producer.produce(f"{TOPICS}bookings", value, f"W{i % 50:03d}".encode(),
                                  on_delivery=self._delivered)  # fmt: skip
            self.producer.poll(0)
            i += 1
        self.producer.flush(60)

    def _delivered(self, error: KafkaError | None, _message: object) -> None:
        if error is None:
            self.acked.append(time.monotonic())
        else:
            self.errors.append(error.str())

    def longest_pause(self) -> float:
        return max((b - a for a, b in zip(self.acked, self.acked[1:], strict=False)), default=0)


def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return int(metadata.topics[topic].partitions[partition].leader)


def test_broker_faults_pause_writes_for_an_election_and_lose_or_double_nothing(
    brokers: Brokers, spark: LazySpark, tmp_path: Path
) -> None:
    (tmp_path / "cluster").mkdir()
    served = serve(tmp_path / "cluster", spark, kafka=(brokers.bootstrap, TOPICS))
    project, nodes = served.project, served.nodes
    log = tmp_path / "pipeline.log"
    follow = following(project, log)
    try:
        writer = Writer(brokers.bootstrap)
        writer.start()
        time.sleep(2)
        leader = leader_of(brokers.bootstrap, f"{TOPICS}bookings", 0)
        brokers.by_id(leader).kill()
        time.sleep(ELECTION_S)
        writer.stopping.set()
        writer.join(90)
        assert not writer.errors, writer.errors[:3]
        assert writer.longest_pause() < ELECTION_S, writer.longest_pause()

        second = next(b for b in brokers.brokers if b.proc is not None)
        second.kill()
        refused = Producer({"bootstrap.servers": brokers.bootstrap, "acks": "all",
                            "message.timeout.ms": int(WRITE_FAILS_S * 1000)})  # fmt: skip
        failed: list[str] = []

        def delivered(error: KafkaError | None, _message: object) -> None:
            failed.append(error.str() if error else "acked")

        refused.produce(f"{TOPICS}bookings", b"{}", b"never", on_delivery=delivered)
        refused.flush(WRITE_FAILS_S * 3)
        assert failed and failed != ["acked"], failed
        published = manifest_of(project)["log_end"]["bookings"]
        for node in nodes.ids:  # the last state, whole, where it was published
            meta = nodes.data(node, SCAN)["customerTotalsRange"]["meta"]
            assert not meta["partial"], (node, meta)
            for at in meta["position"]:
                assert int(at["offset"]) <= published[str(at["partition"])], (node, at)

        for broker in brokers.brokers:
            if broker.proc is None:
                broker.start()
        ends = oracle.expected_positions(project)
        deadline = time.monotonic() + CAUGHT_UP_S
        while (manifest := manifest_of(project))["log_end"]["bookings"] != {
            str(p): ends[p]["bookings"] for p in ends
        }:
            assert follow.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
    finally:
        follow.terminate()
        follow.wait(60)
        nodes.stop_all()
    oracle.forget_kafka()
    assert_published_state_is_the_oracles(project, manifest)
    written = [r for p in ends for r in oracle.kafka_records(project, "bookings", p)
               if str(r["key"]).startswith("W")]  # fmt: skip
    assert len(written) == len(writer.acked), "an acknowledged append lost, or one twice"
