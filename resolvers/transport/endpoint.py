"""The /graphql endpoint over HTTP, as GraphQL over HTTP specifies it.

GET (queries only: a mutation is 405) and POST (JSON; a JSON array is a batch, up to
`max_batch_size` operations sharing one routed batch). The answer is
application/graphql-response+json when the client accepts it, with status 400 for a request
that could not run (parse, validation, variables, limits; 403 for an operation the
allow-list refuses; 200 for an unknown persisted-query hash, as Apollo's clients expect),
else application/json with 200. Every error has GraphQL's shape and an `extensions.code`,
transport errors included. A request whose client disconnects is cancelled. A browser's GET
with neither a query nor a hash gets the playground.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Literal, TypeVar

import orjson
from graphql import OperationType
from starlette.datastructures import Headers, QueryParams
from starlette.types import Receive, Scope, Send

from contracts import tracing
from gateway.auth import Unauthenticated
from gateway.node import GatewayNode
from resolvers.execution import client_errors, results
from resolvers.execution.operations import Operations, Refused
from resolvers.execution.persisted import NOT_FOUND_OUTCOME, Source
from resolvers.schema.context import Context
from resolvers.transport.known import KnownRead, KnownReads
from resolvers.transport.requests import JSON, GraphQLRequest, TransportError, read_get, read_post
from resolvers.transport.session import Session

GRAPHQL_RESPONSE = "application/graphql-response+json"
HTML = "text/html; charset=utf-8"
CLIENT_CLOSED = 499  # never seen by the client, which left: for the access log only
WATCH_AFTER_S = 0.05  # how long a request runs before a disconnect would cancel it
T = TypeVar("T")
log = logging.getLogger(__name__)


NOT_CACHED = {"cache-control": "no-store"}  # a miss, that the client's next request fills


class _Left(enum.Enum):
    LEFT = "the client disconnected before its answer"


_LEFT = _Left.LEFT


class _ClientLeft(Exception):
    """The client left before its body was whole (or its deadline closed the connection:
    stategate/deadlines.py): nothing to answer, nothing to count."""


@dataclass(frozen=True)
class Rendered:
    body: bytes
    status: int = 200  # as application/graphql-response+json: 400 when nothing ran, ...
    headers: dict[str, str] | None = None


@dataclass(frozen=True)
class Outgoing:
    """What goes back: sent as two ASGI messages, with no response object between."""

    body: bytes
    media: str
    status: int = 200
    headers: dict[str, str] | None = None

    def head(self, more: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
        """The answer's headers, then `more` (the node's)."""
        raw = [(b"content-type", self.media.encode()), (b"content-length", b"%d" % len(self.body))]
        raw.extend(
            (k.encode("latin-1"), v.encode("latin-1")) for k, v in (self.headers or {}).items()
        )
        raw.extend(more)
        return raw

    async def send(self, send: Send, more: list[tuple[bytes, bytes]]) -> None:
        head = self.head(more)
        await send({"type": "http.response.start", "status": self.status, "headers": head})
        await send({"type": "http.response.body", "body": self.body})


class GraphQLEndpoint:
    def __init__(self, node: GatewayNode, operations: Operations, playground: str) -> None:
        self.node = node
        self.operations = operations
        self.settings = node.project.settings
        self.playground = playground.encode()
        self.known = KnownReads(node, operations)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = Headers(scope=scope)
        media = _media(headers.get("accept", ""))
        try:
            outgoing = await self._respond(scope, headers, receive, media)
        except _ClientLeft:
            return
        except Unauthenticated as refused:
            who = client_errors.Who.at(scope.get("client"), refused.subject)
            client_errors.transport(refused.code, refused.message, "http", who)
            self.node.metrics.request(None, "refused", 0.0)
            challenge = {"www-authenticate": refused.challenge}
            error = TransportError(401, refused.code, refused.message, challenge)
            outgoing = _transport_error(error, media)
        except TransportError as error:
            client_errors.transport(error.code, error.message)
            self.node.metrics.request(None, "refused", 0.0)
            outgoing = _transport_error(error, media)
        except Exception:  # a bug: logged, and still answered in the one error shape
            log.exception("answering a GraphQL request failed")
            failed = TransportError(500, "INTERNAL_SERVER_ERROR", "the node failed to answer")
            outgoing = _transport_error(failed, media)
        await outgoing.send(send, self.node.answer_headers())

    def at_once(self, scope: Scope, body: bytes) -> Outgoing | Awaitable[Outgoing | None] | None:
        """The answer to a whole request (`body` read) when it is a known read: at once when
        this node reads its key from memory, else its answer through the router to await
        (None there: the general path words it); None before anything was counted for any
        other request, which goes its usual way. What the HTTP server's protocol asks first
        (stategate/inline.py), which cancels the awaited answer if the client leaves."""
        headers = Headers(scope=scope)
        method = scope["method"]
        if method == "POST" and len(body) > self.settings.max_request_bytes:
            return None
        try:
            parsed = self._parsed(method, scope, headers, body)
        except TransportError:
            return None
        known = None if parsed is None or isinstance(parsed, list) else self.known.read(parsed)
        if known is None:
            return None
        answer = self._known_answer(known, scope, headers, _media(headers.get("accept", "")))
        return answer if isinstance(answer, Outgoing) else self._left_counted(answer)

    def _parsed(
        self, method: str, scope: Scope, headers: Headers, body: bytes
    ) -> GraphQLRequest | list[GraphQLRequest] | None:
        """The request `body` (a POST's) or the URL (a GET's) carries; None for a browser's
        GET that asks nothing (the playground)."""
        if method == "GET":
            params = QueryParams(scope["query_string"])
            asks = "query" in params or "extensions" in params or "documentId" in params
            if not asks and "text/html" in headers.get("accept", ""):
                return None
            return read_get(params)
        if method == "POST":
            return read_post(headers.get("content-type", ""), body, self.settings.max_batch_size)
        raise TransportError(
            405, "METHOD_NOT_ALLOWED", f"{method} is not GraphQL over HTTP: use GET or POST",
            {"allow": "GET, POST"},
        )  # fmt: skip

    async def _respond(
        self, scope: Scope, headers: Headers, receive: Receive, media: str
    ) -> Outgoing:
        method = scope["method"]
        body = b""
        if method == "POST":
            body = await _read(headers, receive, self.settings.max_request_bytes)
        parsed = self._parsed(method, scope, headers, body)
        if parsed is None:
            return Outgoing(self.playground, HTML)
        known = None if isinstance(parsed, list) else self.known.read(parsed)
        if known is not None:
            answered = await self._known(known, scope, headers, receive, media)
            if answered is not None:
                return answered
        session = Session(
            self.node, self.operations, "http", scope.get("client"), headers.get("authorization")
        )
        session.authenticate()
        work = self._answer(parsed, session, method == "GET")
        started = time.perf_counter()
        request = {"stategate.node": self.node.id, "http.request.method": method}
        with tracing.span("graphql request", request, tracing.extracted(headers)):
            rendered = await _unless_disconnected(work, receive)
        if rendered is _LEFT:
            session.count(None, "cancelled", started)
            return Outgoing(b"", media, CLIENT_CLOSED)
        if isinstance(rendered, list):
            return Outgoing(b"[" + b",".join(a.body for a in rendered) + b"]", media)
        status = rendered.status if media == GRAPHQL_RESPONSE else 200
        return Outgoing(rendered.body, media, status, rendered.headers)

    async def _known(
        self, known: KnownRead, scope: Scope, headers: Headers, receive: Receive, media: str
    ) -> Outgoing | None:
        """A known read's answer; None when the general path must answer."""
        answer = self._known_answer(known, scope, headers, media)
        if isinstance(answer, Outgoing):
            return answer
        started = time.perf_counter()
        routed = await _unless_disconnected(answer, receive)
        if routed is _LEFT:
            self.node.metrics.request(None, "cancelled", time.perf_counter() - started)
            return Outgoing(b"", media, CLIENT_CLOSED)
        return routed

    def _known_answer(
        self, known: KnownRead, scope: Scope, headers: Headers, media: str
    ) -> Outgoing | Awaitable[Outgoing | None]:
        """A known read's answer from memory at once, else its answer through the router."""
        body = self.known.at_once(known)
        return self._routed(known, scope, headers, media) if body is None else Outgoing(body, media)

    async def _routed(
        self, known: KnownRead, scope: Scope, headers: Headers, media: str
    ) -> Outgoing | None:
        """A known read's answer through the router, asked with the request's authorization."""
        who = client_errors.Who.at(scope.get("client"))
        body = await self.known.routed(known, who, headers.get("authorization"))
        return None if body is None else Outgoing(body, media)

    async def _left_counted(self, work: Awaitable[Outgoing | None]) -> Outgoing | None:
        """The work's answer; counted cancelled when it is (its client left)."""
        started = time.perf_counter()
        try:
            return await work
        except asyncio.CancelledError:
            self.node.metrics.request(None, "cancelled", time.perf_counter() - started)
            raise

    async def _answer(
        self, parsed: GraphQLRequest | list[GraphQLRequest], session: Session, get: bool
    ) -> Rendered | list[Rendered]:
        if not isinstance(parsed, list):
            return await self._one(parsed, session, None, get)
        context = session.context()
        contexts = [context, *(context.again() for _ in parsed[1:])]  # one routed batch
        return list(
            await asyncio.gather(
                *(self._one(r, session, c, get) for r, c in zip(parsed, contexts, strict=True))
            )
        )

    async def _one(
        self, request: GraphQLRequest, session: Session, context: Context | None, get: bool
    ) -> Rendered:
        """One operation's answer; in `context` when it joins others' batch."""
        name, variables = request.operation_name, request.variables
        try:
            check = self._no_mutation if get else None
            prepared = session.prepare(request.query, name, request.hash, variables, check)
        except Refused as refused:
            return _refusal(refused)
        if prepared.kind is OperationType.SUBSCRIPTION:
            over_http = Refused.one(
                "SUBSCRIPTION_OVER_HTTP",
                "subscriptions are served over WebSocket (graphql-transport-ws) on /graphql",
            )
            session.refused(over_http, prepared.name)
            return _refusal(over_http)
        context = context or session.context(prepared.lone)
        result = await session.run(prepared, context, variables)
        body = results.encoded(results.response(result), self.settings.max_response_bytes)
        return Rendered(body, 400 if results.request_error(result) else 200)

    def _no_mutation(self, source: Source) -> None:
        """GET runs queries only (GraphQL over HTTP): a mutation is 405."""
        if self.operations.kind(source.query, source.name) is OperationType.MUTATION:
            raise TransportError(
                405, "METHOD_NOT_ALLOWED", "a mutation is sent with POST", {"allow": "POST"}
            )


