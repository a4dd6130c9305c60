"""The `stores` and `cluster` queries: what can be asked, and who holds what."""

from __future__ import annotations

from enum import Enum

import strawberry

from gateway.cluster import status
from resolvers.schema.context import Context
from resolvers.schema.meta import ReplicaRole, TopicOffset
from resolvers.schema.scalars import Long


@strawberry.enum
class StoreKind(Enum):
    TABLE = "table"
    AGGREGATE = "aggregate"
    WINDOW = "window"


@strawberry.type(name="Column")
class ColumnInfo:
    name: str
    type: str


@strawberry.type(description="A declared state store and the fields that query it.")
class StoreInfo:
    name: str
    kind: StoreKind
    topic: str
    key_type: str
    window_size_ms: Long | None
    window_advance_ms: Long | None
    columns: list[ColumnInfo]
    is_global: bool = strawberry.field(
        name="global", description="Every node holds all of it and answers it alone."
    )
    joins: list[JoinInfo]


@strawberry.type(
    name="Join", description="A field of a store's records holding the record of a global store."
)
class JoinInfo:
    name: str
    store: str = strawberry.field(description="The global store joined.")
    field: str = strawberry.field(description="The field whose value is its key.")


@strawberry.type
class Replica:
    node: str
    address: str
    role: ReplicaRole
    alive: bool
    version: int | None
    position: list[TopicOffset]
    lag: Long | None = strawberry.field(
        description="Offsets behind the log end (all topics), null when unknown."
    )


@strawberry.type(name="PartitionInfo")
class PartitionReplicas:
    partition: int
    replicas: list[Replica]
    warming: list[Replica] = strawberry.field(
        description="Copies being made for a move (role WARMING): each serves once caught up "
        "with the active, and only then does the replica it replaces stop serving."
    )


@strawberry.type
class NodeInfo:
    id: str
    address: str
    release: str | None = strawberry.field(
        description="What the node runs (the package's version, +g and the commit from a "
        "checkout); null until it said."
    )
    schema_version: str | None = strawberry.field(
        description="The version of the schema it serves (its SDL's SHA-256, 12 digits): "
        "nodes that differ serve different store declarations; null until it said."
    )


@strawberry.type(description="The partition map as the answering node sees it.")
class ClusterInfo:
    node: str = strawberry.field(description="The node that answered this query.")
    partitions_count: int
    replicas: int
    nodes: list[NodeInfo]
    partitions: list[PartitionReplicas]
    assignment_version: int = strawberry.field(
        description="The placement this node routes by: 0 is the project file's; an elastic "
        "cluster's grows with each change its leader makes."
    )
    coordinator: str | None = strawberry.field(
        description="Where an elastic cluster keeps membership and placement; null: static."
    )
    leader: str | None = strawberry.field(description="The node placing partitions, if any.")


def stores(info: strawberry.Info[Context, None]) -> list[StoreInfo] | None:
    info.context.authorize("stores")
    return [
        StoreInfo(
            name=s.declared_name,
            kind=StoreKind(s.kind),
            topic=s.topic.name,
            key_type=s.key_type,
            window_size_ms=Long(s.window_size_ms) if s.window_size_ms else None,
            window_advance_ms=Long(s.window_advance_ms) if s.window_advance_ms else None,
            columns=[ColumnInfo(name=n, type=t) for n, t in s.columns.items()],
            is_global=s.is_global,
            joins=[JoinInfo(name=j.name, store=j.store, field=j.field) for j in s.joins],
        )
        for s in info.context.node.project.stores.values()
        if s.name in info.context.node.served
    ]


def cluster(info: strawberry.Info[Context, None]) -> ClusterInfo | None:
    info.context.authorize("cluster")
    partition_map = info.context.node.partition_map()
    return ClusterInfo(
        node=partition_map.node,
        partitions_count=partition_map.partitions_count,
        replicas=partition_map.replicas,
        nodes=[
            NodeInfo(id=i, address=a, release=release, schema_version=schema)
            for i, a in partition_map.nodes.items()
            for release, schema in [partition_map.said(i)]
        ],
        partitions=[
            PartitionReplicas(
                partition=p.partition,
                replicas=[_replica(p.partition, r, _role(r)) for r in p.replicas],
                warming=[_replica(p.partition, r, ReplicaRole.WARMING) for r in p.warming],
            )
            for p in partition_map.partitions
        ],
        assignment_version=partition_map.assignment_version,
        coordinator=partition_map.coordinator,
        leader=partition_map.leader,
    )


def _role(replica: status.ReplicaInfo) -> ReplicaRole:
    return ReplicaRole.ACTIVE if replica.active else ReplicaRole.STANDBY


def _replica(partition: int, r: status.ReplicaInfo, role: ReplicaRole) -> Replica:
    return Replica(
        node=r.node,
        address=r.address,
        role=role,
        alive=r.alive,
        version=r.version,
        position=[
            TopicOffset(topic=t, partition=partition, offset=Long(o))
            for t, o in sorted(r.position.items())
        ],
        lag=None if r.lag is None else Long(r.lag),
    )
