"""Each store's delta: what a partition's new records change, as DuckDB SQL run inside the
Spark task that builds the partition's layer (spark_pipeline/snapshot.py).

A Kafka partition's records only ever touch that partition's state, so there is nothing to
shuffle: Spark hands each task one partition's records, and the task computes every store's
delta where the records are. Input is the view `records_<n>` of one topic's new records that
fit its declaration, checked and typed once (spark_pipeline/checks.py): offset, timestamp,
key, `_tombstone`, and one typed column per value field, null when missing or null, or a
double that is not finite, so that aggregates skip it as SQL skips NULL.

Every delta has the columns key, [window_start,] then Store.stored_columns; a table's also
has `_deleted`. A versioned table's new records are candidate versions instead, which
spark_pipeline/versions.py turns into its rows and its history's.
"""

from __future__ import annotations

from contracts.project import Aggregate, Store
from contracts.snapshot_file import DELETED, columns, quoted
from spark_pipeline.checks import TOMBSTONE, field_column


def records_view(topic_number: int) -> str:
    return f"records_{topic_number}"


def delta_sql(store: Store, records: str) -> str:
    """A SELECT of the store's delta from the records view `records`."""
    if store.kind == "table":
        fields = ", ".join(f"{field_column(n)} AS {quoted(n)}" for n in store.columns)
        return (
            f"SELECT key, {fields}, {TOMBSTONE} AS {DELETED} FROM {records} "
            f'QUALIFY row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1'
        )
    if store.kind == "aggregate":
        return f"SELECT key, {_aggregates(store)} FROM {records} WHERE NOT {TOMBSTONE} GROUP BY key"
    size, advance = store.window_size_ms, store.window_advance_ms
    last = f"(timestamp - ((timestamp % {advance}) + {advance}) % {advance})"
    starts = f"generate_series({last} - {size - advance}, {last}, {advance})"
    windowed = f"(SELECT *, unnest({starts}) AS window_start FROM {records} WHERE NOT {TOMBSTONE})"
    return (
        f"SELECT key, window_start, {_aggregates(store)} FROM {windowed} GROUP BY key, window_start"
    )


def _aggregates(store: Store) -> str:
    typed = columns(store)
    return ", ".join(
        f"CAST({_aggregate(a)} AS {typed[a.name]}) AS {quoted(a.name)}" for a in store.partials
    )


def _aggregate(aggregate: Aggregate) -> str:
    if aggregate.func == "count" and aggregate.source is None:
        return "count(*)"
    field = field_column(aggregate.source or "")
    return f"{aggregate.func}({field})"  # count of the values present, sum, min, max
