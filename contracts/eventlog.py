"""A Kafka-faithful partitioned log on local disk.

<log>/<topic>-<partition>/<base offset, 20 digits>.parquet
<log>/<topic>.partitions   the partition count its producers route by (written by the first
                           `produce`: a topic's partitions, as Kafka's topic holds its own)

Each segment is an immutable Parquet file of records (offset, timestamp, key, value,
append_ms); offsets are dense and increasing per partition, and a segment is named by its
first offset, as Kafka names its segment files. `append_ms` is when the log appended the
record (Kafka's LogAppendTime, one per append); a segment written by another producer may
leave it out, and its records' append time is then unknown (null). An append writes a hidden
temporary file, fsyncs it and renames it into place under a per-partition lock, so a reader
lists either the whole segment or nothing. Values are JSON text (Kafka's JSON serde); a null
value is a tombstone.

What a producer appends must fit the topic's declaration and be representable everywhere
downstream (contracts/records.py): append and produce refuse anything else with BadRecord,
before anything is written.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from contracts.clock import now_ms as now_ms
from contracts.durable import fsync_dir, locked, replace_whole
from contracts.partitioner import partition_for
from contracts.project import Topic
from contracts.records import MAX_TIMESTAMP_MS as MAX_TIMESTAMP_MS
from contracts.records import BadRecord as BadRecord
from contracts.records import Record as Record
from contracts.records import check as check
from contracts.records import fit

_KEY_ARROW = {"string": pa.string(), "int": pa.int32(), "long": pa.int64()}
APPEND_MS = "append_ms"
_SUFFIX = ".parquet"
_PARTITIONS = ".partitions"


def record_schema(topic: Topic) -> pa.Schema:
    """The columns every segment holds."""
    return pa.schema(
        [
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("key", _KEY_ARROW[topic.key_type]),
            ("value", pa.string()),
        ]
    )


def segment_schema(topic: Topic) -> pa.Schema:
    """The columns of a segment this log appends: the records' and their append time."""
    return record_schema(topic).append(pa.field(APPEND_MS, pa.int64()))


def append_times(table: pa.Table) -> pa.Array:
    """A segment's append times: null where the segment holds none (another producer's)."""
    if APPEND_MS in table.column_names:
        return table.column(APPEND_MS).combine_chunks()
    return pa.nulls(table.num_rows, pa.int64())


def partition_dir(log_dir: Path, topic: str, partition: int) -> Path:
    return log_dir / f"{topic}-{partition}"


def segments(log_dir: Path, topic: str, partition: int) -> list[tuple[int, Path]]:
    """The partition's published segments as (base offset, path), oldest first."""
    folder = partition_dir(log_dir, topic, partition)
    return [(int(name[: -len(_SUFFIX)]), folder / name) for name in _segment_names(folder)]


def end_offset(log_dir: Path, topic: str, partition: int) -> int:
    """The offset the next appended record will get (Kafka's log end offset)."""
    folder = partition_dir(log_dir, topic, partition)
    names = _segment_names(folder)
    if not names:
        return 0
    rows: int = pq.read_metadata(folder / names[-1]).num_rows
    return int(names[-1][: -len(_SUFFIX)]) + rows


