"""The node's HTTP surface: /graphql for clients, /cluster for smart clients and proxies,
/internal/* for peers and the pipeline (cluster secret required)."""

from __future__ import annotations

import hmac
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
from graphql import GraphQLError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from gateway.body_limit import BodyLimit
from gateway.config import Project
from gateway.errors import GatewayError
from gateway.node import GatewayNode
from gateway.protocol import SECRET_HEADER, decode_request, encode_answers
from gateway.sync import STORE_UNREACHABLE
from resolvers.context import Context
from resolvers.schema import build_schema

log = logging.getLogger(__name__)


def error_code(error: GraphQLError) -> str:
    """The code of a GraphQL error: ours, or one for graphql-core's own errors."""
    if isinstance(error.original_error, GatewayError):
        return error.original_error.code
    if error.path is not None:  # raised while resolving a field, and not by us
        return "INTERNAL_SERVER_ERROR"
    if error.message.startswith("Syntax Error"):
        return "GRAPHQL_PARSE_FAILED"
    if error.message.startswith("Variable"):
        return "BAD_USER_INPUT"
    return "GRAPHQL_VALIDATION_FAILED"


class GraphQLApp(GraphQL[Context, None]):
    def __init__(self, node: GatewayNode) -> None:
        super().__init__(build_schema(node.project))
        self.node = node

    def encode_json(self, data: object) -> bytes:
        return orjson.dumps(data)

    async def get_context(self, request: Any, response: Any) -> Context:
        return Context.create(self.node, request.headers.get("authorization"))

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        response = await super().process_result(request, result)
        formatted_errors = cast(list[dict[str, Any]], response.get("errors") or [])
        for error, formatted in zip(result.errors or [], formatted_errors, strict=False):
            code = error_code(error)
            formatted.setdefault("extensions", {})["code"] = code
            if code == "INTERNAL_SERVER_ERROR":
                log.error("unexpected error", exc_info=error.original_error)
        return response


def create_app(project: Project, node_id: str) -> Starlette:
    node = GatewayNode(project, node_id)
    secret = project.cluster.secret.encode()

    def authorized(request: Request) -> bool:
        given = request.headers.get(SECRET_HEADER, "").encode()
        return hmac.compare_digest(given, secret)

    def refused() -> Response:
        return _error(401, "UNAUTHENTICATED", f"{SECRET_HEADER} is missing or wrong")

    async def internal_query(request: Request) -> Response:
        if not authorized(request):
            return refused()
        node.internal_requests += 1
        subqueries = decode_request(await request.body())
        answers = await node.execute_local(subqueries)
        return Response(encode_answers(answers), media_type="application/json")

    async def internal_status(request: Request) -> Response:
        if not authorized(request):
            return refused()
        return _json({**node.status(), "internal_requests": node.internal_requests})

    async def internal_sync(request: Request) -> Response:
        if not authorized(request):
            return refused()
        try:
            installed = await node.sync.run_once(force=True)
        except STORE_UNREACHABLE as exc:
            return _error(502, "STORE_UNREACHABLE", f"the snapshot store: {exc!r}")
        return _json({"node": node.id, "installed": installed, "errors": node.sync.errors})

    async def cluster_map(request: Request) -> Response:
        return _json(node.partition_map())

    async def health(request: Request) -> Response:
        return _json({"node": node.id, "status": "ok"})

    async def home(request: Request) -> Response:
        return RedirectResponse("/graphql")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await node.start()
        yield
        await node.stop()

    app = Starlette(
        routes=[
            Route("/", home),
            Route(
                "/graphql",
                BodyLimit(GraphQLApp(node), project.settings.max_request_bytes),
                methods=["GET", "POST"],
            ),
            Route("/cluster", cluster_map),
            Route("/health", health),
            Route("/internal/query", internal_query, methods=["POST"]),
            Route("/internal/status", internal_status),
            Route("/internal/sync", internal_sync, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    app.state.node = node
    return app


def _error(status: int, code: str, message: str) -> Response:
    """The internal endpoints' one error shape."""
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def _json(body: Any) -> Response:
    return Response(
        orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS), media_type="application/json"
    )
