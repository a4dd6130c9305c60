"""Position metadata every result carries (KIP-796): which partitions answered, from which
node and replica, at which position, and why the others did not."""

from __future__ import annotations

from enum import Enum

import strawberry

from contracts.clock import now_ms
from contracts.errors import Failure
from contracts.positions import Position, encode_token
from gateway.service import Demand, Meta
from resolvers.schema.scalars import Long

FailureReason = strawberry.enum(
    Failure,
    name="FailureReason",
    description="Why a partition could not answer (KIP-796, plus NODE_UNAVAILABLE), or, "
    "FORBIDDEN, why a key's rows are withheld: the token's row rules do not let it read them.",
)


@strawberry.enum
class ReplicaRole(Enum):
    ACTIVE = "ACTIVE"
    STANDBY = "STANDBY"
    WARMING = "WARMING"  # in the cluster map only: a copy being made, not yet serving


@strawberry.type(description="The next offset to read of one topic partition.")
class TopicOffset:
    topic: str
    partition: int
    offset: Long


@strawberry.type(description="How one partition answered.")
class PartitionResult:
    store: str = strawberry.field(
        description="The store it answered for: the field's own, or one its records join."
    )
    partition: int
    node: str | None
    role: ReplicaRole | None
    version: int | None
    position: list[TopicOffset]
    failure: Failure | None
    message: str | None
    appended_ms: Long | None = strawberry.field(
        description="When the newest record of the version that answered was appended to the "
        "log (ms since the epoch, Kafka's LogAppendTime); null when unknown."
    )


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
    newest_record_age_ms: Long | None = strawberry.field(
        description="How long ago the newest record in this result's state was appended to "
        "the log, in ms, as the answering node's clock tells; null when unknown."
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


def result_meta(meta: Meta) -> ResultMeta:
    failed = meta.failed
    appended = [p.appended_ms for p in meta.partitions if p.appended_ms is not None]
    return ResultMeta(
        partial=failed > 0,
        partitions_asked=len(meta.partitions),
        partitions_answered=len(meta.partitions) - failed,
        partitions_failed=failed,
        position=offsets(meta.position),
        consistency_token=encode_token(meta.token),
        newest_record_age_ms=Long(max(0, now_ms() - max(appended))) if appended else None,
        partitions=[
            PartitionResult(
                store=p.store,
                partition=p.partition,
                node=p.node,
                role=None
                if p.node is None
                else ReplicaRole.ACTIVE
                if p.active
                else ReplicaRole.STANDBY,
                version=p.version,
                position=offsets({(t, p.partition): o for t, o in p.offsets.items()}),
                failure=p.failure,
                message=p.message,
                appended_ms=None if p.appended_ms is None else Long(p.appended_ms),
            )
            for p in meta.partitions
        ],
    )


def demand(given: ConsistencyInput | None) -> Demand | None:
    if given is None:
        return None
    return Demand(
        token=given.token,
        position=tuple((p.topic, p.partition, p.offset) for p in given.position or ()),
        require_active=given.require_active,
        max_lag=given.max_lag,
        max_age_ms=given.max_age_ms,
    )
