"""A base serves the declared stores it was built with (README: Changing stores): a store
declared since, or changed in place since, is not served from it, and the rest are. The
base is the pipeline's own (spark_pipeline/snapshot.py, without Spark)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import duckdb
import pytest

from contracts import chains
from contracts.project import Project, load
from contracts.snapshot_file import STORES_TABLE, FormatError, declared, relative_path
from gateway.storage.catalog.layers import LocalLayer
from gateway.storage.catalog.snapshots import SnapshotCatalog
from tests.chains import WrittenChain
from tests.projects import with_seats_by_customer, write_project

CHAIN = 1


def served_from_base(built_by: Project, node: Project, folder: Path) -> set[str]:
    """The stores a node declaring `node`'s serves from a base built by `built_by`'s."""
    written = WrittenChain(built_by, folder / "store", CHAIN).next_layer(0)
    catalog = SnapshotCatalog(folder / "node", node, 1, "256MB")
    try:
        path = catalog.folder / relative_path(CHAIN, written.version, written.kind)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(folder / "store" / written.path, path)
        installed = catalog.install(CHAIN, [LocalLayer(written.version, written.kind, path)])
        assert installed is not None
        return {s.name for s in installed.base.stores}
    finally:
        catalog.close()


def test_a_base_serves_only_the_stores_its_declarations_built(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    path = write_project(tmp_path / "p", [1, 2, 3], partitions=3)
    before = load(path)
    text = path.read_text()
    path.write_text(with_seats_by_customer(text.replace('size = "1h"', 'size = "2h"', 1)))
    after = load(path)
    assert (
        after.stores["hourlyRevenue"].window_size_ms
        == 2 * before.stores["hourlyRevenue"].window_size_ms
    )
    held = {s.name for s in chains.stores(before, CHAIN)}
    assert served_from_base(before, before, tmp_path / "same") == held
    changed = served_from_base(before, after, tmp_path / "changed")
    assert changed == held - {"hourlyRevenue"}, changed
    assert served_from_base(after, after, tmp_path / "rebuilt") == held | {"seatsByCustomer"}
    path.write_text(text.replace('index = ["revenue"]', 'index = ["seats"]', 1))
    reindexed = load(path)  # another index: the same rows, served from the same base
    assert reindexed.stores["customerTotals"].index == ("seats",)
    assert served_from_base(before, reindexed, tmp_path / "reindexed") == held


def test_a_base_holds_each_tables_declaration_whole(tmp_path: Path) -> None:
    """What a process that no longer declares a store needs to read and extend its table:
    the declaration read back from the base is the project's, joins aside."""
    project = load(write_project(tmp_path, [1, 2, 3], partitions=3))
    for chain in (CHAIN, chains.global_chain(project, CHAIN)):
        written = WrittenChain(project, tmp_path / f"store{chain}", chain).next_layer(0)
        with duckdb.connect(str(tmp_path / f"store{chain}" / written.path), read_only=True) as con:
            found = con.execute(f"SELECT name, declaration FROM {STORES_TABLE}").fetchall()
        stores = {s.name: s for s in chains.stores(project, chain)}
        assert {name for name, _ in found} == set(stores)
        for name, text in found:
            assert declared(text) == dataclasses.replace(stores[name], joins=()), name
    with pytest.raises(FormatError):
        declared('{"name": "s"}')
