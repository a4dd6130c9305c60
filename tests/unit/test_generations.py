"""Generations (contracts/generations.py): which tables a project's stores need while a
declaration changed in place replaces the one built before it, and how they are named and
digested."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from contracts.generations import MARK, generation, of_tables, tables
from contracts.manifest import Layer, Manifest, PartitionEntry
from contracts.project import Project, Store, history_of, load
from contracts.snapshot_file import declaration, declared, rows_as
from spark_pipeline.plan import built_by, stores_digest, to_rebuild
from tests.projects import write_project

HOUR_MS = 3_600_000


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(Path(tmp_path_factory.mktemp("g")), [1, 2, 3], partitions=3))


def resized(store: Store) -> Store:
    """The window store declared with windows twice as long: its rows change."""
    size = store.window_size_ms * 2
    return dataclasses.replace(store, window_size_ms=size, window_advance_ms=size)


def test_a_store_never_built_or_built_by_its_declaration_keeps_its_own_table(
    project: Project,
) -> None:
    stores = list(project.stores.values())
    assert tables(stores, {}, ()) == {s.name: s for s in stores}
    built = {s.name: s for s in stores}
    assert tables(stores, built, ()) == built
    sorted_again = dataclasses.replace(project.stores["customerTotals"], index=("seats",))
    assert tables([sorted_again], built, ()) == {"customerTotals": sorted_again}  # rows alike


def test_a_store_changed_in_place_is_built_as_a_generation_beside_the_old(
    project: Project,
) -> None:
    old = project.stores["hourlyRevenue"]
    new = resized(old)
    needed = tables([new], {old.name: old}, ())
    (table,) = set(needed) - {old.name}
    assert table == f"hourlyRevenue{MARK}{rows_as(new)[:8]}"
    assert needed[old.name] == old  # kept: nothing serves the new one yet
    assert needed[table].generation_of == "hourlyRevenue"
    assert needed[table].declared_name == "hourlyRevenue"
    assert rows_as(needed[table]) == rows_as(new)  # digested as its declaration
    assert "_" not in "".join(project.stores)  # so no declared name is a generation's


def test_the_old_generation_stays_while_a_node_serves_it_and_a_return_finds_it(
    project: Project,
) -> None:
    old = project.stores["hourlyRevenue"]
    new = generation(resized(old))
    built = {old.name: old, new.name: new}
    assert tables([resized(old)], built, {old.name}) == built
    assert tables([resized(old)], built, ()) == {new.name: new}
    again = resized(resized(old))
    newer = tables([again], {new.name: new}, {new.name})
    assert set(newer) == {new.name, generation(again).name}
    back = tables([old], built, {new.name})  # the old declaration again: its table is there
    assert back == built


def test_a_generations_history_and_its_declaration_round_trip(project: Project) -> None:
    versioned = project.stores["trainHistory"]
    changed = dataclasses.replace(versioned, history_ms=versioned.history_ms + HOUR_MS)
    made = generation(changed)
    history = history_of(made)
    assert history.name == f"{made.name}_history"
    assert history.generation_of == "trainHistory_history"
    assert rows_as(history) == rows_as(history_of(changed))
    assert declared(declaration(made)) == made


def published(project: Project) -> Manifest:
    """A manifest of chains built by `project`'s declarations."""
    base = Layer(1, "base", "p000/v1", "", 2**20, {"bookings": 7, "trips": 3, "trains": 5}, 0)
    return Manifest(
        partitions={0: PartitionEntry((base,))},
        stores_digest=stores_digest(project),
        built=built_by(project),
    )


def test_the_pipeline_builds_a_new_generation_folds_the_old_then_leaves_it_out(
    project: Project,
) -> None:
    """A window resized in place: the new generation is built from the log, the old one is
    folded as an unchanged store, and once no node serves it the next bases leave it out."""
    stores = dict(project.stores, hourlyRevenue=resized(project.stores["hourlyRevenue"]))
    changed = dataclasses.replace(project, stores=stores)
    before = published(project)
    tables_now = of_tables(changed, before.built, ())
    new = generation(stores["hourlyRevenue"])
    assert set(tables_now.stores) == set(project.stores) | {new.name}
    rebuild = to_rebuild(tables_now, before)
    assert rebuild is not None
    assert rebuild.stores == {new.name} and rebuild.topics == {"bookings"}
    after = published(tables_now)  # both generations built
    assert Manifest.from_json(after.to_json()).built == after.built  # declarations kept
    assert to_rebuild(of_tables(changed, after.built, {"hourlyRevenue"}), after) is None
    switched = of_tables(changed, after.built, ())  # no node serves the old one
    assert set(switched.stores) == set(project.stores) - {"hourlyRevenue"} | {new.name}
    left_out = to_rebuild(switched, after)
    assert left_out is not None and left_out.stores == frozenset()  # folded, the old left out
