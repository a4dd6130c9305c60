"""Who serves what, and where: an Assignment (contracts/placement.py) and the members'
addresses. A static [[cluster.nodes]] file is one fixed Topology (`static`); an elastic
cluster's coordinator hands a node a new one whenever the assignment or the members change.
Routing, delivery and the partition map read the one a node holds now.

A node that cannot tell whether its coordinator session still holds (its lease may have
expired while it was cut off) holds its last topology `fenced` for itself: it serves what it
has, with its true positions, but as nobody's active, until it reads the assignment again.

An assignment that places a node nowhere, and not for a drain, was made while the node was
away (its lease expired, or it had not joined yet): what it takes away from the node may be
given back once the leader knows the node is back (`away`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from contracts import placement
from contracts.placement import Assignment, Nodes
from contracts.project import Cluster


@dataclass(frozen=True)
class Topology:
    assignment: Assignment
    addresses: Mapping[str, str]  # node id -> host:port, of every member known
    fenced: frozenset[str] = frozenset()  # nodes not to be taken for any partition's active
    draining: frozenset[str] = frozenset()  # nodes asked to leave (`stategate cluster drain`)
    scheme: str = "http"  # how members are called: https with [tls]

    @classmethod
    def static(cls, cluster: Cluster) -> Topology:
        addresses = {n.id: n.address for n in cluster.nodes}
        return cls(cluster.assignment, addresses, scheme=cluster.scheme)

    @classmethod
    def unassigned(cls, cluster: Cluster, addresses: Mapping[str, str]) -> Topology:
        """An elastic node's topology before it read the first assignment: nothing placed."""
        none: placement.Placement = ((),) * cluster.partitions
        empty = Assignment(0, cluster.replicas, none, none, none)
        return cls(empty, dict(addresses), scheme=cluster.scheme)

    @property
    def version(self) -> int:
        return self.assignment.version

    def replicas(self, partition: int) -> Nodes:
        """The partition's serving replicas, the active first; () when it has none."""
        serving = self.assignment.serving
        return serving[partition] if 0 <= partition < len(serving) else ()

    def active(self, partition: int) -> str | None:
        replicas = self.replicas(partition)
        return replicas[0] if replicas and replicas[0] not in self.fenced else None

    def fence(self, node: str) -> Topology:
        """This topology with `node` nobody's active."""
        return dataclasses.replace(self, fenced=self.fenced | {node})

    def hosted_by(self, node: str) -> list[int]:
        """The partitions `node` serves."""
        return self.assignment.hosted_by(node)

    def assigned_to(self, node: str) -> list[int]:
        """The partitions `node` holds: those it serves and those it warms up."""
        return self.assignment.assigned_to(node)

    def away(self, node: str) -> bool:
        """Whether the assignment was made without `node`: its target places the node nowhere,
        and the node is not draining."""
        return node not in self.draining and not self.assignment.placed(node)

    def url(self, node: str) -> str:
        return f"{self.scheme}://{self.addresses[node]}"

    def nodes(self) -> list[str]:
        return sorted(self.addresses)
