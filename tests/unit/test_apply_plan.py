"""`stategate apply`'s plan from what the nodes say (stategate/applying.py): a store is to
add until every node has it built (a store changed in place: its new generation), to remove
while a node declares it; a node that says nothing of its stores, or a store made global, is
refused with the reason."""

from __future__ import annotations

import dataclasses

import pytest

from contracts.generations import generation
from contracts.manifest import Layer, Manifest, PartitionEntry
from contracts.project import Project, load
from contracts.snapshot_file import rows_as
from gateway.cluster.status import LiveCounts, NodeStatus
from spark_pipeline.plan import built_by
from stategate.applying import NotApplied, plan
from tests.projects import write_project


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Project:
    return load(write_project(tmp_path_factory.mktemp("apply"), [1, 2, 3]))


def status(project: Project, built: set[str], declared: set[str] | None = None) -> NodeStatus:
    names = set(project.stores) if declared is None else declared
    return NodeStatus(
        "n", {}, {}, 0, 0, LiveCounts(),
        stores=sorted(built), declared={n: rows_as(project.stores[n]) for n in names},
    )  # fmt: skip


def test_a_store_is_to_add_until_every_node_has_it_built(project: Project) -> None:
    every = set(project.stores)
    said = {"a": status(project, every), "b": status(project, every - {"hourlyRevenue"})}
    found = plan(project, said, Manifest())
    assert (found.added, found.removed) == (("hourlyRevenue",), ())
    assert plan(project, {"a": status(project, every)}, Manifest()).added == ()


def test_a_store_declared_by_a_node_and_not_by_the_file_is_to_remove(project: Project) -> None:
    fewer = dataclasses.replace(
        project, stores={n: s for n, s in project.stores.items() if n != "trainStatus"}
    )
    found = plan(fewer, {"a": status(project, set(project.stores))}, Manifest())
    assert (found.added, found.removed) == ((), ("trainStatus",))


def test_an_index_changed_is_not_a_store_changed(project: Project) -> None:
    """The index is the nodes' own (in memory): a store given another is no change of its rows."""
    totals = project.stores["customerTotals"]
    reindexed = dataclasses.replace(totals, index=("seats",))
    changed = dataclasses.replace(project, stores={**project.stores, "customerTotals": reindexed})
    found = plan(changed, {"a": status(project, set(project.stores))}, Manifest())
    assert (found.added, found.removed) == ((), ())


def test_a_store_changed_in_place_is_to_change_until_every_node_has_its_generation_built(
    project: Project,
) -> None:
    """Built beside the one read now, as a generation (contracts/generations.py): what the
    nodes must have built is that table, and the plan says how the change goes."""
    hourly = project.stores["hourlyRevenue"]
    wider = dataclasses.replace(hourly, window_size_ms=2 * hourly.window_size_ms)
    changed = dataclasses.replace(project, stores={**project.stores, "hourlyRevenue": wider})
    published = Manifest(built=built_by(project))
    every = set(project.stores)
    found = plan(changed, {"a": status(project, every)}, published)
    table = generation(wider).name
    assert (found.added, found.changed, found.removed) == (("hourlyRevenue",),) * 2 + ((),)
    assert found.tables["hourlyRevenue"] == table != "hourlyRevenue"
    assert "stores to change in place: hourlyRevenue" in found.lines()
    assert any(line.startswith("in place: each store changed is built") for line in found.lines())
    done = status(changed, every | {table})
    assert plan(changed, {"a": done}, published).added == ()
    unstated = dataclasses.replace(status(project, set()), declared=None)
    with pytest.raises(NotApplied, match="does not say what it declares"):
        plan(project, {"a": unstated}, Manifest())


def test_a_store_made_global_is_refused_with_the_way_to_change_it(project: Project) -> None:
    hourly = project.stores["hourlyRevenue"]
    moved = dataclasses.replace(hourly, scope="global")
    changed = dataclasses.replace(project, stores={**project.stores, "hourlyRevenue": moved})
    with pytest.raises(NotApplied, match="hourlyRevenue made global or partitioned: declare"):
        plan(
            changed, {"a": status(project, set(project.stores))}, Manifest(built=built_by(project))
        )


def test_the_plan_builds_only_the_stores_the_published_chains_lack(project: Project) -> None:
    """Built from the log: the store the chains were not built with, from the topic it reads."""
    fewer = {n: s for n, s in project.stores.items() if n != "hourlyRevenue"}
    published = Manifest(
        partitions={
            0: PartitionEntry((Layer(1, "base", "p000/v1", "", 2**20, {"bookings": 7}, 0),))
        },
        stores_digest="before",
        built=built_by(dataclasses.replace(project, stores=fewer)),
    )
    every = set(project.stores)
    found = plan(project, {"a": status(project, every - {"hourlyRevenue"})}, published)
    assert found.rebuild is not None and found.rebuild.stores == {"hourlyRevenue"}
    assert found.records == 7
    [building] = [line for line in found.lines() if line.startswith("building: ")]
    assert building.startswith(
        "building: the pipeline builds hourlyRevenue from the log (7 records of bookings read "
        "again) and folds every other store into a new base of each chain: about 1.0 MiB"
    ), building
