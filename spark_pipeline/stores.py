"""Each store's delta: what a batch of new records changes, computed with Spark.

Input rows are (partition, offset, timestamp, key, value), value being JSON text or null (a
tombstone), parsed once per topic by parse_values. Every delta has the columns partition, key,
[window_start,] then Store.stored_columns; a table delta also has `_deleted`. snapshot.py merges a
delta into the previous snapshot.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from contracts.project import Aggregate, FieldType, Store, Topic

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
    """Replace the JSON text by `_tombstone` and one flat column per value field, named by
    field_column (flat primitive columns cache far faster than a struct)."""
    value = F.from_json("value", value_schema(topic)).alias("v")
    fields = [F.col("v").getField(name).alias(field_column(name)) for name in topic.value]
    tombstone = F.col("v").isNull().alias("_tombstone")
    parsed = records.select("partition", "offset", "timestamp", "key", value)
    # a second projection: Spark parses once, where one select would parse once per field
    return parsed.select("partition", "offset", "timestamp", "key", tombstone, *fields)


def field_column(name: str) -> str:
    """A value field's column; field names have no "_", so it never clashes with the others."""
    return f"v_{name}"


def store_delta(store: Store, parsed: DataFrame) -> DataFrame:
    if store.kind == "table":
        return table_delta(store, parsed)
    if store.kind == "aggregate":
        return aggregate_delta(store, parsed)
    return window_delta(store, parsed)


def table_delta(store: Store, parsed: DataFrame) -> DataFrame:
    """The latest record per key; `_deleted` when it is a tombstone."""
    columns = ["_tombstone", *(field_column(n) for n in store.columns)]
    latest = F.max_by(F.struct(*columns), "offset")
    fields = [F.col("r").getField(field_column(n)).alias(n) for n in store.columns]
    return (
        parsed.groupBy("partition", "key")
        .agg(latest.alias("r"))
        .select("partition", "key", *fields, F.col("r._tombstone").alias("_deleted"))
    )


def aggregate_delta(store: Store, parsed: DataFrame) -> DataFrame:
    return _aggregated(store, parsed.where(~F.col("_tombstone")), ["partition", "key"])


def window_delta(store: Store, parsed: DataFrame) -> DataFrame:
    """Aggregates per window; a record is in every window [s, s + size) with s % advance == 0."""
    size, advance = store.window_size_ms, store.window_advance_ms
    timestamp = F.col("timestamp")
    last = timestamp - F.pmod(timestamp, F.lit(advance).cast("long"))
    first = last - F.lit(size - advance).cast("long")
    starts = F.sequence(first, last, F.lit(advance).cast("long"))
    windowed = parsed.where(~F.col("_tombstone")).withColumn("window_start", F.explode(starts))
    return _aggregated(store, windowed, ["partition", "key", "window_start"])


def _aggregated(store: Store, rows: DataFrame, group: list[str]) -> DataFrame:
    results = [
        _aggregate(a).cast(SPARK_TYPES[a.result_type(store.topic)]).alias(a.name)
        for a in store.partials
    ]
    return rows.groupBy(*group).agg(*results)


def _aggregate(aggregate: Aggregate) -> Column:
    if aggregate.func == "count" and aggregate.source is None:
        return F.count(F.lit(1))
    field = F.col(field_column(aggregate.source or ""))
    if aggregate.func == "count":
        return F.count(field)  # the values present
    if aggregate.func == "sum":
        return F.sum(field)
    if aggregate.func == "min":
        return F.min(field)
    return F.max(field)
