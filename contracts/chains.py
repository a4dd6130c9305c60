"""Chains: where each partition's state is kept, by id.

A partition's state is a chain of layers (contracts/snapshot_file.py). Partition p of the
partitioned stores is chain p, held by the nodes placement gives p to. When the project
declares global stores, partition p of those is chain `partitions + p`, held by every node:
a global store's lookups never leave the node.

A chain carries the positions of the topics its stores read (`topics`): it gets a layer
when one of them has new records, and its answers state where it is in them and nothing
else. A topic both kinds of store read is in both chains of its partitions, which the same
task extends at once, so their positions in it agree. The manifest, the snapshot store and a
node's folders name chains by id; placement, routing and answers name partitions.
"""

from __future__ import annotations

from collections.abc import Iterable

from contracts.manifest import Manifest
from contracts.project import Project, Store, history_of


def count(project: Project) -> int:
    """How many chains the project keeps: a partition's one, or two with global stores."""
    partitions = project.cluster.partitions
    return 2 * partitions if project.global_stores else partitions


def of(project: Project, store: Store, partition: int) -> int:
    """The chain holding a partition of a store."""
    return global_chain(project, partition) if store.is_global else partition


def global_chain(project: Project, partition: int) -> int:
    """The chain of a partition's global stores."""
    return project.cluster.partitions + partition


def of_partition(project: Project, partition: int) -> list[int]:
    """A partition's chains: its own, and its global stores' when there are any."""
    if not project.global_stores:
        return [partition]
    return [partition, global_chain(project, partition)]


def global_chains(project: Project) -> list[int]:
    """The chains every node holds: the global stores' partitions (none without them)."""
    partitions = project.cluster.partitions
    return list(range(partitions, count(project)))


def partition(project: Project, chain: int) -> int:
    """The partition whose state a chain holds."""
    return chain % project.cluster.partitions


def is_global(project: Project, chain: int) -> bool:
    return chain >= project.cluster.partitions


def stores(project: Project, chain: int) -> tuple[Store, ...]:
    """The stores a chain's layers hold: the declared ones, then each versioned table's
    history."""
    declared = project.global_stores if is_global(project, chain) else project.partitioned_stores
    return (*declared, *(history_of(s) for s in declared if s.versioned))


def every_store(project: Project) -> tuple[Store, ...]:
    """The stores the chains hold, of every kind of chain: each declared store, then each
    versioned table's history."""
    declared = tuple(project.stores.values())
    return (*declared, *(history_of(s) for s in declared if s.versioned))


def held(project: Project, assigned: Iterable[int]) -> list[int]:
    """The chains a node holds: those of the partitions placement gives it, and every
    global one."""
    return sorted({*assigned, *global_chains(project)})


def topics(project: Project, chain: int) -> tuple[str, ...]:
    """The topics whose positions a chain carries: those its stores read. A partition's own
    chain also carries every topic no global store reads, so that each topic's position is
    kept in some chain, whether a store reads it or not."""
    read_globally = {s.topic.name for s in project.global_stores}
    if is_global(project, chain):
        return tuple(t for t in project.topics if t in read_globally)
    read_here = {s.topic.name for s in project.partitioned_stores}
    return tuple(t for t in project.topics if t in read_here or t not in read_globally)


def counted(project: Project, chain: int) -> tuple[str, ...]:
    """The topics whose new records a chain's layers count by append time (freshness): its
    topics but those its partition's own chain carries too, so that a record is counted
    once however many chains read it."""
    own = topics(project, partition(project, chain))
    if not is_global(project, chain):
        return own
    return tuple(t for t in topics(project, chain) if t not in own)


def position(project: Project, manifest: Manifest, partition: int) -> dict[str, int]:
    """How far a partition's records are published, per topic: from the chain carrying it
    (0 before any is)."""
    found = dict.fromkeys(project.topics, 0)
    for chain in of_partition(project, partition):
        entry = manifest.partitions.get(chain)
        if entry is not None:
            found.update(entry.position)
    return found
