"""One key's windows from the layers' indexes in memory (storage/memory/key_runs.py), as the
SQL of storage/sql/reads.py would read them: each layer's rows of the key with a start in the
span, a newer layer's row of a start replacing an older one's, rows a level deletes left out."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.model.queries import Row, WindowsOfKey
from gateway.storage.memory.key_runs import KeyRuns, Timed


def of_key(runs: Sequence[KeyRuns], query: WindowsOfKey) -> list[Row]:
    """key, window_start, then the columns, by window start, from the base's runs and then
    each level's (Snapshot.runs)."""
    base, *levels = runs
    key, from_ms, to_ms = query.key, query.from_ms, query.to_ms
    found: dict[int, Timed] = {row[0]: row for row in base.between(key, from_ms, to_ms)}
    for level in levels:  # oldest first; a level's rows end with their `_deleted` flag
        for *row, deleted in level.between(key, from_ms, to_ms):
            if deleted:
                found.pop(row[0], None)
            else:
                found[row[0]] = tuple(row)
    return [[key, *found[start]] for start in sorted(found)]
