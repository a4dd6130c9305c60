"""The event log as a Spark Structured Streaming source, written in Python
(`pyspark.sql.datasource`): `spark.readStream.format("stategate_log")`.

Its offsets are the log's own: {topic: {partition: next offset to read}}, so Spark's
checkpoint and the positions the snapshots publish speak the same language. A micro-batch
reads [start, end) of every partition that has new records, one Spark task per (topic,
partition), straight from the segment files with pyarrow. Rows are (topic, partition,
offset, timestamp, key, value) with the key as text (a topic's int or long keys are
decimal), so topics with different key types share one stream.

Options: `log_dir`, `topics` (JSON {topic: key type}), `partitions`, `start` (JSON offsets
of a query without a checkpoint), `max_records` (per micro-batch).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from contracts import eventlog

NAME = "stategate_log"
SCHEMA = "topic string, partition int, offset long, timestamp long, key string, value string"
Offsets = dict[str, dict[str, int]]  # topic -> partition (as text: JSON keys) -> offset


def offsets_json(offsets: dict[str, dict[int, int]]) -> str:
    as_text = {t: {str(p): o for p, o in by_p.items()} for t, by_p in offsets.items()}
    return orjson.dumps(as_text).decode()


class LogSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return LogReader(self.options)


@dataclass(frozen=True)
class Slice(InputPartition):
    """The records [start, end) of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int


class LogReader(DataSourceStreamReader):
    def __init__(self, options: Mapping[str, str]) -> None:
        self.log_dir = Path(options["log_dir"])
        self.topics: dict[str, str] = orjson.loads(options["topics"])
        self.partitions_count = int(options["partitions"])
        self.start: Offsets = orjson.loads(options.get("start", "{}"))
        self.max_records = int(options.get("max_records", "0")) or None

    def initialOffset(self) -> Offsets:
        return {
            topic: {
                str(p): int(self.start.get(topic, {}).get(str(p), 0))
                for p in range(self.partitions_count)
            }
            for topic in self.topics
        }

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_records) if self.max_records else ReadAllAvailable()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        ends = {
            topic: {
                str(p): max(
                    eventlog.end_offset(self.log_dir, topic, p), start[topic].get(str(p), 0)
                )
                for p in range(self.partitions_count)
            }
            for topic in self.topics
        }
        if isinstance(limit, ReadMaxRows):
            return _capped(start, ends, limit.max_rows)
        return ends

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return [
            Slice(topic, int(p), int(start[topic].get(p, 0)), int(stop))
            for topic, by_p in sorted(end.items())
            for p, stop in sorted(by_p.items(), key=lambda item: int(item[0]))
            if int(stop) > int(start[topic].get(p, 0))
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        part = partition
        for path in eventlog.segments_from(self.log_dir, part.topic, part.partition, part.start):
            table = pq.read_table(path)
            offsets = table.column("offset")
            wanted = pc.and_(pc.greater_equal(offsets, part.start), pc.less(offsets, part.end))
            table = table.filter(wanted)
            if table.num_rows == 0:
                continue
            yield pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array([part.topic] * table.num_rows, pa.string()),
                    "partition": pa.array([part.partition] * table.num_rows, pa.int32()),
                    "offset": table.column("offset").combine_chunks(),
                    "timestamp": table.column("timestamp").combine_chunks(),
                    "key": table.column("key").cast(pa.string()).combine_chunks(),
                    "value": table.column("value").combine_chunks(),
                }
            )

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the log keeps its records."""


def _capped(start: Offsets, ends: Offsets, budget: int) -> Offsets:
    """The end offsets reading at most `budget` records, shared by the partitions in
    proportion to what each has waiting (every partition with records moves)."""
    waiting = {
        (t, p): end - start[t].get(p, 0) for t, by_p in ends.items() for p, end in by_p.items()
    }
    total = sum(waiting.values())
    if total <= budget:
        return ends
    capped = {t: dict(by_p) for t, by_p in ends.items()}
    for (t, p), n in waiting.items():
        if n > 0:
            capped[t][p] = start[t].get(p, 0) + max(1, n * budget // total)
    return capped
