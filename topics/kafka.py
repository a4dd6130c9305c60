"""Apache Kafka as the Log, through confluent-kafka (librdkafka): the declared topics' records
read by offset range with no consumer group (assign and seek: the manifest's positions are the
one record of what is published), end offsets for every partition in one ListOffsets call,
and records appended with Java's partitioner (murmur2 over the serializer's bytes).

Reads are read_committed: a transaction's records reach no store before it commits, and those
of an aborted one never; the end offsets are the last stable ones. A position is the next
offset to read, never a count: offsets have gaps (transaction markers, compacted topics), so
a span is done once the consumer's position reaches its end, whatever it held.

A record's timestamp is its event time and also stands for its append time (freshness,
contracts/freshness.py): on a topic with LogAppendTime it is the broker's append; on one
that keeps its producers' CreateTime (Kafka's default), the producer's, as Kafka Streams'
record-e2e-latency counts it (KIP-613). `timestamp_types` says which each topic keeps.

librdkafka's errors become TopicsError here, once, with one line naming what failed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
import pyarrow as pa
from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from contracts.partitioner import KeyType, serialize_key
from contracts.project import Kafka, Topic
from contracts.records import Record, fit
from topics.batches import RECORDS, Letter, Span, key_text, readable
from topics.log import LogUnavailable, TopicsError

log = logging.getLogger(__name__)
CALL_S = 30.0  # the longest one call to the cluster may take before it is an error
POLL_S = 0.1  # a read waits this long for more records before it checks its spans
BATCH_MESSAGES = 10_000  # records taken from librdkafka per call
# A topic whose records keep their producers' timestamps (Kafka's default): history produced
# with the times it happened (the demo's bookings, the tests' events)
# A bad record skipped (settings.bad_records = "skip") goes to `<topic>.dead-letter`, same
# partition, its key, value and timestamp as read, where it came from and why in its headers.
DEAD_LETTER_SUFFIX = ".dead-letter"
SOURCE_TOPIC, SOURCE_PARTITION, SOURCE_OFFSET = (
    "stategate.source.topic", "stategate.source.partition", "stategate.source.offset",
)  # fmt: skip
ERROR_REASON, ERROR_MESSAGE = "stategate.error.reason", "stategate.error.message"
CREATE_TIME = "CreateTime"
EVENT_TIME = {"message.timestamp.type": CREATE_TIME}


class KafkaLog:
    """The declared topics (declared name -> key type) of `partitions` partitions each, in
    the cluster `kafka` names: all a reader needs, in the driver or in a Spark task."""

    def __init__(self, kafka: Kafka, partitions: int, key_types: dict[str, KeyType]) -> None:
        self.partitions = partitions
        self.kafka_names = {name: kafka.topic(name) for name in sorted(key_types)}
        self.declared = {k: name for name, k in self.kafka_names.items()}
        self.key_types = key_types
        self.settings: dict[str, str | int | float | bool] = {
            "bootstrap.servers": kafka.bootstrap,
            **kafka.client,
        }
        self.group = kafka.group
        self.where = f"Kafka at {kafka.bootstrap}"
        self._noted = False  # whether check() said which topics keep CreateTime
        self._admin = AdminClient(self.settings)
        # consumers lent to one read at a time (librdkafka's may not be shared by threads):
        # each micro-batch's build threads are new, so a thread's own would pile up
        self._idle: list[Consumer] = []
        self._consumers: list[Consumer] = []
        self._lock = threading.Lock()
        self._producer: Producer | None = None

    # -- the topics themselves

    def check(self) -> None:
        """Every declared topic exists with the declared partition count; else TopicsError
        naming the topics that differ (a topic with more partitions maps keys elsewhere:
        the state must be rebuilt for it)."""
        found = self._described()
        wrong = []
        for kafka_name in self.kafka_names.values():
            count = found.get(kafka_name)
            if count is None:
                wrong.append(f"{kafka_name!r} does not exist")
            elif count != self.partitions:
                wrong.append(
                    f"{kafka_name!r} has {count} partitions, the project declares "
                    f"{self.partitions}"
                    + (" (partitions were added: rebuild the state)" if count > self.partitions
                       else "")
                )  # fmt: skip
        if wrong:
            raise TopicsError(f"the Kafka topics differ from the project's: {'; '.join(wrong)}")
        if self._noted:
            return
        self._noted = True
        producers = sorted(k for k, kind in self.timestamp_types().items() if kind == CREATE_TIME)
        if producers:
            log.info(
                "%s keep their producers' timestamps (CreateTime): freshness counts from them "
                "(KIP-613), not from the broker's append (LogAppendTime)",
                ", ".join(repr(k) for k in producers),
            )

    def timestamp_types(self) -> dict[str, str]:
        """Each Kafka topic's message.timestamp.type: CreateTime or LogAppendTime."""
        resources = [ConfigResource("topic", k) for k in self.kafka_names.values()]
        futures = self._admin.describe_configs(resources, request_timeout=CALL_S)
        return {
            resource.name: _result(future, f"the configs of {resource.name!r}")[
                "message.timestamp.type"
            ].value
            for resource, future in futures.items()
        }

    def create(self, config: dict[str, str] | None = None) -> None:
        """Create the declared topics that do not exist yet (the demo's and the tests'; a
        team's own topics exist already)."""
        existing = self._described()
        new = [
            NewTopic(k, num_partitions=self.partitions, replication_factor=-1, config=config or {})
            for k in self.kafka_names.values()
            if k not in existing
        ]
        if new:
            for topic, future in self._admin.create_topics(new, operation_timeout=CALL_S).items():
                _result(future, f"cannot create {topic!r}")

    def _described(self) -> dict[str, int]:
        """Kafka topic -> its partition count, for the declared topics that exist."""
        try:
            metadata = self._admin.list_topics(timeout=CALL_S)
        except KafkaException as exc:
            raise LogUnavailable(
                f"Kafka at {self.settings['bootstrap.servers']}: {_said(exc)}"
            ) from exc
        return {
            name: len(metadata.topics[name].partitions)
            for name in self.declared
            if name in metadata.topics and metadata.topics[name].error is None
        }

    # -- reading

    def end_offsets(self) -> dict[str, dict[int, int]]:
        asked = {
            TopicPartition(kafka_name, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
            for kafka_name in self.declared
            for p in range(self.partitions)
        }
        return self._offsets(asked)

    def end_offset(self, topic: str, partition: int) -> int:
        asked = {TopicPartition(self.kafka_names[topic], partition): OffsetSpec.latest()}  # type: ignore[no-untyped-call]
        return self._offsets(asked)[topic][partition]

    def _offsets(self, asked: dict[TopicPartition, Any]) -> dict[str, dict[int, int]]:
        """The offset each asked partition's spec names (latest: the last stable one; earliest:
        the log's start), declared topic -> partition -> offset, in one ListOffsets call."""
        futures = self._admin.list_offsets(
            asked, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=CALL_S
        )
        ends: dict[str, dict[int, int]] = {name: {} for name in self.kafka_names}
        for tp, future in futures.items():
            what = f"the offsets of {tp.topic} partition {tp.partition}"
            try:
                found = _result(future, what)
            except TopicsError as exc:
                raise LogUnavailable(str(exc)) from exc
            if found.offset < 0:  # OFFSET_INVALID: no broker leads it now
                raise LogUnavailable(f"{what}: no leader now (its brokers down?)")
            ends[self.declared[tp.topic]][tp.partition] = int(found.offset)
        return ends

    def read(self, spans: Sequence[Span]) -> Iterator[pa.RecordBatch]:
        wanted = [s for s in spans if s.end > s.start]
        if not wanted:
            return
        ends = {(self.kafka_names[s.topic], s.partition): s.end for s in wanted}
        held: dict[tuple[str, int], list[Any]] = {key: [] for key in ends}
        with self._lent() as consumer:
            consumer.assign([TopicPartition(t, p, s.start) for s in wanted
                             for t, p in [(self.kafka_names[s.topic], s.partition)]])  # fmt: skip
            try:
                self._take(consumer, ends, held)
            finally:
                consumer.unassign()
        self._check_start(wanted, held)
        for s in wanted:
            messages = held[(self.kafka_names[s.topic], s.partition)]
            if messages:
                yield self._batch(s, messages)

    def _take(
        self,
        consumer: Consumer,
        ends: dict[tuple[str, int], int],
        held: dict[tuple[str, int], list[Any]],
    ) -> None:
        """Consume until every span's position reaches its end; TopicsError on a fatal error,
        or after CALL_S without progress."""
        open_ = dict(ends)
        quiet_since = time.monotonic()
        said = ""  # librdkafka's last error, if any
        while open_:
            messages = consumer.consume(num_messages=BATCH_MESSAGES, timeout=POLL_S)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.fatal():
                        raise TopicsError(f"reading {message.topic()}: {error.str()}")
                    # a partition's end, or what librdkafka retries itself (a leader moving):
                    # reading goes on, bounded by CALL_S without progress
                    if error.code() != KafkaError._PARTITION_EOF:
                        said = error.str()
                    continue
                key = (message.topic(), message.partition())
                offset = message.offset()
                if key in open_ and offset is not None and offset < open_[key]:
                    held[key].append(message)
            if messages:
                quiet_since = time.monotonic()
            positions = consumer.position([TopicPartition(t, p) for t, p in open_])
            for tp in positions:
                if tp.offset >= open_[(tp.topic, tp.partition)]:
                    del open_[(tp.topic, tp.partition)]
            if open_ and time.monotonic() - quiet_since > CALL_S:
                missing = ", ".join(f"{t} partition {p} to {e}" for (t, p), e in open_.items())
                raise LogUnavailable(
                    f"Kafka sent nothing for {CALL_S:g} s while reading {missing}"
                    + (f" (it said: {said})" if said else "")
                )

    def _check_start(self, spans: list[Span], held: dict[tuple[str, int], list[Any]]) -> None:
        """A span that began past its start (offsets have gaps: compaction, transaction
        markers) is refused when its first records are gone from the log (retention, a
        deletion): a silent skip would build state without them."""
        suspect = {
            TopicPartition(self.kafka_names[s.topic], s.partition): s
            for s in spans
            if not (found := held[(self.kafka_names[s.topic], s.partition)])
            or found[0].offset() > s.start
        }
        if not suspect:
            return
        asked = {tp: OffsetSpec.earliest() for tp in suspect}  # type: ignore[no-untyped-call]
        starts = self._offsets(asked)
        for tp, span in suspect.items():
            first = starts[span.topic][span.partition]
            if first > span.start:
                raise TopicsError(
                    f"{tp.topic} partition {tp.partition}: the state needs its records from "
                    f"offset {span.start}, but the log starts at offset {first} (retention or "
                    "a deletion removed them): they cannot be read again"
                )

    def _batch(self, span: Span, messages: list[Any]) -> pa.RecordBatch:
        key_type = self.key_types[span.topic]
        stamps = [m.timestamp() for m in messages]  # (type, ms)
        values = [m.value() for m in messages]
        return pa.RecordBatch.from_arrays(
            [
                pa.array([span.topic] * len(messages), pa.string()),
                pa.array([span.partition] * len(messages), pa.int32()),
                pa.array([m.offset() for m in messages], pa.int64()),
                pa.array([ms for _, ms in stamps], pa.int64()),
                pa.array([key_text(m.key(), key_type) for m in messages], pa.string()),
                readable(pa.array(
                    [None if v is None else v.decode("utf-8", "replace") for v in values],
                    pa.string(),
                )),
                pa.array([ms for _, ms in stamps], pa.int64()),  # append_ms: module docstring
            ],
            schema=RECORDS,
        )  # fmt: skip

    @contextmanager
    def _lent(self) -> Iterator[Consumer]:
        """An idle consumer, or a new one, for the caller alone until it is done."""
        with self._lock:
            consumer = self._idle.pop() if self._idle else None
        if consumer is None:
            consumer = Consumer(
                {
                    **self.settings,
                    "group.id": self.group,  # required; no offset is read from the group
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "isolation.level": "read_committed",
                    # a start gone from the log: read from its start (then refused: _check_start)
                    "auto.offset.reset": "earliest",
                    "fetch.wait.max.ms": 10,
                }
            )
            with self._lock:
                self._consumers.append(consumer)
        try:
            yield consumer
        finally:
            with self._lock:
                self._idle.append(consumer)

    def published(self, positions: dict[str, dict[int, int]]) -> None:
        offsets = [
            TopicPartition(self.kafka_names[topic], p, offset)
            for topic, by_partition in sorted(positions.items())
            for p, offset in sorted(by_partition.items())
            if offset > 0
        ]
        if not offsets:
            return
        try:
            with self._lent() as consumer:
                consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            raise TopicsError(f"cannot commit to group {self.group!r}: {_said(exc)}") from exc

    # -- appending

    def append(self, declared: Topic, records: Iterable[Record]) -> dict[int, int]:
        """Produce records that fit the topic (BadRecord otherwise, before any is sent) with
        Java's partitioner; returns the count per partition once every one is acknowledged."""
        fitted = [fit(declared, r) for r in records]
        producer = self._writer()
        counts: dict[int, int] = {}
        failed: list[str] = []

        def delivered(error: KafkaError | None, message: Any) -> None:
            if error is not None:
                failed.append(error.str())
            else:
                counts[message.partition()] = counts.get(message.partition(), 0) + 1

        name = self.kafka_names[declared.name]
        for record in fitted:
            key = serialize_key(record.key, declared.key_type)
            value = None if record.value is None else orjson.dumps(record.value)
            while True:
                try:
                    producer.produce(name, value, key, timestamp=record.timestamp_ms,
                                     on_delivery=delivered)  # fmt: skip
                    break
                except BufferError:  # librdkafka's queue is full: let it send
                    producer.poll(POLL_S)
        if producer.flush(CALL_S) or failed:
            raise TopicsError(f"Kafka did not take every record of {name!r}: {failed[:3]}")
        return dict(sorted(counts.items()))

    # -- dead letters

    def dead_letters(self, declared: str, partition: int, letters: Sequence[Letter]) -> int:
        """Produce to the topic's dead-letter topic (DEAD_LETTER_SUFFIX, created when missing,
        partition for partition) the letters whose offsets are past the last one it holds: a
        batch read again after a crash writes none twice. Returns how many it produced."""
        name = self.kafka_names[declared] + DEAD_LETTER_SUFFIX
        self._create_dead_letter_topic(name)
        last = self._last_source_offset(name, partition)
        fresh = [letter for letter in letters if letter.offset > last]
        if not fresh:
            return 0
        producer = self._writer()
        failed: list[str] = []

        def delivered(error: KafkaError | None, _message: Any) -> None:
            if error is not None:
                failed.append(error.str())

        for letter in fresh:
            headers: list[tuple[str, str | bytes | None]] = [
                (SOURCE_TOPIC, self.kafka_names[declared].encode()),
                (SOURCE_PARTITION, str(partition).encode()),
                (SOURCE_OFFSET, str(letter.offset).encode()),
                (ERROR_REASON, letter.reason.encode()),
                (ERROR_MESSAGE, letter.message.encode()),
            ]
            value = None if letter.value is None else letter.value.encode()
            key = None if letter.key is None else letter.key.encode()
            producer.produce(name, value, key, partition=partition, timestamp=letter.timestamp or 0,
                             headers=headers, on_delivery=delivered)  # fmt: skip
        if producer.flush(CALL_S) or failed:
            raise TopicsError(f"Kafka did not take every dead letter of {name!r}: {failed[:3]}")
        return len(fresh)

    def _create_dead_letter_topic(self, name: str) -> None:
        metadata = self._admin.list_topics(timeout=CALL_S)
        if name in metadata.topics and metadata.topics[name].error is None:
            return
        # a letter keeps the bad record's timestamp, whatever the broker's default
        new = NewTopic(name, num_partitions=self.partitions, replication_factor=-1,
                       config=EVENT_TIME)  # fmt: skip
        future = self._admin.create_topics([new], operation_timeout=CALL_S)[name]
        try:
            future.result(CALL_S)
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return  # another task created it meanwhile
            what = f"cannot create the dead-letter topic {name!r}: {_said(exc)}"
            raise TopicsError(what) from exc

    def _last_source_offset(self, name: str, partition: int) -> int:
        """The source offset of the dead-letter partition's last letter; -1 for none."""
        with self._lent() as consumer:
            low, high = _watermarks(consumer, TopicPartition(name, partition))
            if high <= low:
                return -1
            consumer.assign([TopicPartition(name, partition, high - 1)])
            try:
                deadline = time.monotonic() + CALL_S
                while time.monotonic() < deadline:
                    for message in consumer.consume(num_messages=1, timeout=POLL_S):
                        if message.error() is None:
                            found = dict(message.headers() or [])
                            return int(found[SOURCE_OFFSET] or b"-1")
            finally:
                consumer.unassign()
        raise TopicsError(f"cannot read the last dead letter of {name!r} partition {partition}")

    def _writer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(
                {**self.settings, "partitioner": "murmur2_random", "linger.ms": 5}
            )
        return self._producer

    def close(self) -> None:
        with self._lock:
            consumers, self._consumers, self._idle = self._consumers, [], []
        for consumer in consumers:
            consumer.close()
        if self._producer is not None:
            self._producer.flush(CALL_S)
            self._producer = None


# What a partition answers while its topic is being created (its leader not elected yet)
_NO_LEADER_YET = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
})  # fmt: skip


