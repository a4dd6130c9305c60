"""Chains: where each partition's state is kept, by id.

A partition's state is a chain of layers (contracts/snapshot_file.py). Partition p of the
partitioned stores is chain p, held by the nodes placement gives p to. When the project
declares global stores, partition p of those is chain `partitions + p`, held by every node:
a global store's lookups never leave the node. Both chains of a partition are written by the
same task at the same positions, published by the same manifest, and compacted alike, so an
answer from either states the partition's positions. The manifest, the snapshot store and a
node's folders name chains by id; placement, routing and answers name partitions.
"""

from __future__ import annotations

from collections.abc import Iterable

from contracts.project import Project, Store


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
    """The stores a chain holds."""
    return project.global_stores if is_global(project, chain) else project.partitioned_stores


def held(project: Project, assigned: Iterable[int]) -> list[int]:
    """The chains a node holds: those of the partitions placement gives it, and every
    global one."""
    return sorted({*assigned, *global_chains(project)})
