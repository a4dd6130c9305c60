"""The event log as a Spark data source written in Python (`pyspark.sql.datasource`):
`spark.read.format("stategate_log")` with `start` and `end` offsets, for a one-shot run and
the continuous pipeline's larger micro-batches.

Its offsets are the log's own: {topic: {partition: next offset to read}}, the positions the
snapshots publish. A read has one
Spark partition per task group (`groups`, the cluster's task slots at most: a task costs
Spark ~0.3 s whatever it holds, so nine small tasks on two slots cost far more than two):
group g holds the records of every Kafka partition p with p % groups == g (`members`), of
every topic, read straight from the segment files with pyarrow, so the task that builds
those partitions' layers gets exactly their records, with no shuffle. Rows are (topic,
partition, offset, timestamp, key, value, append_ms) with the key as text (int or long keys
are decimal), so topics with different key types share one stream. A value holding a lone
surrogate (a JSON escape such as "\\ud800" without its pair, which a foreign producer may
write and DuckDB's JSON reader refuses) is read with each one replaced by U+FFFD.

Options: `log_dir`, `topics` (JSON {topic: key type}), `partitions`, `groups`, `start` and
`end` (JSON offsets: the read is [start, end) of each topic partition).
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
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from contracts import eventlog
from contracts.project import Project
from contracts.unicode import replaced
from spark_pipeline.plan import RunPlan

NAME = "stategate_log"
RECORDS = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("key", pa.string()),
        ("value", pa.string()),
        (eventlog.APPEND_MS, pa.int64()),
    ]
)
_SQL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long", pa.float64(): "double"}


def ddl(schema: pa.Schema) -> str:
    """An Arrow schema as the DDL string Spark takes ("topic string, partition int, ...")."""
    return ", ".join(f"{field.name} {_SQL_TYPES[field.type]}" for field in schema)


SCHEMA = ddl(RECORDS)
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

    def reader(self, schema: object) -> DataSourceReader:
        return LogBatchReader(self.options)


@dataclass(frozen=True)
class Slice(InputPartition):
    """One task group's records: [start, end) per Kafka partition and topic."""

    group: int
    ranges: tuple[tuple[int, str, int, int], ...]  # (partition, topic, start, end)


def task_groups(spark: SparkSession, partitions: int) -> int:
    """How many tasks read and build the partitions: one per task slot, at most one per
    partition. Fixed once per query: the source and the tasks must agree on it."""
    return max(1, min(partitions, spark.sparkContext.defaultParallelism))


def members(group: int, partitions: int, groups: int) -> range:
    """The Kafka partitions of a task group."""
    return range(group, partitions, groups)


class LogBatchReader(DataSourceReader):
    """The records between the `start` and `end` offsets."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.log_dir = Path(options["log_dir"])
        self.partitions_count = int(options["partitions"])
        self.groups = int(options["groups"])
        self.start: Offsets = orjson.loads(options["start"])
        self.end: Offsets = orjson.loads(options["end"])

    def partitions(self) -> Sequence[InputPartition]:
        return slices(self.partitions_count, self.groups, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        return read_slice(self.log_dir, partition)


def slices(partitions: int, groups: int, start: Offsets, end: Offsets) -> list[Slice]:
    """One slice per task group, in order, with its partitions' ranges that hold records."""
    return [
        Slice(
            group,
            tuple(
                (p, topic, begin, int(stop))
                for p in members(group, partitions, groups)
                for topic, by_p in sorted(end.items())
                if (stop := by_p.get(str(p), 0))
                > (begin := int(start.get(topic, {}).get(str(p), 0)))
            ),
        )
        for group in range(groups)
    ]


def read_slice(log_dir: Path, part: Slice) -> Iterator[pa.RecordBatch]:
    """A slice's records, one Arrow batch per segment, with the key as text."""
    for partition, topic, start, end in part.ranges:
        for path in eventlog.segments_from(log_dir, topic, partition, start):
            table = eventlog.read_segment(path)
            offsets = table.column("offset")
            table = table.filter(pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end)))
            if table.num_rows == 0:
                continue
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([topic] * table.num_rows, pa.string()),
                    pa.array([partition] * table.num_rows, pa.int32()),
                    table.column("offset").combine_chunks(),
                    table.column("timestamp").combine_chunks(),
                    table.column("key").cast(pa.string()).combine_chunks(),
                    _readable(table.column("value").combine_chunks()),
                    eventlog.append_times(table),
                ],
                schema=RECORDS,
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


def options(project: Project, start: dict[str, dict[int, int]], groups: int) -> dict[str, str]:
    """The source's options for a project, reading from `start` in `groups` tasks."""
    key_types = {name: topic.key_type for name, topic in project.topics.items()}
    return {
        "log_dir": str(project.log_dir),
        "topics": orjson.dumps(key_types).decode(),
        "partitions": str(project.cluster.partitions),
        "groups": str(groups),
        "start": offsets_json(start),
    }


def read_log(spark: SparkSession, project: Project, plan: RunPlan, groups: int) -> DataFrame:
    """The records of a one-shot run's plan: [start, end) of every topic partition."""
    spark.dataSource.register(LogSource)
    start = {t: {p: r[0] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    end = {t: {p: r[1] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    reader = spark.read.format(NAME).options(**options(project, start, groups))
    return reader.option("end", offsets_json(end)).load()
