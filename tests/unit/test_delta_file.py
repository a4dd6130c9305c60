"""A delta file (contracts/delta_file.py) as the pipeline writes it and a node reads it: what
goes in comes out, and a file that is not a delta of this format, cut short, or of another
shape is refused with a clear error (never an Arrow exception or a crash), so a node keeps
serving its last version."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from contracts.delta_file import (
    DeltaFileError,
    DeltaHeader,
    newest,
    read_delta,
    schema,
    write_delta,
)
from contracts.project import Project, Store, load
from contracts.snapshot_file import FORMAT, FormatError, key_columns, newest_rows, relative_path
from gateway.storage.catalog.layers import LayerError, LocalLayer, read_deltas
from tests.projects import write_project

PARTITION = 2
KEYS: dict[pa.DataType, Callable[[int], object]] = {
    pa.string(): lambda n: f"k{n:07d}",
    pa.int32(): lambda n: n - 500_000,
    pa.int64(): lambda n: n * 3_600_000,
}
VALUES: dict[pa.DataType, Callable[[random.Random], object]] = {
    pa.string(): lambda r: "".join(r.choice("ab'\"é\u00a0𝄞") for _ in range(r.randrange(9))),
    pa.int32(): lambda r: r.randrange(-(2**31), 2**31),
    pa.int64(): lambda r: r.choice([0, 1, r.randrange(-(2**63), 2**63)]),
    pa.float64(): lambda r: r.choice(
        [r.uniform(-1e9, 1e9), math.inf, -math.inf, 0.0]
    ),  # a sum may overflow
    pa.bool_(): lambda r: r.random() < 0.5,
}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return load(write_project(tmp_path, [1, 2, 3], partitions=3))


def frame(store: Store, rows: int, rng: random.Random, keys: int = 10**6) -> pa.Table:
    """`rows` random rows of the store's delta shape, some values null, keys (and window
    starts) of `keys` values, unique and sorted by key."""
    columns = {}
    identity = key_columns(store)
    for field in schema(store):
        make = VALUES[field.type]
        if field.name in identity:
            values = [KEYS[field.type](rng.randrange(keys)) for _ in range(rows)]
        else:
            values = [None if rng.random() < 0.1 else make(rng) for _ in range(rows)]
        columns[field.name] = pa.array(values, field.type)
    table = pa.table(columns, schema=schema(store))
    table = table.sort_by([(k, "ascending") for k in identity])
    unique = pa.TableGroupBy(table.append_column("_row", pa.array(range(rows))), identity)
    first = unique.aggregate([("_row", "min")]).column("_row_min")
    return table.take(pc.sort_indices(first))


def written(project: Project, folder: Path, seed: int, version: int = 7) -> tuple[Path, dict]:
    rng = random.Random(seed)
    frames = {s.name: frame(s, rng.choice([0, 1, 50]), rng) for s in project.stores.values()}
    path = folder / relative_path(PARTITION, version, "delta")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_delta(path, DeltaHeader(PARTITION, version, 1234, {"bookings": 99}), frames)
    return path, frames


def test_a_delta_reads_back_as_written(project: Project, tmp_path: Path) -> None:
    for seed in range(20):
        path, frames = written(project, tmp_path, seed)
        header, read = read_delta(path)
        assert header == DeltaHeader(PARTITION, 7, 1234, {"bookings": 99}, "delta", FORMAT)
        assert read == frames


def test_a_node_refuses_a_delta_cut_short_anywhere(project: Project, tmp_path: Path) -> None:
    path, _ = written(project, tmp_path, 1)
    whole = path.read_bytes()
    stores = list(project.stores.values())
    for cut in sorted({*range(0, len(whole), max(1, len(whole) // 60)), len(whole) - 1}):
        path.write_bytes(whole[:cut])
        with pytest.raises(LayerError):
            read_deltas("o", [LocalLayer(7, "delta", path)], PARTITION, stores)


def test_a_node_refuses_a_delta_of_another_partition_version_or_shape(
    project: Project, tmp_path: Path
) -> None:
    path, frames = written(project, tmp_path, 2)
    stores = list(project.stores.values())
    for partition, version in [(PARTITION + 1, 7), (PARTITION, 8)]:
        with pytest.raises(LayerError, match="its header says"):
            read_deltas("o", [LocalLayer(version, "delta", path)], partition, stores)
    first = stores[0].name
    for changed in (
        {k: v for k, v in frames.items() if k != first},  # a store missing
        {**frames, first: frames[first].drop_columns(["_deleted"])},  # a column missing
    ):
        write_delta(path, DeltaHeader(PARTITION, 7, 1, {}), changed)
        with pytest.raises(LayerError, match=repr([first])[1:-1]):
            read_deltas("o", [LocalLayer(7, "delta", path)], PARTITION, stores)


def test_a_delta_of_another_format_is_named_as_such(project: Project, tmp_path: Path) -> None:
    path, frames = written(project, tmp_path, 3)
    write_delta(path, DeltaHeader(PARTITION, 7, 1, {}, format=FORMAT + 1), frames)
    with pytest.raises(FormatError, match=f"format {FORMAT + 1}"):
        read_delta(path)
    path.write_bytes(b"SQLite format 3\x00" + bytes(200))
    with pytest.raises(DeltaFileError):
        read_delta(path)


def test_the_newest_row_of_each_key_in_arrow_is_the_chain_rule_in_sql(project: Project) -> None:
    rng = random.Random(5)
    with duckdb.connect() as con:
        for store in project.stores.values():
            keys = key_columns(store)
            for _ in range(10):
                tables = [frame(store, rng.choice([0, 1, 30]), rng, 40) for _ in range(3)]
                for i, table in enumerate(tables):
                    con.register(f"t{i}", table)
                branches = [f"SELECT *, {i} AS _layer FROM t{i}" for i in range(len(tables))]
                order = ", ".join(f'"{k}"' for k in keys)
                sql = f"{newest_rows(branches, keys)} ORDER BY {order}"
                expected = con.sql(sql).to_arrow_table()
                assert newest(tables, keys).to_pylist() == expected.to_pylist(), store.name
