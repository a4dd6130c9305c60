"""A GraphQL result in the response shape: every error with one `extensions.code`, the body
encoded once and capped at the node's largest response; and a request refused before it ran
(Refused), in the same shape."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import orjson
from graphql import GraphQLError
from strawberry.types import ExecutionResult

from contracts.errors import GatewayError
from contracts.positions import encode_token
from gateway.cluster.routing import Trace
from resolvers.execution import client_errors
from resolvers.schema.context import Context

log = logging.getLogger(__name__)


def error_code(error: GraphQLError) -> str:
    """The code of a GraphQL error: ours, the phase's (resolvers/schema/build.py), or a bug's."""
    if isinstance(error.original_error, GatewayError):
        return error.original_error.code
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else "INTERNAL_SERVER_ERROR"


def coded(error: GraphQLError) -> dict[str, Any]:
    """An error as the response carries it; an unexpected one is logged with its traceback."""
    formatted: dict[str, Any] = dict(error.formatted)
    code = error_code(error)
    formatted["extensions"] = {**(error.extensions or {}), "code": code}
    if code == "INTERNAL_SERVER_ERROR":
        log.error("unexpected error: %s", error.message, exc_info=error.original_error)
    return formatted


class Refused(Exception):
    """An operation that cannot run: the coded errors to answer with, the HTTP status to
    answer them with as application/graphql-response+json (application/json is always 200),
    and the outcome the metrics count."""

    def __init__(
        self, errors: list[dict[str, Any]], status: int = 400, outcome: str = "refused"
    ) -> None:
        super().__init__(errors)
        self.errors = errors
        self.status = status
        self.outcome = outcome

    @classmethod
    def coded(cls, code: str, errors: list[GraphQLError]) -> Refused:
        for error in errors:
            error.extensions = {**(error.extensions or {}), "code": code}
        return cls([coded(error) for error in errors])

    @classmethod
    def one(
        cls, code: str, message: str, *, status: int = 400, outcome: str = "refused", **details: Any
    ) -> Refused:
        refused = cls.coded(code, [GraphQLError(message, extensions=details)])
        refused.status, refused.outcome = status, outcome
        return refused


def outcome(result: ExecutionResult) -> str:
    """ok, partial (data and errors) or error (no data), as the metrics count them (a
    Refused request counts as its `outcome`)."""
    if not result.errors:
        return "ok"
    return "error" if result.data is None else "partial"


def request_error(result: ExecutionResult) -> bool:
    """True when nothing ran: the variables did not fit the operation."""
    errors = result.errors or ()
    return result.data is None and any(error_code(e) == "BAD_USER_INPUT" for e in errors)


def response(result: ExecutionResult) -> dict[str, Any]:
    """{"data", "errors"?, "extensions"?}, as GraphQL over HTTP answers it; a request error
    has its errors alone: nothing ran, so there is no data entry, not even null."""
    if request_error(result):
        return {"errors": [coded(error) for error in result.errors or ()]}
    body: dict[str, Any] = {"data": result.data}
    if result.errors:
        body["errors"] = [coded(error) for error in result.errors]
    if result.extensions:
        body["extensions"] = result.extensions
    return body


def encoded(body: dict[str, Any], limit: int) -> bytes:
    """The body as JSON; over `limit` bytes, a RESPONSE_TOO_LARGE error in its place."""
    data = orjson.dumps(body)
    if len(data) <= limit:
        return data
    message = (
        f"the response would be {len(data)} bytes, over max_response_bytes ({limit}): "
        "ask for fewer keys, smaller pages or fewer fields"
    )
    client_errors.transport("RESPONSE_TOO_LARGE", message)
    error = {"message": message, "extensions": {"code": "RESPONSE_TOO_LARGE"}}
    return orjson.dumps({"data": None, "errors": [error]})


def response_extensions(context: Context) -> dict[str, Any]:
    return extensions(encode_token(context.queries.response_token()), context.batch.traces)


def extensions(token: str, traces: Sequence[Trace]) -> dict[str, Any]:
    """A response's extensions: its consistency token (encode_token's), what routing cost."""
    return {
        "consistencyToken": token,
        "routing": {
            "rounds": [r for t in traces for r in t.rounds],
            "internalRequests": sum(t.calls() for t in traces),
            "millis": round(sum(t.millis for t in traces), 3),
        },
    }


def past_deadline(deadline_s: float, extensions: dict[str, Any]) -> ExecutionResult:
    """The response of a request stopped at request_timeout_s."""
    message = f"the request ran past request_timeout_s ({deadline_s} s) and was stopped"
    error = GraphQLError(message, extensions={"code": "DEADLINE_EXCEEDED"})
    return ExecutionResult(None, [error], extensions)