def _segment_names(folder: Path) -> list[str]:
    """The published segments' file names, oldest first: their zero-padded base offsets sort
    as text. Plain strings, not paths: a partition's folder holds a file per append, and
    every append and micro-batch lists it."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.endswith(_SUFFIX) and not n.startswith("."))


def segments_from(log_dir: Path, topic: str, partition: int, offset: int) -> list[Path]:
    """Segments holding any record at or after `offset`."""
    segs = segments(log_dir, topic, partition)
    bases = [b for b, _ in segs] + [end_offset(log_dir, topic, partition)]
    return [path for i, (_, path) in enumerate(segs) if bases[i + 1] > offset]


def append(log_dir: Path, topic: Topic, partition: int, records: list[Record]) -> int:
    """Append records to one partition; returns the base offset they got. A record that does
    not fit the topic (BadRecord) appends nothing."""
    return _append(log_dir, topic, partition, [fit(topic, r) for r in records])


def _append(log_dir: Path, topic: Topic, partition: int, records: list[Record]) -> int:
    """Append records that fit the topic."""
    if not records:
        raise ValueError("nothing to append: a segment holds at least one record")
    folder = partition_dir(log_dir, topic.name, partition)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder):
        base = end_offset(log_dir, topic.name, partition)
        appended = now_ms()
        table = pa.table(
            {
                "offset": pa.array(range(base, base + len(records)), pa.int64()),
                "timestamp": pa.array([r.timestamp_ms for r in records], pa.int64()),
                "key": pa.array([r.key for r in records], _KEY_ARROW[topic.key_type]),
                "value": pa.array(
                    [None if r.value is None else orjson.dumps(r.value).decode() for r in records],
                    pa.string(),
                ),
                APPEND_MS: pa.array([appended] * len(records), pa.int64()),
            },
            schema=segment_schema(topic),
        )
        tmp = folder / f".{base:020d}.{os.getpid()}.tmp"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.rename(tmp, folder / f"{base:020d}.parquet")
        fsync_dir(folder)
    return base


class PartitionsDiffer(ValueError):
    """A topic of the log routed by another partition count than a producer would use."""


def produce(
    log_dir: Path, topic: Topic, partitions: int, records: Iterable[Record]
) -> dict[int, int]:
    """Route records with Kafka's default partitioner and append them; returns counts per
    partition. A record that does not fit the topic (BadRecord) appends nothing at all, nor
    does a topic whose records were routed by another count (PartitionsDiffer)."""
    by_partition: dict[int, list[Record]] = defaultdict(list)
    fitting = [fit(topic, r) for r in records]
    _route_by(log_dir, topic.name, partitions)
    for record in fitting:
        by_partition[partition_for(record.key, topic.key_type, partitions)].append(record)
    for partition, batch in sorted(by_partition.items()):
        _append(log_dir, topic, partition, batch)
    return {p: len(b) for p, b in sorted(by_partition.items())}


def routed_by(log_dir: Path, topic: str) -> int | None:
    """The partition count the topic's producers route by, as its first `produce` wrote it
    down; None for a topic none has produced to (or one written segment by segment);
    PartitionsDiffer when the file holds no count."""
    path = log_dir / f"{topic}{_PARTITIONS}"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    if not (text.isascii() and text.isdigit()):
        raise PartitionsDiffer(f"{path} does not hold a partition count: {text[:20]!r}")
    return int(text)


def highest_partition(log_dir: Path, topic: str) -> int | None:
    """The highest partition of the topic that has a folder; None when none has."""
    try:
        names = os.listdir(log_dir)
    except FileNotFoundError:
        return None
    prefix = f"{topic}-"
    found = [n[len(prefix) :] for n in names if n.startswith(prefix)]
    numbers = [int(n) for n in found if n.isascii() and n.isdigit()]
    return max(numbers, default=None)


def routing_differs(log_dir: Path, topic: str, partitions: int) -> str | None:
    """Why the topic's records are not routed by `partitions` (it was written with another
    count, as its producers wrote it down, or has a partition folder past it); None when
    they are, or when nothing says otherwise."""
    routed = routed_by(log_dir, topic)
    if routed is not None:
        return None if routed == partitions else f"was written with {routed} partitions"
    highest = highest_partition(log_dir, topic)
    return None if highest is None or highest < partitions else f"has a partition {highest}"


def _route_by(log_dir: Path, topic: str, partitions: int) -> None:
    """Write the topic's partition count down when none is (under the log's lock: two first
    producers agree on one); PartitionsDiffer when its records are routed otherwise."""
    if routed_by(log_dir, topic) == partitions:
        return  # written down already: most produces
    with locked(log_dir):
        differs = routing_differs(log_dir, topic, partitions)
        if differs is not None:
            raise PartitionsDiffer(
                f"topic {topic!r} of {log_dir} {differs}, the project declares {partitions}: "
                "its keys would be routed elsewhere"
            )
        if routed_by(log_dir, topic) is None:
            replace_whole(log_dir / f"{topic}{_PARTITIONS}", str(partitions).encode())


def read_segment(path: Path) -> pa.Table:
    """A segment's records. Through ParquetFile on one thread: pq.read_table's dataset
    machinery costs ~10 ms a file, which a segment of a few records does not need (0.5 ms)."""
    return pq.ParquetFile(path).read(use_threads=False)


def read(log_dir: Path, topic: str, partition: int, start: int = 0) -> Iterator[dict[str, object]]:
    """Every record of a partition from `start`, as dicts with the value decoded as it was
    written (any producer's: NaN, Infinity and lone surrogates included)."""
    for path in segments_from(log_dir, topic, partition, start):
        for row in read_segment(path).to_pylist():
            if row["offset"] >= start:
                value = row["value"]
                row["value"] = None if value is None else json.loads(value)
                row.setdefault(APPEND_MS, None)
                yield row
