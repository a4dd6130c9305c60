"""The internal protocol between nodes: sub-queries out, per-partition answers back.

One internal request carries every sub-query a GraphQL request needs from one node. A
sub-query targets one partition of one store; its answer is rows, or a failure with one of
KIP-796's reasons (plus NODE_UNAVAILABLE when the node could not be reached at all).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

SECRET_HEADER = "x-stategate-secret"
KINDS = ("get", "prefix", "range", "window", "windows")
# Failures another replica may not have: the router tries the next one.
RETRYABLE = frozenset(
    {"NOT_PRESENT", "NOT_ACTIVE", "NOT_UP_TO_BOUND", "STORE_EXCEPTION", "NODE_UNAVAILABLE"}
)
# What a failed call to a peer raises. Besides httpx's errors: when a peer resets a
# connection as it is made, uvloop hands anyio a transport without a socket, and anyio
# fails with AttributeError or OSError (MagicStack/uvloop#560).
PEER_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, AttributeError, OSError)


@dataclass(frozen=True)
class SubQuery:
    id: int
    partition: int
    store: str
    kind: str
    params: dict[str, Any]
    bound: dict[str, int] = field(default_factory=dict)  # topic -> offset, this partition only
    require_active: bool = False
    max_age_ms: int | None = None  # the oldest snapshot the caller accepts


@dataclass
class Answer:
    id: int
    node: str
    rows: list[list[Any]] | None = None
    version: int = 0
    offsets: dict[str, int] = field(default_factory=dict)
    active: bool = False
    failure: str | None = None
    message: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


def encode_request(subqueries: list[SubQuery]) -> bytes:
    return orjson.dumps(
        [
            [
                q.id,
                q.partition,
                q.store,
                q.kind,
                q.params,
                q.bound,
                q.require_active,
                q.max_age_ms,
            ]
            for q in subqueries
        ]
    )


def decode_request(body: bytes) -> list[SubQuery]:
    return [SubQuery(*item) for item in orjson.loads(body)]


def encode_answers(answers: list[Answer]) -> bytes:
    return orjson.dumps(
        [
            [a.id, a.node, a.rows, a.version, a.offsets, a.active, a.failure, a.message]
            for a in answers
        ]
    )


def decode_answers(body: bytes) -> list[Answer]:
    return [Answer(*item) for item in orjson.loads(body)]
