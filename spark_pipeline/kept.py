"""What a worker keeps of each partition's chain between its tasks, so that the cost of a
new delta stays flat as the chain grows.

A delta of an aggregate or window store holds the changed keys' full rows: the new records
combined with each key's current row, which is the newest row among every layer below.
Reading every layer costs a little more with each delta (a read, a scan and a UNION
branch each: along 48 deltas, bench.installs measured 159 ms a delta in the first half and
258 ms in the second; 117 and 136 ms this way). A worker instead keeps, per partition, the
newest row of each key its chain's deltas hold (`KeptRows`), and a new delta reads the base and
that. The pipeline's driver and Spark's reused Python workers keep theirs across batches.

Kept only for a chain it names layer by layer (path and sha256): a worker whose kept chain
is behind (executors built some layers) folds the missing deltas in; any other chain (a
compaction, a rebuild, a layer rewritten after a crash) starts again from the base. A layer
that is written but never published is harmless: the next task's chain does not name it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from contracts.delta_file import read_delta
from contracts.manifest import Layer
from contracts.project import Store
from contracts.snapshot_file import columns, key_columns

Chain = tuple[tuple[str, str], ...]  # each layer's (path, sha256), base first


@dataclass(frozen=True)
class KeptRows:
    chain: Chain
    rows: dict[str, pa.Table] = field(default_factory=dict)  # store -> newest row per key


_KEPT: dict[tuple[str, int], KeptRows] = {}  # (store root, partition) -> its kept chain
_LOCK = threading.Lock()  # a driver builds partitions in threads (batch.publish_here)


def chain_of(layers: tuple[Layer, ...]) -> Chain:
    return tuple((layer.path, layer.sha256) for layer in layers)


def kept(store_root: str, partition: int) -> KeptRows | None:
    with _LOCK:
        return _KEPT.get((store_root, partition))


def keep(store_root: str, partition: int, held: KeptRows) -> None:
    with _LOCK:
        _KEPT[(store_root, partition)] = held


def forget() -> None:
    """Drop every kept chain (tests, and a worker that wants its memory back)."""
    with _LOCK:
        _KEPT.clear()


def kept_rows_of(
    store_root: str,
    partition: int,
    below: tuple[Layer, ...],
    stores: tuple[Store, ...],
    where: Callable[[Layer], Path],
) -> KeptRows:
    """The kept chain of `below` (a base and its deltas): the one kept when it is `below` or
    leads to it, with the deltas it lacks folded in (each read `where` it is on this host);
    else every delta of `below` folded."""
    chain = chain_of(below)
    held = kept(store_root, partition)
    if held is None or held.chain != chain[: len(held.chain)]:
        held = KeptRows(chain[:1])
    missing = below[len(held.chain) :]
    if not missing or not any(kept_for(store) for store in stores):
        return KeptRows(chain, held.rows)
    read = [read_delta(where(layer))[1] for layer in missing]
    return KeptRows(chain, fold(held.rows, read, stores))


def fold(
    rows: dict[str, pa.Table], deltas: list[dict[str, pa.Table]], stores: tuple[Store, ...]
) -> dict[str, pa.Table]:
    """KeptRows `rows` with `deltas` (each a delta's tables by store, oldest first) on top: the
    kept rows of the keys a delta does not hold, then the delta's, delta by delta (a hash
    anti-join in Arrow: no sort, and no SQL statement, whose fixed cost is ~10x the join's
    for a few hundred keys)."""
    rows = dict(rows)
    for store in stores:
        if not kept_for(store):
            continue
        names, keys = list(columns(store)), key_columns(store)
        for frames in deltas:
            newer = frames[store.name]
            if not len(newer):
                continue  # absent rows: no delta of the chain changed the store
            newer = newer.select(names)
            older = rows.get(store.name)
            if older is not None:
                kept_rows = older.join(newer.select(keys), keys=keys, join_type="left anti")
                newer = pa.concat_tables([kept_rows.select(names), newer])
            rows[store.name] = newer
    return rows


def kept_for(store: Store) -> bool:
    """Whether a delta of `store` reads the current rows: aggregates and windows combine
    with them; a table's delta is its new rows alone."""
    return store.kind != "table"
