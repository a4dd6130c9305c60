"""The expected state of every store, computed straight from the raw log in plain Python: the
independent oracle the pipeline's snapshots are checked against.

It reads values as the README's "Values the log may hold" says: a double that is not finite
is a missing value (null, skipped by aggregates, and a sum past the double range is null),
and a lone surrogate in a string reads as U+FFFD."""

from __future__ import annotations

import json
import math
import struct
import threading
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
from kafka import KafkaConsumer, TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from contracts import chains, eventlog
from contracts.project import Aggregate, FieldType, Project, Store, history_of
from contracts.snapshot_file import key_columns

Row = tuple  # (key, [window_start,] *Store.columns)


@dataclass(frozen=True)
class Version:
    """A version of a versioned store's key: its row from valid_from until valid_to."""

    valid_from: int
    valid_to: int | None  # None: still valid
    row: Row | None  # None: a tombstone


@dataclass(frozen=True)
class History:
    """A versioned store's partition: each key's versions by valid_from, and its stream time
    (the newest timestamp of a record it kept; None before any)."""

    versions: dict[object, list[Version]]
    stream_ms: int | None
    history_ms: int
    dropped: int = 0  # records that came too late

    @property
    def horizon_ms(self) -> int | None:
        """The earliest time a query may ask for."""
        return None if self.stream_ms is None else self.stream_ms - self.history_ms

    def as_of(self, key: object, at_ms: int) -> Version | None:
        """The version valid at `at_ms` (None: no value then)."""
        found = [v for v in self.versions.get(key, ()) if v.valid_from <= at_ms]
        if not found or found[-1].row is None:
            return None
        return found[-1]

    def between(self, key: object, from_ms: int, to_ms: int) -> list[Version]:
        """The versions valid at some time in [from_ms, to_ms], by valid_from."""
        return [
            v
            for v in self.versions.get(key, ())
            if v.row is not None
            and v.valid_from <= to_ms
            and (v.valid_to is None or v.valid_to > from_ms)
        ]


def expected_store(
    project: Project, store_name: str, bad: Collection[tuple[str, int, int]] = ()
) -> dict[int, list[Row]]:
    """partition -> the store's rows, sorted by key (, window_start), leaving out the `bad`
    records (topic, partition, offset)."""
    store = layer_store(project, store_name)
    topic = store.topic.name
    rows = {}
    for partition in range(project.cluster.partitions):
        rows[partition] = _rows(store, _records(project, topic, partition, bad))
    return rows


def layer_store(project: Project, name: str) -> Store:
    """A store a chain's layers hold by name: a declared one, or a versioned one's history."""
    for store in project.stores.values():
        if store.name == name:
            return store
        if store.versioned and history_of(store).name == name:
            return history_of(store)
    raise KeyError(name)


def layer_names(project: Project) -> list[str]:
    """Every store the layers hold: the declared ones, and each versioned one's history."""
    held = [history_of(s).name for s in project.stores.values() if s.versioned]
    return [*project.stores, *held]


def retained(store: Store, rows: list[Row]) -> list[Row]:
    """A history's rows (key, valid_from, valid_to, tombstone, ...) that a query at its
    horizon or after may read: what a base keeps of them (older rows may linger in deltas)."""
    if not rows:
        return rows
    horizon = max(row[1] for row in rows) - store.history_ms
    return [
        row
        for row in rows
        if not ((row[2] is not None and row[2] <= horizon) or (row[3] and row[1] <= horizon))
    ]


def _history_rows(store: Store, records: list[dict]) -> list[Row]:
    """A history table's rows, as retained."""
    empty = (None,) * len(store.columns)
    found = history(store, records).versions.items()
    rows = [
        (key, v.valid_from, v.valid_to, v.row is None, *(empty if v.row is None else v.row[1:]))
        for key, versions in found
        for v in versions
    ]
    return sorted(retained(store, rows), key=lambda row: row[:2])


def expected_history(
    project: Project, store_name: str, bad: Collection[tuple[str, int, int]] = ()
) -> dict[int, History]:
    """partition -> a versioned store's history, leaving out the `bad` records."""
    store = project.store(store_name)
    return {
        p: history(store, _records(project, store.topic.name, p, bad))
        for p in range(project.cluster.partitions)
    }


def history(store: Store, records: list[dict]) -> History:
    """KIP-889's versions of a partition's records, taken in offset order: a record older
    than the stream time minus the history is dropped; one at a version's time replaces it."""
    stream: int | None = None
    values: dict[object, dict[int, dict | None]] = defaultdict(dict)
    dropped = 0
    for record in sorted(records, key=lambda r: r["offset"]):
        at = record["timestamp"]
        if stream is not None and at < stream - store.history_ms:
            dropped += 1
            continue
        values[record["key"]][at] = record["value"]
        stream = at if stream is None else max(stream, at)
    versions = {}
    for key, by_time in values.items():
        times = sorted(by_time)
        versions[key] = [
            Version(
                at,
                times[i + 1] if i + 1 < len(times) else None,
                None if by_time[at] is None else _values(store, key, by_time[at]),
            )
            for i, at in enumerate(times)
        ]
    return History(versions, stream, store.history_ms, dropped)


