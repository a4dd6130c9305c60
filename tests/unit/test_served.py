"""Which stores a node's schema serves (gateway/cluster/served.py): those every node has
built, and of a store changed in place, the table its schema reads (contracts/generations.py)
before and after every node has the new generation built."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from contracts.generations import generation, of_tables
from contracts.project import Project, Store, load
from contracts.snapshot_file import rows_as
from gateway.cluster.served import read_tables, servable, store_read
from spark_pipeline.plan import built_by
from tests.projects import write_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(Path(tmp_path_factory.mktemp("s")), [1, 2, 3], partitions=3))


def changed(project: Project, name: str) -> tuple[Project, Store]:
    """The project with `name` declared otherwise (one more column kept: its rows change),
    and that declaration."""
    store = project.stores[name]
    other = dataclasses.replace(store, history_ms=store.history_ms + 1) if store.kind == "table" \
        else dataclasses.replace(store, aggregates=store.aggregates[:-1])  # fmt: skip
    return dataclasses.replace(project, stores=dict(project.stores, **{name: other})), other


def test_a_store_every_node_has_built_is_served_one_a_peer_lacks_is_not(
    project: Project,
) -> None:
    every = frozenset(project.stores)
    assert servable(project, every, [every, None]) == every
    assert servable(project, every, [every - {"hourlyRevenue"}]) == every - {"hourlyRevenue"}
    # a store whose join reads a store not served is not served either
    assert "latestBooking" not in servable(project, every, [every - {"timetable"}])


def test_the_schema_reads_the_new_generation_once_every_node_has_it_built(
    project: Project,
) -> None:
    file, declaration = changed(project, "customerTotals")
    tables = of_tables(file, built_by(project), ())
    new = generation(declaration).name
    assert set(tables.stores) == set(project.stores) | {new}
    declared = {name: rows_as(store) for name, store in file.stores.items()}
    every = frozenset(tables.stores)
    before = servable(tables, every, [every - {new}])  # a peer has not built it yet
    assert "customerTotals" in read_tables(tables, before, declared)
    assert new not in read_tables(tables, before, declared)
    after = servable(tables, every, [every])
    read = read_tables(tables, after, declared)
    assert new in read and "customerTotals" not in read
    assert len(read) == len(file.stores)  # one table a declared store
    removed = {n: d for n, d in declared.items() if n != "customerTotals"}
    assert not {new, "customerTotals"} & read_tables(tables, after, removed)


def test_a_join_is_served_whichever_generation_of_its_store_is_built(project: Project) -> None:
    file, declaration = changed(project, "timetable")
    tables = of_tables(file, built_by(project), ())
    new = generation(declaration).name
    every = frozenset(tables.stores)
    assert "latestBooking" in servable(tables, every, [every - {"timetable"}])
    assert "latestBooking" in servable(tables, every, [every - {new}])
    assert "latestBooking" not in servable(tables, every, [every - {new, "timetable"}])


def test_a_join_reads_the_table_the_schema_reads_of_its_store(project: Project) -> None:
    """Before the switch the old table, after it the new one, and once the old one is left
    out (no table named after the store any more) the new one still."""
    file, declaration = changed(project, "timetable")
    new = generation(declaration).name
    tables = of_tables(file, built_by(project), ())
    old_read = frozenset(tables.stores) - {new}
    assert store_read(tables, old_read, "timetable").name == "timetable"
    new_read = frozenset(tables.stores) - {"timetable"}
    assert store_read(tables, new_read, "timetable").name == new
    left_out = dataclasses.replace(
        tables, stores={n: s for n, s in tables.stores.items() if n != "timetable"}
    )
    assert store_read(left_out, new_read, "timetable").name == new
    assert store_read(left_out, frozenset(), "timetable").name == new
