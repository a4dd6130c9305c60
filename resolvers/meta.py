"""Position metadata every result carries (KIP-796): which partitions answered, from which
node and replica, at which position, and why the others did not."""

from __future__ import annotations

from enum import Enum

import strawberry

from gateway.config import Cluster
from gateway.merging import merged_position
from gateway.positions import Position, encode_token, merge
from gateway.protocol import Answer, SubQuery
from resolvers.scalars import Long


@strawberry.enum(description="Why a partition could not answer (KIP-796, plus NODE_UNAVAILABLE).")
class FailureReason(Enum):
    NOT_PRESENT = "NOT_PRESENT"
    NOT_ACTIVE = "NOT_ACTIVE"
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"
    DOES_NOT_EXIST = "DOES_NOT_EXIST"
    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"
    STORE_EXCEPTION = "STORE_EXCEPTION"
    NODE_UNAVAILABLE = "NODE_UNAVAILABLE"


@strawberry.enum
class ReplicaRole(Enum):
    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"


@strawberry.type(description="The next offset to read of one topic partition.")
class TopicOffset:
    topic: str
    partition: int
    offset: Long


@strawberry.type(description="How one partition answered.")
class PartitionResult:
    partition: int
    node: str | None
    role: ReplicaRole | None
    version: int | None
    position: list[TopicOffset]
    failure: FailureReason | None
    message: str | None


@strawberry.type(description="Position metadata of a result.")
class ResultMeta:
    partial: bool = strawberry.field(description="True when some partition could not answer.")
    partitions_asked: int
    partitions_answered: int
    partitions_failed: int
    position: list[TopicOffset] = strawberry.field(
        description="The merged position of all partitions that answered."
    )
    consistency_token: str = strawberry.field(
        description="Send back as consistency.token for reads at least this fresh."
    )
    partitions: list[PartitionResult]


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.input
class PositionInput:
    topic: str
    partition: int
    offset: Long


@strawberry.input(description="Freshness and replica demands of a query.")
class ConsistencyInput:
    token: str | None = strawberry.field(
        default=None, description="A consistencyToken from an earlier response: a lower bound."
    )
    position: list[PositionInput] | None = strawberry.field(
        default=None, description="An explicit lower bound, per topic partition."
    )
    require_active: bool = strawberry.field(
        default=False, description="Answer only from active replicas (NOT_ACTIVE otherwise)."
    )
    max_lag: Long | None = strawberry.field(
        default=None, description="Skip replicas more than this many offsets behind the log end."
    )
    max_age_ms: Long | None = strawberry.field(
        default=None,
        description="Skip replicas whose snapshot was built more than this many ms ago.",
    )


def offsets(position: Position) -> list[TopicOffset]:
    return [
        TopicOffset(topic=t, partition=p, offset=Long(o)) for (t, p), o in sorted(position.items())
    ]


def partition_result(cluster: Cluster, q: SubQuery, a: Answer) -> PartitionResult:
    role = None
    if a.node:
        active = cluster.replica_map[q.partition][0] == a.node
        role = ReplicaRole.ACTIVE if active else ReplicaRole.STANDBY
    return PartitionResult(
        partition=q.partition,
        node=a.node or None,
        role=role,
        version=a.version or None,
        position=offsets({(t, q.partition): o for t, o in a.offsets.items()}),
        failure=FailureReason(a.failure) if a.failure else None,
        message=a.message,
    )


def result_meta(
    cluster: Cluster, parts: list[tuple[SubQuery, Answer]], bound: Position
) -> tuple[ResultMeta, Position]:
    """The meta of one result, and the position its token stands for (bound included, so
    tokens only move forward)."""
    position = merged_position(parts)
    failed = sum(1 for _, a in parts if not a.ok)
    token_position = merge([bound, position])
    meta = ResultMeta(
        partial=failed > 0,
        partitions_asked=len(parts),
        partitions_answered=len(parts) - failed,
        partitions_failed=failed,
        position=offsets(position),
        consistency_token=encode_token(token_position),
        partitions=[partition_result(cluster, q, a) for q, a in parts],
    )
    return meta, token_position
