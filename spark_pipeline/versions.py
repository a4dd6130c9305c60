"""A versioned table store's state (KIP-889), as SQL run in the task that builds a layer
(spark_pipeline/snapshot.py): every version of a key within the store's history, by event
time, in the history table (contracts/project.py: history_of), and the latest version of
each key as the store's own table.

A record makes a version of its key, valid from its timestamp until the next version's; a
tombstone makes none valid from its timestamp. Records arrive in offset order, and their
timestamps need not follow it:
- a record with the timestamp of a version replaces it;
- a record older than the partition's stream time (the newest timestamp its records of the
  topic had before it) minus the history is dropped, as KIP-889's grace period drops it;
- any other is put in its place: the version before it ends where it starts, and it ends
  where the one after it starts. The store's own row of a key is its newest version by
  timestamp (none after a tombstone), not the last appended.
A delta holds a touched key's new versions and those whose valid_to changed; a base keeps
the versions valid at the horizon (stream time minus the history) or after it, which are
all a query may ask for (gateway/storage/execution.py refuses an earlier time).
"""

from __future__ import annotations

from contracts.clock import EARLIEST_MS
from contracts.project import TOMBSTONE, VALID_FROM, VALID_TO, Store, history_of
from contracts.snapshot_file import DELETED, quoted
from spark_pipeline.checks import field_column

_SEEN = "_seen"  # a candidate's stream time in its batch: the newest timestamp before it
_NEW, _WAS = "_new", "_was"  # whether a version is new; its valid_to before


def candidates_sql(store: Store, records: str) -> str:
    """The new records as candidate versions, each with the newest timestamp of the records
    before it in the view `records`."""
    fields = ", ".join(f"{field_column(n)} AS {quoted(n)}" for n in store.columns)
    return (
        f'SELECT key, timestamp AS {VALID_FROM}, "offset", {TOMBSTONE}, {fields}, '
        f'max(timestamp) OVER (ORDER BY "offset" ROWS BETWEEN UNBOUNDED PRECEDING '
        f"AND 1 PRECEDING) AS {_SEEN} FROM {records}"
    )


def stream_sql(relations: list[str]) -> str:
    """The newest valid_from of the history rows in `relations` (the layers below, or kept
    rows): a layer rewrites a version at the same valid_from, so this is the state's."""
    branches = " UNION ALL ".join(f"SELECT max({VALID_FROM}) AS m FROM {r}" for r in relations)
    return f"SELECT max(m) FROM ({branches})"


def new_versions_sql(store: Store, candidates: str, stream_ms: int | None) -> str:
    """The candidates that make versions: not too late, and the last of a key's records with
    one timestamp."""
    stream = EARLIEST_MS if stream_ms is None else int(stream_ms)
    return (
        f'SELECT * EXCLUDE ({_SEEN}, "offset") FROM {candidates} '
        f"WHERE {VALID_FROM} >= greatest(coalesce({_SEEN}, {stream}), {stream}) "
        f"- {store.history_ms} "
        f'QUALIFY row_number() OVER (PARTITION BY key, {VALID_FROM} ORDER BY "offset" DESC) = 1'
    )


def merged_sql(store: Store, current: str, new: str) -> str:
    """Every version of the keys in `new` (a table of new versions) and `current` (a
    subquery of the history's rows): `new`'s, then `current`'s at other times; each with its
    valid_to from the next, whether it is new, and its valid_to before."""
    names = ", ".join(quoted(n) for n in (VALID_FROM, TOMBSTONE, *store.columns))
    return (
        f"SELECT key, {names}, lead({VALID_FROM}) OVER (PARTITION BY key ORDER BY "
        f"{VALID_FROM}) AS {VALID_TO}, {_NEW}, {_WAS} FROM ("
        f"SELECT key, {names}, true AS {_NEW}, CAST(NULL AS BIGINT) AS {_WAS} FROM {new} "
        f"UNION ALL SELECT key, {names}, false, {VALID_TO} FROM {current} AS c "
        f"WHERE NOT EXISTS (SELECT 1 FROM {new} AS n "
        f"WHERE n.key = c.key AND n.{VALID_FROM} = c.{VALID_FROM}))"
    )


def history_delta_sql(store: Store, merged: str) -> str:
    """A delta's history rows: the new versions and those whose valid_to changed."""
    return (
        f"SELECT {_history_columns(store)}, false AS {DELETED} FROM {merged} "
        f"WHERE {_NEW} OR {VALID_TO} IS DISTINCT FROM {_WAS} ORDER BY key, {VALID_FROM}"
    )


def table_delta_sql(store: Store, merged: str) -> str:
    """A delta's rows of the store itself: a key whose newest version is new, as that
    version (a tombstone: deleted)."""
    names = ", ".join(quoted(n) for n in store.columns)
    return (
        f"SELECT key, {names}, {TOMBSTONE} AS {DELETED} FROM ({_newest(merged)}) "
        f"WHERE {_NEW} ORDER BY key"
    )


def history_base_sql(store: Store, merged: str, horizon_ms: int) -> str:
    """A base's history rows: the versions a query at the horizon or after may read."""
    dropped = (
        f"coalesce({VALID_TO} <= {horizon_ms}, false) "
        f"OR ({TOMBSTONE} AND {VALID_FROM} <= {horizon_ms})"
    )
    return (
        f"INSERT INTO {quoted(history_of(store).name)} SELECT {_history_columns(store)} "
        f"FROM {merged} WHERE NOT ({dropped}) ORDER BY key, {VALID_FROM}"
    )


def table_base_sql(store: Store, merged: str) -> str:
    """A base's rows of the store itself: each key's newest version, unless a tombstone."""
    names = ", ".join(quoted(n) for n in store.columns)
    return (
        f"INSERT INTO {quoted(store.name)} SELECT key, {names} FROM ({_newest(merged)}) "
        f"WHERE NOT {TOMBSTONE} ORDER BY key"
    )


def horizon_sql(store: Store, merged: str) -> str:
    """The earliest time a query may ask of the state in `merged`: its stream time minus
    the history."""
    return f"SELECT max({VALID_FROM}) - {store.history_ms} FROM {merged}"


def _newest(merged: str) -> str:
    return (
        f"SELECT * FROM {merged} "
        f"QUALIFY row_number() OVER (PARTITION BY key ORDER BY {VALID_FROM} DESC) = 1"
    )


def _history_columns(store: Store) -> str:
    names = (VALID_FROM, VALID_TO, TOMBSTONE, *store.columns)
    return "key, " + ", ".join(quoted(n) for n in names)
