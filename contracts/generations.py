"""Generations: the tables of one store's declarations, while a declaration changed in place
replaces the one built before it (README: Changing stores).

A store's first declaration is built as the table named after the store. A declaration that
replaces a built one is built beside it, as a generation: a table named after the store and
the digest of its rows' declaration (`<store>_g<digest>`; declared names have no "_", so no
store's name is a generation's). To the pipeline a generation is a store of its own: a new
one is built from the log as an added store is, and the generation before it is folded
forward as any unchanged store, until every node serves the new one and it is left out, as a
removed store is. A Store of a generation says whose (`Store.generation_of`), and digests as
its declaration (contracts/snapshot_file.py: rows_as), whatever its table.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Iterable, Mapping

from contracts.conditions import KEY
from contracts.manifest import Built
from contracts.project import Project, Store
from contracts.snapshot_file import declared, rows_as

MARK = "_g"
DIGITS = 8


def generation(store: Store) -> Store:
    """A declaration built beside the one built before it: its table named by its digest."""
    declared = store.declared_name
    table = f"{declared}{MARK}{rows_as(store)[:DIGITS]}"
    return dataclasses.replace(store, name=table, generation_of=declared)


def tables(
    declared: Iterable[Store], built: Mapping[str, Store], serving: Collection[str]
) -> dict[str, Store]:
    """Every table the declared stores need, by table name, given the tables built (each
    with the declaration that built it, as a base's `_stores` gives it) and those a node
    still serves. A store's table is the one built by its declaration (its own, or a
    generation); else, when another declaration of the store is built, a new generation;
    else its own, to build. The store's other tables stay while the new one is not built,
    and while a node still serves them."""
    needed: dict[str, Store] = {}
    for store in declared:
        digest = rows_as(store)
        earlier = [t for t in built.values() if t.declared_name == store.declared_name]
        found = next((t for t in earlier if rows_as(t) == digest), None)
        if found is not None:
            current = dataclasses.replace(store, name=found.name, generation_of=found.generation_of)
        else:
            current = generation(store) if earlier else store
        needed[current.name] = current
        needed |= {
            t.name: _joining(t, store)
            for t in earlier
            if t.name != current.name and (found is None or t.name in serving)
        }
    return needed


def _joining(table: Store, store: Store) -> Store:
    """A generation before the file's, with the file's joins (read at query time, so not in
    its declaration) of the fields it has."""
    fields = {KEY, *table.columns}
    return dataclasses.replace(table, joins=tuple(j for j in store.joins if j.field in fields))


def built_tables(built: Built | None) -> dict[str, Store]:
    """The tables the chains hold, each with the declaration that built it (none from a
    manifest written before it said them)."""
    if built is None:
        return {}
    return {table: declared(text) for table, text in built.declarations.items()}


def kept(project: Project, built: Built | None) -> Project:
    """The project of tables a node opens: those its declared stores need, with every
    generation the chains hold still (the pipeline leaves one out once no node reads it)."""
    return of_tables(project, built, frozenset(built.declarations) if built else frozenset())


def of_tables(project: Project, built: Built | None, serving: Collection[str]) -> Project:
    """The project whose stores are the tables its declared stores need (`tables`): what the
    pipeline builds and extends."""
    return dataclasses.replace(
        project, stores=tables(project.stores.values(), built_tables(built), serving)
    )
