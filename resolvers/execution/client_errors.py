"""One log line per request a client got wrong, never a traceback.

A request refused or answered with errors (a document that does not parse or validate,
variables that do not fit, a transport error, a limit, a failed authentication or a
forbidden store, a broken WebSocket protocol) logs exactly one line naming its code, the
operation when it has a name, the transport, and the first error's message, shortened:

    client error GRAPHQL_VALIDATION_FAILED operation=Dashboard via=http: Cannot query field ...

at INFO, or at WARNING for what an operator may have to act on: authentication and
authorization failures, and requests the node stopped or refused for its own sake (deadline,
response size, subscriptions, slow clients). An authentication or authorization failure, or
a slow client's request, also names who (gateway/auth.py's Who): the client's address and
the subject (`sub`) of its token, when the token could be decoded (as claimed, when it did
not verify); never the token:

    client error UNAUTHENTICATED via=http client=10.0.0.7:51234 sub="svc-report": the ...

An error without a code of ours is a bug: resolvers/execution/results.py logs it at ERROR
with its traceback, and it is left out here."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from graphql import GraphQLError

from contracts.errors import GatewayError
from gateway.auth import Who as Who

log = logging.getLogger(__name__)
INTERNAL = "INTERNAL_SERVER_ERROR"
WARNING_CODES = frozenset(
    {
        "UNAUTHENTICATED",
        "FORBIDDEN",
        "DEADLINE_EXCEEDED",
        "RESPONSE_TOO_LARGE",
        "TOO_MANY_SUBSCRIPTIONS",
        "REQUEST_TIMEOUT",  # a slow client (stategate/deadlines.py)
        "4403",  # a WebSocket's connection_init without a valid token
    }
)
# Lines that name who: authentication and authorization failures, slow clients.
WHO_CODES = frozenset({"UNAUTHENTICATED", "FORBIDDEN", "4403", "REQUEST_TIMEOUT"})
MAX_MESSAGE = 200  # characters of the message a line keeps


def transport(code: str, message: str, via: str = "http", who: Who | None = None) -> None:
    """A request refused before it was read as GraphQL (HTTP status, WebSocket close)."""
    _line([(code, message)], None, via, who)


def refused(
    errors: Iterable[Mapping[str, Any]], operation: str | None, via: str, who: Who | None = None
) -> None:
    """An operation refused before it ran: its errors as the response carries them."""
    _line([_of_formatted(error) for error in errors], operation, via, who)


def failed(
    errors: Iterable[GraphQLError] | None, operation: str | None, via: str, who: Who | None = None
) -> None:
    """An operation that ran, when its result carries errors."""
    _line([(_code(error), error.message) for error in errors or ()], operation, via, who)


def _code(error: GraphQLError) -> str:
    """As resolvers/execution/results.py codes it."""
    if isinstance(error.original_error, GatewayError):
        return error.original_error.code
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else INTERNAL


def _of_formatted(error: Mapping[str, Any]) -> tuple[str, str]:
    extensions = error.get("extensions")
    code = extensions.get("code") if isinstance(extensions, Mapping) else None
    return (code if isinstance(code, str) else INTERNAL, str(error.get("message", "")))


def _line(errors: list[tuple[str, str]], operation: str | None, via: str, who: Who | None) -> None:
    coded = [(code, message) for code, message in errors if code != INTERNAL]
    if not coded:
        return
    code, message = coded[0]
    more = f" (and {len(coded) - 1} more)" if len(coded) > 1 else ""
    name = f" operation={_short(operation, 100)}" if operation else ""
    whom = who.fields() if who is not None and code in WHO_CODES else ""
    level = logging.WARNING if code in WARNING_CODES else logging.INFO
    log.log(level, "client error %s%s via=%s%s: %s%s", code, name, via, whom, _short(message), more)


def _short(text: str, limit: int = MAX_MESSAGE) -> str:
    """One line, at most `limit` characters: a client's text cannot break a log line."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