def records(project: Project, topic: str) -> list[dict]:
    """Every record of a topic, of every partition, values decoded."""
    return [r for p in range(project.cluster.partitions) for r in _records(project, topic, p, ())]


def partition_records(project: Project, topic: str, partition: int) -> list[dict]:
    """One partition's records, values decoded, from whichever log the project names."""
    return _records(project, topic, partition, ())


def _records(
    project: Project, topic: str, partition: int, bad: Collection[tuple[str, int, int]]
) -> list[dict]:
    """The partition's records, values decoded, but for the `bad` ones (not all are JSON)."""
    everything = (
        kafka_records(project, topic, partition)
        if project.kafka is not None
        else [row for _, path in eventlog.segments(project.log_dir, topic, partition)
              for row in _segment(path)]
    )  # fmt: skip
    return [row for row in everything if (topic, partition, row["offset"]) not in bad]


_KAFKA: dict[tuple[str, str, int], tuple[int, list[dict]]] = {}  # its end, its records
_CONSUMERS: dict[str, KafkaConsumer] = {}  # one per cluster: a new one costs a connection
_READING = threading.Lock()


def kafka_records(
    project: Project, topic: str, partition: int, below: int | None = None
) -> list[dict]:
    """A Kafka topic partition's records as the file log's rows (offset, timestamp, the key
    as declared, the value decoded, append_ms), read by kafka-python: a client of its own,
    independent of the pipeline's (confluent-kafka). Kept, and read on from where they end
    when the partition's end has moved; with `below`, those kept serve while they hold every
    record before that offset (a live log's oracle asks again and again, while producers
    append)."""
    assert project.kafka is not None
    name = project.kafka.topic(topic)
    where = TopicPartition(name, partition)
    kept = (project.kafka.bootstrap, name, partition)
    with _READING:
        read_to, rows = _KAFKA.get(kept, (0, []))
        if below is not None and below <= read_to:
            return rows
        consumer = _CONSUMERS.get(project.kafka.bootstrap)
        if consumer is None:
            consumer = _CONSUMERS[project.kafka.bootstrap] = KafkaConsumer(
                bootstrap_servers=project.kafka.bootstrap,
                enable_auto_commit=False,
                isolation_level="read_committed",
                value_deserializer=None,
                **_kafka_python_tls(project.kafka.client),
            )
        end = consumer.end_offsets([where])[where]
        if end == read_to and kept in _KAFKA:
            return rows
        consumer.assign([where])
        if read_to:
            consumer.seek(where, read_to)
        else:
            consumer.seek_to_beginning(where)
        rows = list(rows)  # a new list: callers hold the one they were given
        while consumer.position(where) < end:
            for message in consumer.poll(timeout_ms=1000).get(where, []):
                if message.offset < end:
                    rows.append(_kafka_row(project.topics[topic].key_type, message))
        _KAFKA[kept] = (end, rows)
    return rows


# librdkafka's TLS properties (the project's [kafka] client table) as kafka-python names them
_KAFKA_PYTHON_TLS = {
    "security.protocol": "security_protocol",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
}


def _kafka_python_tls(client: dict[str, str]) -> dict[str, str]:
    return {_KAFKA_PYTHON_TLS[k]: v for k, v in client.items() if k in _KAFKA_PYTHON_TLS}


def close_kafka() -> None:
    """Close the oracle's Kafka consumers (before their brokers stop: they would try to
    reconnect, and log it, until the process ends)."""
    with _READING:
        for consumer in _CONSUMERS.values():
            consumer.close()
        _CONSUMERS.clear()
        _KAFKA.clear()


def forget_kafka() -> None:
    """Read every Kafka partition again next time: compaction changed what they hold while
    their ends stayed."""
    with _READING:
        _KAFKA.clear()


def _kafka_row(key_type: str, message: ConsumerRecord) -> dict:
    key = message.key
    if key is not None and key_type != "string":
        key = struct.unpack(">i" if key_type == "int" else ">q", key)[0]
    elif key is not None:
        key = key.decode()
    value = message.value
    # the broker's append time (LogAppendTime), or its producer's (CreateTime: KIP-613)
    return {
        "offset": message.offset,
        "timestamp": message.timestamp,
        "key": key,
        "value": None if value is None else _decoded(value.decode()),
        eventlog.APPEND_MS: message.timestamp,
    }


def _segment(path: Path) -> list[dict]:
    """A segment's records, values decoded (a bad record's value, not JSON, as its text)."""
    rows = pq.ParquetFile(path).read().to_pylist()  # read_table: 3x the CPU of a small file
    for row in rows:
        row["value"] = None if row["value"] is None else _decoded(row["value"])
    return rows


