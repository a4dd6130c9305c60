"""The log as a Spark data source written in Python (`pyspark.sql.datasource`):
`spark.read.format("stategate_log")` with `start` and `end` offsets, for a one-shot run and
the continuous pipeline's larger micro-batches.

Its offsets are the log's own: {topic: {partition: next offset to read}}, the positions the
snapshots publish. A read has one
Spark partition per task group (`groups`, the cluster's task slots at most: a task costs
Spark ~0.3 s whatever it holds, so nine small tasks on two slots cost far more than two):
group g holds the records of every Kafka partition p with p % groups == g (`members`), of
every topic, read by the task itself, from the segment files (topics/files.py) or from
Kafka (topics/kafka.py: a consumer of the task's own, by offset range, no group), so the
task that builds those partitions' layers gets exactly their records, with no shuffle. Rows
are RECORDS (topics/batches.py), as every read of the pipeline's.

Options: `log_dir`, `topics` (JSON {topic: key type}), `partitions`, `groups`, `start` and
`end` (JSON offsets: the read is [start, end) of each topic partition), and `kafka` (JSON of
the project's [kafka]) when the topics are Kafka's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from contracts.partitioner import KeyType
from contracts.project import Kafka, Project
from spark_pipeline.plan import RunPlan
from topics.batches import RECORDS, Span
from topics.files import read_spans
from topics.kafka import KafkaLog

NAME = "stategate_log"
_SQL_TYPES = {pa.string(): "string", pa.int32(): "int", pa.int64(): "long", pa.float64(): "double"}


def ddl(schema: pa.Schema) -> str:
    """An Arrow schema as the DDL string Spark takes ("topic string, partition int, ...")."""
    return ", ".join(f"{field.name} {_SQL_TYPES[field.type]}" for field in schema)


SCHEMA = ddl(RECORDS)
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

    def reader(self, schema: object) -> DataSourceReader:
        return LogBatchReader(self.options)


@dataclass(frozen=True)
class Slice(InputPartition):
    """One task group's records: [start, end) per Kafka partition and topic."""

    group: int
    ranges: tuple[Span, ...]


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
        self.key_types: dict[str, KeyType] = orjson.loads(options["topics"])
        kafka = options.get("kafka")
        self.kafka = None if kafka is None else Kafka(**orjson.loads(kafka))
        self.partitions_count = int(options["partitions"])
        self.groups = int(options["groups"])
        self.start: Offsets = orjson.loads(options["start"])
        self.end: Offsets = orjson.loads(options["end"])

    def partitions(self) -> Sequence[InputPartition]:
        return slices(self.partitions_count, self.groups, self.start, self.end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, Slice)
        if self.kafka is None:
            yield from read_spans(self.log_dir, partition.ranges)
            return
        log = KafkaLog(self.kafka, self.partitions_count, self.key_types)
        try:
            yield from log.read(partition.ranges)
        finally:
            log.close()


def slices(partitions: int, groups: int, start: Offsets, end: Offsets) -> list[Slice]:
    """One slice per task group, in order, with its partitions' ranges that hold records."""
    return [
        Slice(
            group,
            tuple(
                Span(p, topic, begin, int(stop))
                for p in members(group, partitions, groups)
                for topic, by_p in sorted(end.items())
                if (stop := by_p.get(str(p), 0))
                > (begin := int(start.get(topic, {}).get(str(p), 0)))
            ),
        )
        for group in range(groups)
    ]


def options(project: Project, start: dict[str, dict[int, int]], groups: int) -> dict[str, str]:
    """The source's options for a project, reading from `start` in `groups` tasks."""
    key_types = {name: topic.key_type for name, topic in project.topics.items()}
    found = {
        "log_dir": str(project.log_dir),
        "topics": orjson.dumps(key_types).decode(),
        "partitions": str(project.cluster.partitions),
        "groups": str(groups),
        "start": offsets_json(start),
    }
    if project.kafka is not None:  # the tasks read the topics from Kafka (topics/kafka.py)
        found["kafka"] = orjson.dumps(dataclasses.asdict(project.kafka)).decode()
    return found


def read_log(spark: SparkSession, project: Project, plan: RunPlan, groups: int) -> DataFrame:
    """The records of a one-shot run's plan: [start, end) of every topic partition."""
    spark.dataSource.register(LogSource)
    start = {t: {p: r[0] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    end = {t: {p: r[1] for p, r in by_p.items()} for t, by_p in plan.ranges.items()}
    reader = spark.read.format(NAME).options(**options(project, start, groups))
    return reader.option("end", offsets_json(end)).load()
