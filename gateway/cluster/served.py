"""Which declared stores a node's schema serves (README: Changing stores).

A store declared while the cluster runs is built by the pipeline after the fact, chain by
chain, and each node declares it once its project file says so. A node serves it in its
schema only when every node it knows of has it built on every chain it serves (each says so
in its status: NodeStatus.stores), so a query on it is never sent to a replica that cannot
answer it: until then the node answers the schema it had. A store whose join reads a store
not served is not served either. What a node serves only grows while it runs, but for the
stores its project file no longer declares (a reload that removes them): a node that joins
without a store does not take it from the schema of those that serve it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from contracts.project import Project, Store
from contracts.snapshot_file import rows_as


def servable(
    project: Project, built_here: Iterable[str], peers: Iterable[frozenset[str] | None]
) -> frozenset[str]:
    """The declared stores that this node (`built_here`) and every peer has built; a peer
    that said nothing (None: never reached, or of a release before statuses said it) is not
    counted."""
    found = set(project.stores) & set(built_here)
    for theirs in peers:
        if theirs is not None:
            found &= theirs
    while unjoinable := {
        name
        for name in found
        if any(j.store not in _declared_names(project, found) for j in project.stores[name].joins)
    }:
        found -= unjoinable
    return frozenset(found)


def read_tables(
    project: Project, servable: frozenset[str], declared: Mapping[str, str]
) -> frozenset[str]:
    """The tables the schema reads, one per declared store (contracts/generations.py): the
    table of the store's declaration in the file (`declared`: name -> rows_as) once every
    node has it built, else the table of the declaration before it, while they all still
    have that one."""
    chosen: dict[str, str] = {}
    for table in sorted(servable):
        store = project.stores[table]
        name = store.declared_name
        if name in declared and (name not in chosen or rows_as(store) == declared[name]):
            chosen[name] = table
    return frozenset(chosen.values())


def store_read(project: Project, read: Iterable[str], name: str) -> Store:
    """The table of the declared store `name` among those the schema reads (`read`); else
    one of its tables, when the schema reads none (a join whose store it does not serve is
    not served either: `servable`)."""
    tables = [project.stores[t] for t in read if t in project.stores]
    found = [s for s in tables if s.declared_name == name]
    return (
        found[0] if found else next(s for s in project.stores.values() if s.declared_name == name)
    )


def _declared_names(project: Project, tables: Iterable[str]) -> set[str]:
    return {project.stores[t].declared_name for t in tables}