class Log:
    """The oracle at any position of a live log: a store's rows in one partition after the
    records before a given offset, for answers stamped with that position. Segments are
    read once each (a published segment never changes)."""

    def __init__(self, project: Project) -> None:
        self.project = project
        self._segments: dict[Path, list[dict]] = {}
        self._rows: dict[tuple[str, int, int], dict[tuple, Row]] = {}

    def rows(self, store_name: str, partition: int, offset: int) -> dict[tuple, Row]:
        """(key,) or (key, window_start) -> the row, of the records before `offset`."""
        cached = self._rows.get((store_name, partition, offset))
        if cached is None:
            store = layer_store(self.project, store_name)
            everything = self._records(store.topic.name, partition, offset)
            records = [r for r in everything if r["offset"] < offset]
            assert len(records) == offset, f"the log holds {len(records)} of {offset} records"
            width = len(key_columns(store))
            cached = {row[:width]: row for row in _rows(store, records)}
            self._rows[(store_name, partition, offset)] = cached
        return cached

    def _records(self, topic: str, partition: int, offset: int) -> list[dict]:
        """The partition's records, at least those before `offset`."""
        if self.project.kafka is not None:
            return kafka_records(self.project, topic, partition, offset)
        found = []
        for _, path in eventlog.segments(self.project.log_dir, topic, partition):
            if path not in self._segments:
                self._segments[path] = _segment(path)
            found += self._segments[path]
        return found


def expected_positions(project: Project) -> dict[int, dict[str, int]]:
    """partition -> topic -> the offset after the last record in the log."""
    return {
        p: {topic: _end(project, topic, p) for topic in project.topics}
        for p in range(project.cluster.partitions)
    }


def expected_chain_positions(project: Project) -> dict[int, dict[str, int]]:
    """chain -> its topics (contracts/chains.py) -> the offset after the last record."""
    ends = expected_positions(project)
    return {
        chain: {t: ends[chains.partition(project, chain)][t] for t in chains.topics(project, chain)}
        for chain in range(chains.count(project))
    }


def _end(project: Project, topic: str, partition: int) -> int:
    """The position after the partition's last record: with Kafka, its end (offsets have
    gaps there: a transaction's markers, the aborted ones' records)."""
    if project.kafka is not None:
        kafka_records(project, topic, partition)
        return _KAFKA[(project.kafka.bootstrap, project.kafka.topic(topic), partition)][0]
    offsets = [r["offset"] for r in _records(project, topic, partition, ())]
    return max(offsets) + 1 if offsets else 0


def _decoded(text: str) -> object:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # a bad record's: only its offset is read
        return text


def _rows(store: Store, records: list[dict]) -> list[Row]:
    if store.kind == "versions":
        return _history_rows(store, records)
    if store.kind == "table":
        return _table(store, records)
    if store.kind == "aggregate":
        return _aggregates(store, records, lambda r: [(r["key"],)])
    return _aggregates(store, records, lambda r: [(r["key"], s) for s in _windows(store, r)])


def _table(store: Store, records: list[dict]) -> list[Row]:
    if store.versioned:  # the newest version by timestamp
        found = history(store, records).versions.items()
        return sorted((v[-1].row for _, v in found if v[-1].row is not None), key=lambda r: r[0])
    latest: dict = {}
    for record in sorted(records, key=lambda r: r["offset"]):
        latest[record["key"]] = record["value"]
    rows = [_values(store, key, value) for key, value in latest.items() if value is not None]
    return sorted(rows, key=lambda row: row[0])


def _values(store: Store, key: object, value: dict) -> Row:
    return (key, *(_field(value, f, t) for f, t in store.columns.items()))


def _aggregates(
    store: Store, records: list[dict], groups_of: Callable[[dict], list[tuple]]
) -> list[Row]:
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for record in records:
        if record["value"] is not None:
            for group in groups_of(record):
                groups[group].append(record["value"])
    rows = [
        (*group, *(_aggregate(a, store, values) for a in store.aggregates))
        for group, values in groups.items()
    ]
    return sorted(rows, key=lambda row: row[: len(key_columns(store))])


def _windows(store: Store, record: dict) -> list[int]:
    """Starts s of the windows [s, s + size) holding the record, s a multiple of advance."""
    size, advance = store.window_size_ms, store.window_advance_ms
    last = record["timestamp"] - record["timestamp"] % advance
    return list(range(last - size + advance, last + 1, advance))


def _aggregate(aggregate: Aggregate, store: Store, values: list[dict]) -> object:
    if aggregate.func == "count":
        return len(values)
    assert aggregate.source is not None
    kind = store.topic.value[aggregate.source]
    fields = (_field(v, aggregate.source, kind) for v in values)
    present = [f for f in fields if f is not None]
    if not present:
        return None
    if aggregate.func == "avg":
        return _typed(sum(present) / len(present), "double")
    combine = {"sum": sum, "min": min, "max": max}[aggregate.func]
    return _typed(combine(present), aggregate.result_type(store.topic))


def _field(value: dict, name: str, kind: FieldType) -> object:
    return _typed(value.get(name), kind)


def _typed(value: object, kind: FieldType) -> object:
    if value is None:
        return None
    if kind == "double":
        number = float(value)  # type: ignore[arg-type]
        return number if math.isfinite(number) else None
    if kind == "string":  # each lone surrogate as U+FFFD, as a lossy UTF-16 decoder reads it
        return str(value).encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    return value
