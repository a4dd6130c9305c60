"""The `stores` and `cluster` queries: what can be asked, and who holds what."""

from __future__ import annotations

from enum import Enum

import strawberry

from resolvers.schema.context import Context
from resolvers.schema.meta import ReplicaRole, TopicOffset
from resolvers.schema.scalars import Long


@strawberry.enum
class StoreKind(Enum):
    TABLE = "table"
    AGGREGATE = "aggregate"
    WINDOW = "window"


@strawberry.type
class Column:
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
    columns: list[Column]


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


@strawberry.type
class PartitionInfo:
    partition: int
    replicas: list[Replica]


@strawberry.type
class NodeInfo:
    id: str
    address: str


@strawberry.type(description="The partition map as the answering node sees it.")
class ClusterInfo:
    node: str = strawberry.field(description="The node that answered this query.")
    partitions_count: int
    replicas: int
    nodes: list[NodeInfo]
    partitions: list[PartitionInfo]


def stores(info: strawberry.Info[Context, None]) -> list[StoreInfo] | None:
    info.context.authorize("stores")
    return [
        StoreInfo(
            name=s.name,
            kind=StoreKind(s.kind),
            topic=s.topic.name,
            key_type=s.key_type,
            window_size_ms=Long(s.window_size_ms) if s.window_size_ms else None,
            window_advance_ms=Long(s.window_advance_ms) if s.window_advance_ms else None,
            columns=[Column(name=n, type=t) for n, t in s.columns.items()],
        )
        for s in info.context.node.project.stores.values()
    ]


def cluster(info: strawberry.Info[Context, None]) -> ClusterInfo | None:
    info.context.authorize("cluster")
    partition_map = info.context.node.partition_map()
    return ClusterInfo(
        node=partition_map.node,
        partitions_count=partition_map.partitions_count,
        replicas=partition_map.replicas,
        nodes=[NodeInfo(id=i, address=a) for i, a in partition_map.nodes.items()],
        partitions=[
            PartitionInfo(
                partition=p.partition,
                replicas=[
                    Replica(
                        node=r.node,
                        address=r.address,
                        role=ReplicaRole.ACTIVE if r.active else ReplicaRole.STANDBY,
                        alive=r.alive,
                        version=r.version,
                        position=[
                            TopicOffset(topic=t, partition=p.partition, offset=Long(o))
                            for t, o in sorted(r.position.items())
                        ],
                        lag=None if r.lag is None else Long(r.lag),
                    )
                    for r in p.replicas
                ],
            )
            for p in partition_map.partitions
        ],
    )
