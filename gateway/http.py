"""A node's HTTP endpoints besides GraphQL, as a route table: /internal/* for peers and the
pipeline (the cluster secret required: SecretRequired), /cluster for smart clients and
proxies, /health (liveness: the process answers), /ready (readiness: it serves a snapshot of
every partition it hosts; it says how many of its worker processes serve) and /metrics
(Prometheus, gateway/cluster/metrics.py). With [auth],
/cluster and /metrics need a bearer token whose roles grant "cluster" (RequiresGrant: 401,
or FORBIDDEN 403, each logged with the client and the token's subject); /health and /ready
stay open to probes that carry no token, and tell nothing but the node's state. Endpoints
read their node from the app's state (`app.state.node`, set by the app that mounts them:
stategate/app.py).

Errors share one shape, contracts.errors.error_document: UNAUTHENTICATED (401), BAD_REQUEST
(400) for a body that is not the internal protocol, a sub-query past the limits of a GraphQL
request (400, coded as there: gateway/model/limits.py), METHOD_NOT_ALLOWED (405:
`method_not_allowed`, the app's handler of Starlette's 405), STORE_UNREACHABLE (502),
NOT_READY (503), NOT_RELOADABLE (409: POST /internal/reload to a process that takes no
SIGHUP, one not started by `stategate node`).
"""

from __future__ import annotations

import dataclasses
import logging

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from contracts import chains, tracing
from contracts.clock import now_ms
from contracts.cluster_secret import SECRET_HEADER, is_authentic
from contracts.errors import GatewayError, error_document
from gateway.auth import Unauthenticated, Who
from gateway.model import limits
from gateway.model.queries import NOT_HERE, SubQuery, keys_of
from gateway.node import GatewayNode
from gateway.runtime.lanes import SLICE, SMALL_BULK_KEYS, offload
from gateway.storage.delivery.sync import StoreUnreachable
from gateway.wire.protocol import (
    PROTOCOL_HEADER,
    ProtocolError,
    check_version,
    decode_request,
    encode_answers,
)

MAX_STATUS_WAIT_S = 60.0  # longest a peer's status request may wait for a switch
log = logging.getLogger(__name__)


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    return JSONResponse(error_document(code, message), status_code=status, headers=headers)


def node_of(connection: HTTPConnection) -> GatewayNode:
    node: GatewayNode = connection.app.state.node
    return node


class SecretRequired:
    """Refuses a request without the cluster secret, before anything else is read of it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = HTTPConnection(scope)
        secret = node_of(connection).project.cluster.secret
        if not is_authentic(connection.headers.get(SECRET_HEADER), secret):
            message = f"{SECRET_HEADER} is missing or wrong"
            await error_response(401, "UNAUTHENTICATED", message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class RequiresGrant:
    """An operator's endpoint: with [auth], for a token whose roles grant `grant`."""

    def __init__(self, app: ASGIApp, grant: str) -> None:
        self.app = app
        self.grant = grant

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        connection = HTTPConnection(scope)
        authenticator = node_of(connection).authenticator
        try:
            principal = authenticator.authenticate(connection.headers.get("authorization"))
        except Unauthenticated as refused:
            challenge = {"www-authenticate": refused.challenge}
            refusal = error_response(401, refused.code, refused.message, challenge)
            _refused(refused.code, refused.message, Who.at(scope.get("client"), refused.subject))
            await refusal(scope, receive, send)
            return
        access = authenticator.access
        if access is not None and not access.permits(principal, self.grant):
            message = f'{connection.url.path} needs a role that [auth.roles] grants "{self.grant}"'
            _refused("FORBIDDEN", message, Who.at(scope.get("client"), principal.subject))
            await error_response(403, "FORBIDDEN", message)(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _refused(code: str, message: str, who: Who) -> None:
    """One line, as resolvers/execution/client_errors.py logs a GraphQL request's."""
    log.warning("client error %s via=http%s: %s", code, who.fields(), message)


async def method_not_allowed(request: Request, exc: Exception) -> Response:
    """Starlette's 405, in our shape."""
    assert isinstance(exc, HTTPException)
    allowed = (exc.headers or {}).get("allow", "")
    message = f"{request.url.path} answers {allowed}, not {request.method}"
    return error_response(405, "METHOD_NOT_ALLOWED", message, dict(exc.headers or {}))


class InternalQuery:
    """POST /internal/query, a peer's sub-queries: read and answered as raw ASGI messages,
    with no request or response object between (every hop's other end, so its cost is a
    hop's). Its errors are error_response's, as every endpoint's."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        node: GatewayNode = scope["app"].state.node
        with node.lanes.request():
            headers = Headers(scope=scope)
            try:
                subqueries = _subqueries(node, headers, await _body(receive))
            except ProtocolError as exc:
                message = f"not the internal protocol: {exc}"
                await error_response(400, "BAD_REQUEST", message)(scope, receive, send)
                return
            except GatewayError as exc:
                await error_response(400, exc.code, exc.message)(scope, receive, send)
                return
            node.internal_requests += 1
            keys = keys_of(subqueries)
            with (
                tracing.span(
                    "internal query", {"stategate.node": node.id}, tracing.extracted(headers)
                ),  # fmt: skip
                node.lanes.enter(*_lane(keys)),
            ):
                answers = await node.execute_local(subqueries)
                body = await offload(encode_answers, answers)
        await send({"type": "http.response.start", "status": 200, "headers": json_head(body)})
        await send({"type": "http.response.body", "body": body})


def _lane(keys: int) -> tuple[bool, bool]:
    """The lane of an internal call of `keys` keys: (bulk, small bulk)."""
    return keys > SLICE, keys <= SMALL_BULK_KEYS


def json_head(body: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of /internal/query's answer of `body`, as raw ASGI headers."""
    return [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]


def internal_at_once(node: GatewayNode, headers: Headers, body: bytes) -> bytes | None:
    """The answer's body to a peer's sub-queries (a whole POST /internal/query) when this
    node reads them all from its memory at once, as InternalQuery would read them now: no
    more than a SLICE of keys (its interactive lane), or small bulk work while no
    interactive request is in flight (which the bulk lane runs here and now then); else
    None before anything was counted, InternalQuery answers (errors, the bulk thread, the
    pool, traces). What the HTTP server's protocol asks first (stategate/inline.py)."""
    if tracing.on() or not is_authentic(headers.get(SECRET_HEADER), node.project.cluster.secret):
        return None
    try:
        subqueries = _subqueries(node, headers, body)
    except (ProtocolError, GatewayError):
        return None
    bulk, small = _lane(keys_of(subqueries))
    if bulk and not node.lanes.runs_here(small):
        return None
    answers = [node.execute_local.here(q) for q in subqueries]
    read = [a for a in answers if a is not NOT_HERE]
    if len(read) < len(answers):
        return None
    node.internal_requests += 1
    return encode_answers(read)


def _subqueries(node: GatewayNode, headers: Headers, body: bytes) -> list[SubQuery]:
    """A peer's sub-queries, each within the limits; ProtocolError or GatewayError."""
    check_version(headers.get(PROTOCOL_HEADER))
    subqueries = decode_request(body)
    for subquery in subqueries:
        limits.check_subquery(subquery, node.project)
    return subqueries


async def _body(receive: Receive) -> bytes:
    """A request's whole body (a peer's: behind the cluster secret, sized by its limits)."""
    message = await receive()
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body  # the one message a small body comes in
    chunks = [body]
    while message.get("more_body", False):
        message = await receive()
        chunks.append(message.get("body", b""))
    return b"".join(chunks)


async def status(request: Request) -> Response:
    """The node's status; with `changes` and `wait`, once its switch counter differs from
    `changes`, or after `wait` seconds (gateway/cluster/health.py)."""
    node = node_of(request)
    params = request.query_params
    if "changes" in params:
        try:
            changes, wait = int(params["changes"]), float(params.get("wait", "0"))
        except ValueError:
            return error_response(400, "BAD_REQUEST", "changes and wait must be numbers")
        if not 0 <= wait <= MAX_STATUS_WAIT_S:
            message = f"wait must be between 0 and {MAX_STATUS_WAIT_S} seconds"
            return error_response(400, "BAD_REQUEST", message)
        await node.switches.wait_past(changes, wait)
    return Response(node.status().to_json(), media_type="application/json")


async def sync(request: Request) -> Response:
    node = node_of(request)
    try:
        installed = await node.delivery.run_once(force=True)
    except StoreUnreachable as exc:
        return error_response(502, "STORE_UNREACHABLE", f"the snapshot store: {exc}")
    body = {"node": node.id, "installed": installed, "errors": node.delivery.errors}
    return Response(
        orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), media_type="application/json"
    )