def _refusal(refused: Refused) -> Rendered:
    headers = NOT_CACHED if refused.outcome == NOT_FOUND_OUTCOME else None
    return Rendered(orjson.dumps({"errors": refused.errors}), refused.status, headers)


def _media(accept: str) -> str:
    """The response's media type: the first of ours the Accept header names."""
    for part in accept.split(","):
        kind = part.split(";")[0].strip().lower()
        if kind == GRAPHQL_RESPONSE:
            return GRAPHQL_RESPONSE
        if kind in (JSON, "application/*", "*/*"):
            return JSON
    return JSON


def _transport_error(error: TransportError, media: str) -> Outgoing:
    body = {"errors": [{"message": error.message, "extensions": {"code": error.code}}]}
    return Outgoing(orjson.dumps(body), media, error.status, error.headers)


async def _read(headers: Headers, receive: Receive, limit: int) -> bytes:
    """The body, or REQUEST_TOO_LARGE (413) once it is known to pass `limit`: from its
    Content-Length, or as soon as the chunks received pass it. Never more than `limit` is
    kept; the rest is read and dropped, so the client is not reset while still sending."""
    length = headers.get("content-length", "")
    too_large = TransportError(
        413, "REQUEST_TOO_LARGE", f"the request body is over max_request_bytes ({limit} bytes)"
    )
    if length.isdigit() and int(length) > limit:
        if "100-continue" not in headers.get("expect", "").lower():
            await _drain(receive)  # else the client waits: asking for it would invite it
        raise too_large
    chunks, size, more = [], 0, True
    while more:
        message = await receive()
        if message["type"] != "http.request":
            raise _ClientLeft
        chunk = message.get("body", b"")
        size += len(chunk)
        more = message.get("more_body", False)
        if size > limit:
            if more:
                await _drain(receive)
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


async def _drain(receive: Receive) -> None:
    """Read the rest of the body and drop it."""
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            return


async def _unless_disconnected(work: Awaitable[T], receive: Receive) -> T | Literal[_Left.LEFT]:
    """The work's result, or _LEFT when the client disconnected first (the work is
    cancelled: its internal calls with it). The work runs in the request's own task; the
    watch for a disconnect starts only once it has run for WATCH_AFTER_S, as most requests
    are answered sooner, so a client that leaves before costs at most that much work."""
    task = asyncio.current_task()
    assert task is not None
    watching: list[asyncio.Task[None]] = []
    left = False

    async def cancel_on_disconnect() -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        left = True
        task.cancel()

    def watch() -> None:
        watching.append(asyncio.ensure_future(cancel_on_disconnect()))

    armed = asyncio.get_running_loop().call_later(WATCH_AFTER_S, watch)
    try:
        return await work
    except asyncio.CancelledError:
        if not left:
            raise
        task.uncancel()
        return _LEFT
    finally:
        armed.cancel()
        if watching:
            watching[0].cancel()
