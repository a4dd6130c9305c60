"""Paths go into DuckDB's ATTACH as literals: a folder with a quote in its name is a folder."""

from __future__ import annotations

from pathlib import Path

import duckdb

from contracts.snapshot_file import literal


def test_a_path_with_quotes_attaches(tmp_path: Path) -> None:
    folder = tmp_path / 'it\'s "here"'
    folder.mkdir()
    path = folder / "v000001.base.duckdb"
    with duckdb.connect(str(path)) as writer:
        writer.execute("CREATE TABLE t AS SELECT 42 AS x")
    with duckdb.connect() as reader:
        reader.execute(f"ATTACH {literal(str(path))} AS snap (READ_ONLY)")
        assert reader.execute("SELECT x FROM snap.t").fetchall() == [(42,)]