async def reload(request: Request) -> Response:
    """Read the project file again, as SIGHUP does (stategate/reloading.py): 202 once asked;
    what it applied, the node's status says (`declared`) and its log says in one line."""
    node = node_of(request)
    asked_ms = now_ms()  # before the signal: the reading it starts comes after, by this clock
    if not node.ask_reload():
        return error_response(409, "NOT_RELOADABLE", f"{node.id} does not read SIGHUP")
    return JSONResponse({"node": node.id, "reloading": True, "asked_ms": asked_ms}, 202)


async def cluster_map(request: Request) -> Response:
    return Response(node_of(request).partition_map().to_json(), media_type="application/json")


async def metrics(request: Request) -> Response:
    return Response(await node_of(request).exposition(), media_type=CONTENT_TYPE_LATEST)


async def health(request: Request) -> Response:
    return JSONResponse({"node": node_of(request).id, "status": "ok"})


async def ready(request: Request) -> Response:
    node = node_of(request)
    hosted = node.topology.current.hosted_by(node.id)
    serving = node.catalog.current()
    missing = [p for p in hosted if p not in serving]
    unglobal = [chains.partition(node.project, c) for c in chains.global_chains(node.project)
                if c not in serving]  # fmt: skip
    if missing or unglobal:
        message = f"{node.id} has no snapshot yet of partitions {missing}" + (
            f" (of the global stores: {unglobal})" if unglobal else ""
        )
        errors = sorted(set(node.delivery.errors.values()))
        return error_response(503, "NOT_READY", "; ".join([message, *errors]))
    versions = {str(p): serving[p].version for p in hosted}
    workers = dataclasses.asdict(await node.workers())
    return JSONResponse({"node": node.id, "ready": True, "versions": versions, "workers": workers})


INTERNAL_QUERY = "/internal/query"  # a peer's sub-queries: the one internal path every hop takes
OPERATOR = [Middleware(RequiresGrant, grant="cluster")]
ROUTES: list[BaseRoute] = [
    Route("/cluster", cluster_map, middleware=OPERATOR),
    Route("/health", health),
    Route("/metrics", metrics, middleware=OPERATOR),
    Route("/ready", ready),
    Mount(
        "/internal",
        routes=[
            Route("/metrics", metrics),  # for the cluster's own tools: stategate apply
            Route("/query", InternalQuery(), methods=["POST"]),
            Route("/reload", reload, methods=["POST"]),
            Route("/status", status, methods=["GET", "HEAD"]),
            Route("/sync", sync, methods=["POST"]),
        ],
        middleware=[Middleware(SecretRequired)],
    ),
]
internal_query: ASGIApp = SecretRequired(InternalQuery())  # as routed, for Direct
