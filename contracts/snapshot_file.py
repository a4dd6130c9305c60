"""The snapshot files: a partition's state is a chain of layers, one file each, every file
holding every store.

- a **base** holds the whole state at its version: a DuckDB file;
- a **delta** holds, for the keys changed since the version below it, their full new rows (a
  deleted table key as a row with `_deleted` true): an Arrow IPC file (contracts/delta_file.py).
  Reading a chain: the newest layer holding a key wins, and a deleted key is absent. A delta's
  version is the one below it plus one.

A compaction folds a chain into a new base *at the same version* (the state is the same), so
a base and a delta may share a version number but never a path.

A base's tables (identifiers quoted):
- one per store, named by the store: `key` (VARCHAR | INTEGER | BIGINT), for a window store
  `window_start BIGINT` (epoch ms), then Store.stored_columns in order (an avg is kept as its
  sum and count, so that versions merge); rows ordered by key (, window_start) so zone maps
  prune lookups. Deleted table keys are absent.
- one more per versioned table store, its history (contracts/project.py: history_of), named
  `<store>_history`: `key`, `valid_from BIGINT` (epoch ms), `valid_to BIGINT` (null: still
  valid), `_tombstone BOOLEAN`, then the columns; ordered by key, valid_from.
- `_position(topic VARCHAR, partition INTEGER, "offset" BIGINT)`: per topic, the next offset
  to read in this partition.
- `_snapshot(partition INTEGER, version BIGINT, created_ms BIGINT, format INTEGER,
  kind VARCHAR)`: one row; kind is "base".
- `_stores(name VARCHAR, built_as VARCHAR, rows_as VARCHAR, declaration VARCHAR)`: each
  store table, with `built_as` and `rows_as` of the declaration it was built by, and that
  declaration whole (`declaration`: JSON, read back by `declared`), so that a process whose
  project no longer declares it can still read and extend the table (a base written before
  `_stores` has none: its tables are taken as the node's declarations built them; one
  written before `rows_as` has `built_as` alone, one before `declaration` no declaration).
A delta holds the same per store, with `_deleted` after the other columns, and the same
header in its schema's metadata.

A layer lives at the same relative path in the snapshot store and on every node that hosts
it, `p<partition>/v<version>.base.duckdb` or `p<partition>/v<version>.delta.arrow`, and a
path is never reused.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Literal

import orjson

from contracts.project import VALID_FROM, Aggregate, FieldType, Store, Topic

Kind = Literal["base", "delta"]
FORMAT = 3  # 3: deltas are Arrow IPC files
POSITION_TABLE = "_position"
DELETED = "_deleted"
SNAPSHOT_TABLE = "_snapshot"
STORES_TABLE = "_stores"
BUILT_AS_DIGITS = 16
DUCK_TYPES: dict[FieldType, str] = {
    "string": "VARCHAR",
    "int": "INTEGER",
    "long": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
}
_FILE = re.compile(r"^v(\d+)\.(?:(base)\.duckdb|(delta)\.arrow)$")
SUFFIX: dict[Kind, str] = {"base": "duckdb", "delta": "arrow"}


class FormatError(ValueError):
    """A snapshot file or manifest written in a format this version does not read."""


def relative_path(partition: int, version: int, kind: Kind) -> str:
    """Where one layer lives, relative to the store folder or a node's snapshot folder."""
    return f"{partition_folder(partition)}/v{version:06d}.{kind}.{SUFFIX[kind]}"


def partition_folder(partition: int) -> str:
    return f"p{partition:03d}"


def parse_file_name(file_name: str) -> tuple[int, Kind] | None:
    """(version, kind) of a layer's file name in a partition folder, else None."""
    match = _FILE.match(file_name)
    if match is None:
        return None
    kind: Kind = "base" if match.group(2) else "delta"
    return int(match.group(1)), kind


