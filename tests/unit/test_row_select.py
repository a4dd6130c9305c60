"""A store's served columns computed in Arrow (a delta's tables in memory) equal the same
columns in DuckDB's SQL (the snapshot files): avg from its parts with a zero count as null,
a double that is not finite as null, the other columns as stored."""

from __future__ import annotations

import math
import random
from pathlib import Path

import duckdb
import pytest

from contracts.project import Project, load
from gateway.storage.memory.row_select import columns, served
from tests.projects import write_project
from tests.unit.test_delta_file import frame


@pytest.fixture
def project(tmp_path: Path) -> Project:
    return load(write_project(tmp_path, [1, 2, 3], partitions=3))


def same(a: object, b: object) -> bool:
    return (a != a and b != b) or a == b or (isinstance(a, float) and math.isclose(a, b))  # type: ignore[arg-type]


def test_served_in_arrow_is_the_sql_select(project: Project) -> None:
    rng = random.Random(11)
    with duckdb.connect() as con:
        for store in project.stores.values():
            for _ in range(20):
                table = frame(store, rng.choice([0, 1, 40]), rng)
                con.register("stored", table)
                expected = con.sql(f"SELECT {', '.join(columns(store))}, _deleted FROM stored")
                got = served(store, table)
                assert got.column_names == expected.columns
                for want, row in zip(expected.fetchall(), got.to_pylist(), strict=True):
                    values = list(row.values())
                    assert all(same(a, b) for a, b in zip(values, want, strict=True)), (row, want)