def _watermarks(consumer: Consumer, where: TopicPartition) -> tuple[int, int]:
    """The partition's low and high offsets; retried while its leader is not known yet (a
    topic just created), up to CALL_S."""
    deadline = time.monotonic() + CALL_S
    while True:
        try:
            found = consumer.get_watermark_offsets(where, CALL_S)
            if found is None:
                raise TopicsError(f"Kafka did not answer for the offsets of {where.topic}")
            return int(found[0]), int(found[1])
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            retriable = isinstance(error, KafkaError) and (
                error.retriable() or error.code() in _NO_LEADER_YET
            )
            if not retriable or time.monotonic() > deadline:
                raise TopicsError(f"the offsets of {where.topic} partition "
                                  f"{where.partition}: {_said(exc)}") from exc  # fmt: skip
            time.sleep(POLL_S)


def _result(future: Any, what: str) -> Any:
    """An admin call's result; TopicsError when Kafka refused it or did not answer within
    CALL_S (brokers down or busy: the caller decides whether that is the log unavailable)."""
    try:
        return future.result(CALL_S)
    except KafkaException as exc:
        raise TopicsError(f"{what}: {_said(exc)}") from exc
    except TimeoutError as exc:  # concurrent.futures': the call is still pending
        raise TopicsError(f"{what}: no answer within {CALL_S:g} s") from exc


def _said(exc: KafkaException) -> str:
    error = exc.args[0] if exc.args else None
    return error.str() if isinstance(error, KafkaError) else str(exc)
