"""The snapshot file: one DuckDB file per (partition, version) holding every store.

Tables (identifiers quoted):
- one per store, named by the store: `key` (VARCHAR | INTEGER | BIGINT), for a window store
  `window_start BIGINT` (epoch ms), then Store.stored_columns in order (an avg is kept as its
  sum and count, so that versions merge); rows ordered by key (, window_start) so zone maps
  prune lookups. Tombstoned table keys are absent.
- `_position(topic VARCHAR, partition INTEGER, "offset" BIGINT)`: per topic, the next offset
  to read in this partition.
- `_snapshot(partition INTEGER, version BIGINT, created_ms BIGINT, format INTEGER)`: one row.

A version's file lives at the same relative path in the snapshot store and on every node that
hosts it, `p<partition>/v<version>.duckdb`, and a path is never reused.
"""

from __future__ import annotations

import re

from contracts.project import FieldType, Store

FORMAT = 1
POSITION_TABLE = "_position"
SNAPSHOT_TABLE = "_snapshot"
DUCK_TYPES: dict[FieldType, str] = {
    "string": "VARCHAR",
    "int": "INTEGER",
    "long": "BIGINT",
    "double": "DOUBLE",
    "boolean": "BOOLEAN",
}
_PATH = re.compile(r"^p(\d+)/v(\d+)\.duckdb$")
_VERSION_FILE = re.compile(r"^v(\d+)\.duckdb$")


class FormatError(ValueError):
    """A snapshot file or manifest written in a format this version does not read."""


def relative_path(partition: int, version: int) -> str:
    """Where one version lives, relative to the store folder or a node's snapshot folder."""
    return f"{partition_folder(partition)}/v{version:06d}.duckdb"


def partition_folder(partition: int) -> str:
    return f"p{partition:03d}"


def parse_path(relative: str) -> tuple[int, int] | None:
    """(partition, version) of a relative path written by relative_path, else None."""
    match = _PATH.match(relative)
    return (int(match.group(1)), int(match.group(2))) if match else None


def version_of(file_name: str) -> int | None:
    """The version of a file in a partition folder, else None."""
    match = _VERSION_FILE.match(file_name)
    return int(match.group(1)) if match else None


def check_format(found: object, what: str) -> None:
    if found != FORMAT:
        raise FormatError(f"{what} has format {found!r}; this version reads format {FORMAT}")


def key_columns(store: Store) -> list[str]:
    return ["key", "window_start"] if store.kind == "window" else ["key"]


def columns(store: Store) -> dict[str, str]:
    """The store table's columns and their DuckDB types, in order."""
    typed = {"key": DUCK_TYPES[store.key_type]}
    if store.kind == "window":
        typed["window_start"] = "BIGINT"
    typed.update({name: DUCK_TYPES[kind] for name, kind in store.stored_columns.items()})
    return typed
