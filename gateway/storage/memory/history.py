"""A versioned store's versions of one key, read from the layers' indexes in memory (format:
contracts/snapshot_file.py; how the pipeline keeps it: spark_pipeline/versions.py). Where a
layer has no index (keys too wide), SQL reads the layers' tables (storage/sql/reads.py).

Each layer holds rows by (key, valid_from), and a newer layer's row replaces an older one's
of the same identity (a version whose valid_to changed when a late record came in before
the next). No layer ever removes a version, so the version valid at a time is the one with
the newest valid_from at or before it over all layers: each layer's rows of the key from
that layer's version valid at `from` up to `to`, the newest layer's row of each time.
"""

from __future__ import annotations

from collections.abc import Sequence

from contracts.clock import EARLIEST_MS
from gateway.model.queries import Row, Versions
from gateway.storage.memory.key_runs import KeyRuns, Timed


def versions(runs: Sequence[KeyRuns], query: Versions) -> list[Row]:
    """The versions of `query.key` valid at some time in [from, to], by valid_from, after
    `query.after`, at most `query.limit`: key, valid_from, valid_to, then the columns; from
    the base's runs and then each level's (Snapshot.runs)."""
    start_ms, found = since(query), dict[int, Timed]()
    for index in runs:  # oldest first: a newer layer's row of a time replaces an older's
        found.update((v[0], v) for v in index.versions(query.key, start_ms, query.to_ms))
    return valid(query, [found[start] for start in sorted(found)])


def since(query: Versions) -> int:
    """The earliest time a query asks for."""
    return EARLIEST_MS if query.from_ms is None else query.from_ms


def valid(query: Versions, rows: list[Timed]) -> list[Row]:
    """Of a key's rows (valid_from, valid_to, tombstone, *columns) by valid_from, from the
    one valid at `from` on: the versions, tombstones left out, after `after`."""
    start_ms = since(query)
    starts = [i for i, row in enumerate(rows) if row[0] <= start_ms]
    rows = rows[starts[-1] :] if starts else rows
    out: list[Row] = []
    for start, end, tombstone, *values in rows:
        if tombstone or (end is not None and end <= start_ms):
            continue
        if query.after is not None and start <= query.after:
            continue
        out.append([query.key, start, end, *values])
        if len(out) == query.limit:
            break
    return out
