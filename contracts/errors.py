"""The error vocabulary: request errors with a code from a closed set, and the reasons a
partition can fail to answer (KIP-796's, plus NODE_UNAVAILABLE).

Raised inside a resolver, a GatewayError becomes a GraphQL error whose `extensions.code` is
its code (graphql-core copies `extensions` from the original error). HTTP endpoints outside
GraphQL answer with error_document's shape.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class GatewayError(Exception):
    """A request the gateway refuses, with a machine-readable code."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.extensions: dict[str, Any] = {"code": code, **details}


def bad_input(message: str, **details: Any) -> GatewayError:
    return GatewayError("BAD_USER_INPUT", message, **details)


def error_document(code: str, message: str) -> dict[str, dict[str, str]]:
    """The body of every non-GraphQL error response: {"error": {"code", "message"}}."""
    return {"error": {"code": code, "message": message}}


class Failure(StrEnum):
    """Why one partition could not answer; the rest of a result stands. FORBIDDEN is a key's
    own: the row rules withhold its rows."""

    NOT_PRESENT = "NOT_PRESENT"  # the replica has no snapshot of the partition (yet)
    NOT_ACTIVE = "NOT_ACTIVE"  # requireActive, and the replica is a standby
    NOT_UP_TO_BOUND = "NOT_UP_TO_BOUND"  # behind the caller's position bound or maxAgeMs
    DOES_NOT_EXIST = "DOES_NOT_EXIST"  # no such store on the replica
    UNKNOWN_QUERY_TYPE = "UNKNOWN_QUERY_TYPE"  # a query kind the replica does not know
    STORE_EXCEPTION = "STORE_EXCEPTION"  # the replica's store failed to answer
    NODE_UNAVAILABLE = "NODE_UNAVAILABLE"  # the replica could not be reached
    OUTSIDE_HISTORY = "OUTSIDE_HISTORY"  # a time before the versioned store's history
    # the request's row rules withhold the key's rows: said by the node asked, never a replica
    FORBIDDEN = "FORBIDDEN"

    @property
    def retryable(self) -> bool:
        """Another replica may not have this failure: the router tries the next one. A
        replica that has no such store may run a project file without it, while another
        replica still has it (a store being removed: README, Changing stores)."""
        return self not in (
            Failure.UNKNOWN_QUERY_TYPE,
            Failure.OUTSIDE_HISTORY,
            Failure.FORBIDDEN,
        )
