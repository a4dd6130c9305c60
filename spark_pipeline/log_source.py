"""The event log as a Spark data source written in Python (`pyspark.sql.datasource`):
`spark.readStream.format("stategate_log")` for the continuous pipeline, and
`spark.read.format("stategate_log")` with `start` and `end` offsets for a one-shot run.

Its offsets are the log's own: {topic: {partition: next offset to read}}, so Spark's
checkpoint and the positions the snapshots publish speak the same language. A read has one
Spark partition per Kafka partition, in order (Spark partition i holds Kafka partition i's
records of every topic, maybe none), read straight from the segment files with pyarrow: the
task that builds a partition's layer gets exactly its records, with no shuffle. Rows are
(topic, partition, offset, timestamp, key, value, append_ms) with the key as text (int or
long keys are decimal), so topics with different key types share one stream. A value holding
a lone surrogate (a JSON escape such as "\\ud800" without its pair, which a foreign producer
may write and DuckDB's JSON reader refuses) is read with each one replaced by U+FFFD.

Options: `log_dir`, `topics` (JSON {topic: key type}), `partitions`, `start` (JSON offsets
to read from; a stream's when it has no checkpoint), `end` (JSON offsets a batch read stops
at), `max_records` (per micro-batch).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from contracts import eventlog
from contracts.project import Project
from contracts.unicode import replaced
from spark_pipeline.plan import RunPlan

NAME = "stategate_log"
SCHEMA = (
    "topic string, partition int, offset long, timestamp long, key string, value string, "
    "append_ms long"
)
Offsets = dict[str, dict[str, int]]  # topic -> partition (as text: JSON keys) -> offset
_SURROGATE_ESCAPE = r"\\u[dD][89a-fA-F]"  # a JSON escape of a high or low surrogate


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

    def reader(self, schema: object) -> DataSourceReader:
        return LogBatchReader(self.options)


@dataclass(frozen=True)
class Slice(InputPartition):
    """One Kafka partition's records [start, end) per topic."""

    partition: int
    ranges: tuple[tuple[str, int, int], ...]  # (topic, start, end)


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
        return slices(self.partitions_count, start, end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        return read_slice(self.log_dir, partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to release: the log keeps its records."""


class LogBatchReader(DataSourceReader):
    """The records between the `start` and `end` offsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.log_dir = Path(options["log_dir"])
        self.partitions_count = int(options["partitions"])
        self.start: Offsets = orjson.loads(options["start"])
        self.end: Offsets = orjson.loads(options["end"])

    def partitions(self) -> Sequence[InputPartition]:
        return slices(self.partitions_count, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        return read_slice(self.log_dir, partition)


def slices(partitions: int, start: Offsets, end: Offsets) -> list[Slice]:
    """One slice per Kafka partition, in order, with the topics' ranges that hold records."""
    return [
        Slice(
            p,
            tuple(
                (topic, int(start.get(topic, {}).get(str(p), 0)), int(stop))
                for topic, by_p in sorted(end.items())
                if (stop := by_p.get(str(p), 0)) > start.get(topic, {}).get(str(p), 0)
            ),
        )
        for p in range(partitions)
    ]


def read_slice(log_dir: Path, part: Slice) -> Iterator[pa.RecordBatch]:
    """A slice's records, one Arrow batch per segment, with the key as text."""
    for topic, start, end in part.ranges:
        for path in eventlog.segments_from(log_dir, topic, part.partition, start):
            table = pq.read_table(path)
            offsets = table.column("offset")
            table = table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
            if table.num_rows == 0:
                continue
            yield pa.RecordBatch.from_pydict(
                {
                    "topic": pa.array([topic] * table.num_rows, pa.string()),
                    "partition": pa.array([part.partition] * table.num_rows, pa.int32()),
                    "offset": table.column("offset").combine_chunks(),
                    "timestamp": table.column("timestamp").combine_chunks(),
                    "key": table.column("key").cast(pa.string()).combine_chunks(),
                    "value": _readable(table.column("value").combine_chunks()),
                    eventlog.APPEND_MS: eventlog.append_times(table),
                }
            )


def _readable(values: pa.Array) -> pa.Array:
    """The values with every lone surrogate replaced by U+FFFD (contracts/unicode.py): the
    few that hold a surrogate escape are decoded and encoded again; a pair stays as it is."""
    suspect = pc.match_substring_regex(values, _SURROGATE_ESCAPE)
    if not pc.any(suspect).as_py():
        return values
    texts = values.to_pylist()
    for i, flagged in enumerate(suspect.to_pylist()):
        if flagged:
            with contextlib.suppress(ValueError):  # not JSON: a bad record (checks.py)
                texts[i] = json.dumps(replaced(json.loads(texts[i])), ensure_ascii=False)
    return pa.array(texts, pa.string())


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


def options(project: Project, start: dict[str, dict[int, int]]) -> dict[str, str]:
    """The source's options for a project, reading from `start`."""
    key_types = {name: topic.key_type for name, topic in project.topics.items()}
    return {
        "log_dir": str(project.log_dir),
        "topics": orjson.dumps(key_types).decode(),
        "partitions": str(project.cluster.partitions),
        "start": offsets_json(start),
        "max_records": str(project.settings.max_records_per_batch),
    }


def read_log(spark: SparkSession, project: Project, plan: RunPlan) -> DataFrame:
    """The records of a one-shot run's plan: [start, end) of every topic partition."""
    spark.dataSource.register(LogSource)
    start = {t: {p: r[0] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    end = {t: {p: r[1] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    reader = spark.read.format(NAME).options(**options(project, start))
    return reader.option("end", offsets_json(end)).load()
