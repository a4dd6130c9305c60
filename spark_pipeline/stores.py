"""Each store's delta: what a batch of new records changes, computed with Spark.

Input rows are (partition, offset, timestamp, key, value), value being JSON text or null (a
tombstone). Every delta has the columns partition, key, [window_start,] then Store.columns;
a table delta also has `_deleted`. snapshot.py merges a delta into the previous snapshot.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gateway.config import Aggregate, FieldType, Store, Topic

SPARK_TYPES: dict[FieldType, T.DataType] = {
    "string": T.StringType(),
    "int": T.IntegerType(),
    "long": T.LongType(),
    "double": T.DoubleType(),
    "boolean": T.BooleanType(),
}


def value_schema(topic: Topic) -> T.StructType:
    return T.StructType([T.StructField(n, SPARK_TYPES[t]) for n, t in topic.value.items()])


def parse_values(records: DataFrame, topic: Topic) -> DataFrame:
    """Replace the JSON text by the struct `v` (null for a tombstone)."""
    return records.select(
        "partition",
        "offset",
        "timestamp",
        "key",
        F.from_json("value", value_schema(topic)).alias("v"),
    )


def store_delta(store: Store, parsed: DataFrame) -> DataFrame:
    if store.kind == "table":
        return table_delta(store, parsed)
    if store.kind == "aggregate":
        return aggregate_delta(store, parsed)
    return window_delta(store, parsed)


def table_delta(store: Store, parsed: DataFrame) -> DataFrame:
    """The latest record per key; `_deleted` when it is a tombstone."""
    latest = F.max_by(F.struct(F.col("v").isNull().alias("_deleted"), F.col("v")), "offset")
    fields = [F.col("r.v").getField(n).alias(n) for n in store.columns]
    return (
        parsed.groupBy("partition", "key")
        .agg(latest.alias("r"))
        .select("partition", "key", *fields, F.col("r._deleted").alias("_deleted"))
    )


def aggregate_delta(store: Store, parsed: DataFrame) -> DataFrame:
    return _aggregated(store, parsed.where(F.col("v").isNotNull()), ["partition", "key"])


def window_delta(store: Store, parsed: DataFrame) -> DataFrame:
    """Aggregates per window; a record is in every window [s, s + size) with s % advance == 0."""
    size, advance = store.window_size_ms, store.window_advance_ms
    timestamp = F.col("timestamp")
    last = timestamp - F.pmod(timestamp, F.lit(advance).cast("long"))
    first = last - F.lit(size - advance).cast("long")
    starts = F.sequence(first, last, F.lit(advance).cast("long"))
    windowed = parsed.where(F.col("v").isNotNull()).withColumn("window_start", F.explode(starts))
    return _aggregated(store, windowed, ["partition", "key", "window_start"])


def _aggregated(store: Store, rows: DataFrame, group: list[str]) -> DataFrame:
    results = [
        _aggregate(a).cast(SPARK_TYPES[a.result_type(store.topic)]).alias(a.name)
        for a in store.aggregates
    ]
    return rows.groupBy(*group).agg(*results)


def _aggregate(aggregate: Aggregate) -> Column:
    if aggregate.func == "count":
        return F.count(F.lit(1))
    field = F.col("v").getField(aggregate.source or "")
    if aggregate.func == "sum":
        return F.sum(field)
    if aggregate.func == "min":
        return F.min(field)
    return F.max(field)