def shape(store: Store) -> dict[str, object]:
    """What of a store's declaration its snapshots depend on: not its joins (resolved at
    query time), and its scope only when global (a digest from before scopes still holds)."""
    found = dataclasses.asdict(store)
    del found["joins"], found["generation_of"]
    found["name"] = store.declared_name  # a generation's digest is its declaration's
    if not store.is_global:
        del found["scope"]
    return found


def built_as(store: Store) -> str:
    """A digest of `shape`, its index included: what a base written before `rows_as` says
    its tables were built by."""
    return _digest(shape(store))


def rows_as(store: Store) -> str:
    """A digest of what decides a store's rows: `shape` but its index, which only the nodes
    keep (in memory). A node serves a store's table from a base only when the base was
    built by a declaration of the same rows as its own (a store changed in place is not
    served from the tables of its old declaration; one given another index is)."""
    return _digest({k: v for k, v in shape(store).items() if k != "index"})


def same_rows(one: Store, other: Store) -> bool:
    """Whether two declarations of a store make the same rows: they differ in the index at
    most."""
    return rows_as(one) == rows_as(other)


def declaration(store: Store) -> str:
    """The declaration that built a store's table, whole but for its joins (read at query
    time, not stored): JSON, the columns in their order."""
    return orjson.dumps(dataclasses.asdict(dataclasses.replace(store, joins=()))).decode()


def declared(text: str) -> Store:
    """The Store a `declaration` wrote; FormatError when it is not one."""
    try:
        raw = orjson.loads(text)
        topic = raw.pop("topic")
        return Store(
            topic=Topic(topic["name"], topic["key_type"], dict(topic["value"])),
            aggregates=tuple(Aggregate(**a) for a in raw.pop("aggregates")),
            index=tuple(raw.pop("index")),
            joins=tuple(raw.pop("joins")),
            **raw,
        )
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError) as exc:
        raise FormatError(f"not a store's declaration: {exc!r}") from exc


def _digest(shaped: dict[str, object]) -> str:
    digest = hashlib.sha256(orjson.dumps(shaped, option=orjson.OPT_SORT_KEYS))
    return digest.hexdigest()[:BUILT_AS_DIGITS]


def check_format(found: object, what: str) -> None:
    if found != FORMAT:
        raise FormatError(f"{what} has format {found!r}; this version reads format {FORMAT}")


def key_columns(store: Store) -> list[str]:
    """What identifies a row: the key, and a window's start or a version's valid_from."""
    if store.kind == "window":
        return ["key", "window_start"]
    return ["key", VALID_FROM] if store.kind == "versions" else ["key"]


def columns(store: Store) -> dict[str, str]:
    """The store table's columns and their DuckDB types, in order."""
    typed = {"key": DUCK_TYPES[store.key_type]}
    for name in key_columns(store)[1:]:
        typed[name] = "BIGINT"
    typed.update({name: DUCK_TYPES[kind] for name, kind in store.stored_columns.items()})
    return typed


def literal(text: str) -> str:
    """A SQL string literal: a path in ATTACH, a JSON path."""
    return "'" + text.replace("'", "''") + "'"


def quoted(name: str) -> str:
    """A table or column name as DuckDB's SQL spells it."""
    return '"' + name.replace('"', '""') + '"'


def finite_or_null(sql: str) -> str:
    """A DOUBLE expression read with NaN and Infinity as NULL: records, state and answers
    hold finite numbers only (a foreign producer may write them; a sum may overflow)."""
    return f"CASE WHEN isfinite({sql}) THEN {sql} END"


def newest_rows(branches: list[str], keys: list[str]) -> str:
    """The chain's reading rule in SQL: of the rows the `branches` SELECT from layers, each
    with a `_layer` column numbering the layer (higher is newer), the newest row of each key,
    without `_layer`."""
    by_key = ", ".join(quoted(k) for k in keys)
    return (
        f"SELECT * EXCLUDE (_layer) FROM ({' UNION ALL '.join(branches)}) "
        f"QUALIFY row_number() OVER (PARTITION BY {by_key} ORDER BY _layer DESC) = 1"
    )
