"""Each store's delta: what a partition's new records change, as DuckDB SQL run inside the
Spark task that builds the partition's layer (spark_pipeline/snapshot.py).

A Kafka partition's records only ever touch that partition's state, so there is nothing to
shuffle: Spark hands each task one partition's records, and the task computes every store's
delta where the records are. Input is the view `records_<n>` of one topic's new records
(offset, timestamp, key typed as declared, value: JSON text or null, a tombstone). A value
field that is missing, null, or not of its declared type reads as null, and so does a double
that is not finite (NaN, Infinity: JSON has none, but a foreign producer may write them), so
that aggregates skip it as SQL skips NULL.

Every delta has the columns key, [window_start,] then Store.stored_columns; a table's also
has `_deleted`.
"""

from __future__ import annotations

from contracts.project import Aggregate, FieldType, Store
from contracts.snapshot_file import DELETED, DUCK_TYPES, columns, finite_or_null, quoted


def records_view(topic_number: int) -> str:
    return f"records_{topic_number}"


def delta_sql(store: Store, records: str) -> str:
    """A SELECT of the store's delta from the records view `records`."""
    parsed = _parsed(store, records)
    if store.kind == "table":
        fields = ", ".join(f"{_field(n)} AS {quoted(n)}" for n in store.columns)
        return (
            f"SELECT key, {fields}, _tombstone AS {DELETED} FROM {parsed} "
            f'QUALIFY row_number() OVER (PARTITION BY key ORDER BY "offset" DESC) = 1'
        )
    if store.kind == "aggregate":
        return f"SELECT key, {_aggregates(store)} FROM {parsed} WHERE NOT _tombstone GROUP BY key"
    size, advance = store.window_size_ms, store.window_advance_ms
    last = f"(timestamp - ((timestamp % {advance}) + {advance}) % {advance})"
    starts = f"generate_series({last} - {size - advance}, {last}, {advance})"
    windowed = f"(SELECT *, unnest({starts}) AS window_start FROM {parsed} WHERE NOT _tombstone)"
    return (
        f"SELECT key, window_start, {_aggregates(store)} FROM {windowed} GROUP BY key, window_start"
    )


def _parsed(store: Store, records: str) -> str:
    """The records with `_tombstone` and one typed column per value field the store reads."""
    typed = store.topic.value
    fields = ", ".join(f"{_typed(name, kind)} AS {_field(name)}" for name, kind in typed.items())
    return (
        f'(SELECT "offset", timestamp, key, value IS NULL AS _tombstone, {fields} FROM {records})'
    )


def _typed(name: str, kind: FieldType) -> str:
    """A value field as its declared type; null when it cannot be."""
    cast = f"TRY_CAST(json_extract_string(value, {_literal(_path(name))}) AS {DUCK_TYPES[kind]})"
    return finite_or_null(cast) if kind == "double" else cast


def _aggregates(store: Store) -> str:
    typed = columns(store)
    return ", ".join(
        f"CAST({_aggregate(a)} AS {typed[a.name]}) AS {quoted(a.name)}" for a in store.partials
    )


def _aggregate(aggregate: Aggregate) -> str:
    if aggregate.func == "count" and aggregate.source is None:
        return "count(*)"
    field = _field(aggregate.source or "")
    return f"{aggregate.func}({field})"  # count of the values present, sum, min, max


def _field(name: str) -> str:
    """A value field's column; field names have no "_", so it never clashes with the others."""
    return quoted(f"v_{name}")


def _path(name: str) -> str:
    return '$."' + name.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
