"""Read a topic's new records, an offset range per partition, from the event log into Spark."""

from __future__ import annotations

from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from contracts import eventlog
from contracts.project import Topic
from spark_pipeline.plan import OffsetRange

KEY_TYPES: dict[str, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
}


def segment_schema(topic: Topic) -> T.StructType:
    return T.StructType(
        [
            T.StructField("offset", T.LongType()),
            T.StructField("timestamp", T.LongType()),
            T.StructField("key", KEY_TYPES[topic.key_type]),
            T.StructField("value", T.StringType()),
        ]
    )


def read_records(
    spark: SparkSession, log_dir: Path, topic: Topic, ranges: dict[int, OffsetRange]
) -> DataFrame | None:
    """Rows (partition, offset, timestamp, key, value) with start <= offset < end, or None when
    every range is empty. Records appended past `end` are left for the next run."""
    frames = [
        _read_partition(spark, log_dir, topic, partition, start, end)
        for partition, (start, end) in sorted(ranges.items())
        if end > start
    ]
    return reduce(DataFrame.unionByName, frames) if frames else None


def _read_partition(
    spark: SparkSession, log_dir: Path, topic: Topic, partition: int, start: int, end: int
) -> DataFrame:
    files = [str(p) for p in eventlog.segments_from(log_dir, topic.name, partition, start)]
    offset = F.col("offset")
    return (
        spark.read.schema(segment_schema(topic))
        .parquet(*files)
        .where((offset >= start) & (offset < end))
        .select(F.lit(partition).alias("partition"), "offset", "timestamp", "key", "value")
    )
