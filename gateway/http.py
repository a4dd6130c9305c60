"""A node's HTTP endpoints besides GraphQL: /internal/* for peers and the pipeline (cluster
secret required), /cluster for smart clients and proxies, /health (liveness: the process
answers), /ready (readiness: it serves a snapshot of every partition it hosts) and /metrics
(Prometheus, gateway/cluster/metrics.py). With [auth], /cluster and /metrics need a bearer token
whose roles grant "cluster" (401, or FORBIDDEN 403); /health and /ready stay open to probes
that carry no token, and tell nothing but the node's state.

Errors share one shape, contracts.errors.error_document: UNAUTHENTICATED (401), BAD_REQUEST
(400) for a body that is not the internal protocol, a sub-query past the limits of a GraphQL
request (400, coded as there: gateway/model/limits.py), METHOD_NOT_ALLOWED (405) on /internal/*,
STORE_UNREACHABLE (502), NOT_READY (503).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contracts.auth import SECRET_HEADER, is_authentic
from contracts.errors import GatewayError, error_document
from gateway.auth import Unauthenticated
from gateway.model import limits
from gateway.model.queries import keys_of
from gateway.node import GatewayNode
from gateway.runtime.lanes import SLICE, offload
from gateway.storage.sync import StoreUnreachable
from gateway.wire.protocol import ProtocolError, decode_request, encode_answers

Endpoint = Callable[[Request], Awaitable[Response]]
MAX_STATUS_WAIT_S = 60.0  # longest a peer's status request may wait for a switch
INTERNAL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]  # all answered


def error_response(
    status: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    return JSONResponse(error_document(code, message), status_code=status, headers=headers)


def node_routes(node: GatewayNode) -> list[Route]:
    secret = node.project.cluster.secret

    def internal(path: str, endpoint: Endpoint, *methods: str) -> Route:
        async def checked(request: Request) -> Response:
            if not is_authentic(request.headers.get(SECRET_HEADER), secret):
                return error_response(
                    401, "UNAUTHENTICATED", f"{SECRET_HEADER} is missing or wrong"
                )
            if request.method not in methods:
                message = f"{path} answers {' and '.join(methods)}, not {request.method}"
                return error_response(405, "METHOD_NOT_ALLOWED", message)
            return await endpoint(request)

        return Route(path, checked, methods=INTERNAL_METHODS)

    async def query(request: Request) -> Response:
        with node.lanes.request():
            try:
                subqueries = decode_request(await request.body())
                for subquery in subqueries:
                    limits.check_subquery(subquery, node.project)
            except ProtocolError as exc:
                return error_response(400, "BAD_REQUEST", f"not the internal protocol: {exc}")
            except GatewayError as exc:
                return error_response(400, exc.code, exc.message)
            node.internal_requests += 1
            with node.lanes.enter(bulk=keys_of(subqueries) > SLICE):
                answers = await node.execute_local(subqueries)
                body = await offload(encode_answers, answers)
            return Response(body, media_type="application/json")

    async def status(request: Request) -> Response:
        """The node's status; with `changes` and `wait`, once its switch counter differs
        from `changes`, or after `wait` seconds (gateway/cluster/health.py)."""
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
        try:
            installed = await node.sync.run_once(force=True)
        except StoreUnreachable as exc:
            return error_response(502, "STORE_UNREACHABLE", f"the snapshot store: {exc}")
        body = {"node": node.id, "installed": installed, "errors": node.sync.errors}
        return Response(
            orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), media_type="application/json"
        )

    def operator(endpoint: Endpoint) -> Endpoint:
        """An operator's endpoint: with [auth], for a token whose roles grant "cluster"."""

        async def checked(request: Request) -> Response:
            try:
                principal = node.authenticator.authenticate(request.headers.get("authorization"))
            except Unauthenticated as refused:
                challenge = {"www-authenticate": refused.challenge}
                return error_response(401, refused.code, refused.message, challenge)
            access = node.authenticator.access
            if access is not None and not access.permits(principal, "cluster"):
                message = f'{request.url.path} needs a role that [auth.roles] grants "cluster"'
                return error_response(403, "FORBIDDEN", message)
            return await endpoint(request)

        return checked

    async def cluster_map(request: Request) -> Response:
        return Response(node.partition_map().to_json(), media_type="application/json")

    async def metrics(request: Request) -> Response:
        return Response(node.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    async def health(request: Request) -> Response:
        return JSONResponse({"node": node.id, "status": "ok"})

    async def ready(request: Request) -> Response:
        hosted = node.project.cluster.hosted_by(node.id)
        serving = node.catalog.current()
        missing = [p for p in hosted if p not in serving]
        if missing:
            message = f"{node.id} has no snapshot yet of partitions {missing}"
            return error_response(503, "NOT_READY", message)
        versions = {str(p): serving[p].version for p in hosted}
        return JSONResponse({"node": node.id, "ready": True, "versions": versions})

    return [
        Route("/cluster", operator(cluster_map)),
        Route("/health", health),
        Route("/metrics", operator(metrics)),
        Route("/ready", ready),
        internal("/internal/query", query, "POST"),
        internal("/internal/status", status, "GET", "HEAD"),
        internal("/internal/sync", sync, "POST"),
    ]
