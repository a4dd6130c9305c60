"""A node's ASGI app: the gateway's own endpoints plus the GraphQL API, and their lifecycle."""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import strawberry
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocket

from contracts import tracing
from contracts.project import Project
from gateway import http
from gateway.node import GatewayNode
from gateway.runtime.lanes import Lanes
from gateway.runtime.process import tune_for_serving
from gateway.workers.roles import ALONE, Role
from resolvers.execution.operations import Operations
from resolvers.schema.build import build_schema
from resolvers.transport import websocket as websocket_protocol
from resolvers.transport.endpoint import GraphQLEndpoint, Outgoing
from resolvers.transport.live import Hub
from stategate import logs
from stategate.origins import Origins

GRAPHQL = "/graphql"
STATIC = Path(__file__).parent / "static"  # client libraries pages load from the node
PLAYGROUND = Path(__file__).parent / "playground.html"  # GraphiQL, on assets from STATIC
SCHEMA_DIGITS = 12
PLAYGROUND_QUERY = """# Every store's fields are in the Docs and Explorer panes; any query field
# can also be run as a subscription (over WebSocket, on this same URL).
{
  stores { name kind topic keyType columns { name type } }
}
"""


def playground(query: str = PLAYGROUND_QUERY) -> str:
    """The GraphiQL page, with `query` as the editor's default."""
    default = json.dumps(query).replace("<", "\\u003c")  # no "</script>" inside the script
    return PLAYGROUND.read_text().replace("__DEFAULT_QUERY__", default)


class Direct:
    """The two endpoints that take a node's every request go straight to their handlers,
    past Starlette's route table and its exception middleware: /graphql, a client's (its
    endpoint answers every request itself, errors included), and POST /internal/query, a
    peer's (behind the cluster secret, gateway/http.py). Everything else is routed."""

    def __init__(self, graphql: ASGIApp, app: Starlette, lanes: Lanes) -> None:
        self.graphql = graphql
        self.app = app
        self.lanes = lanes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            if scope["path"] == GRAPHQL:
                with self.lanes.request():  # a client's request has the node's Python first
                    await self.graphql(scope, receive, send)
                return
            if scope["path"] == http.INTERNAL_QUERY and scope["method"] == "POST":
                scope["app"] = self.app  # where its endpoint finds the node, as routed
                await http.internal_query(scope, receive, send)
                return
        await self.app(scope, receive, send)


@dataclass(frozen=True)
class Answered:
    headers: list[tuple[bytes, bytes]]
    body: bytes


class NodeApp:
    """A node's ASGI app (`asgi`, what the server runs: no layer of this class's on a
    request's way), and what a reload of its project file changes in it
    (stategate/reloading.py): the objects that read those entries per request."""

    def __init__(
        self,
        asgi: ASGIApp,
        node: GatewayNode,
        operations: Operations,
        origins: Origins,
        endpoint: GraphQLEndpoint,
    ) -> None:
        self.asgi = asgi
        self.node = node
        self.operations = operations
        self.origins = origins
        self.endpoint = endpoint

    def at_once(self, scope: Scope, body: bytes) -> Answered | Awaitable[Answered | None] | None:
        """A whole request's answer (status 200) when its endpoint (one of AT_ONCE) reads it
        from memory at once and the app's layers would add nothing to it (no CORS headers),
        or (a known read of another node's key) that answer to await; else None, and None
        from the awaited answer: the request goes through `asgi`. What the HTTP server's
        protocol asks first (stategate/inline.py)."""
        if scope["path"] == http.INTERNAL_QUERY:
            answer = http.internal_at_once(self.node, Headers(scope=scope), body)
            return None if answer is None else Answered(http.json_head(answer), answer)
        if scope["path"] != GRAPHQL:
            return None
        if self.origins.origins and any(name == b"origin" for name, _ in scope["headers"]):
            return None
        outgoing = self.endpoint.at_once(scope, body)
        if outgoing is None or isinstance(outgoing, Outgoing):
            return self._answered(outgoing)
        return self._later(outgoing)

    async def _later(self, outgoing: Awaitable[Outgoing | None]) -> Answered | None:
        return self._answered(await outgoing)

    def _answered(self, outgoing: Outgoing | None) -> Answered | None:
        if outgoing is None:
            return None
        return Answered(outgoing.head(self.node.answer_headers()), outgoing.body)

    def reload(self, project: Project) -> None:
        """Apply `project`, which differs from the running one only in what a reload applies;
        a ConfigError (keys [auth] names that cannot be read) before anything changed."""
        self.node.take(project)
        self.operations.take(project.settings)
        self.origins.listing(project.settings.cors_origins)
        logs.level(project.settings)


AT_ONCE = frozenset({GRAPHQL, http.INTERNAL_QUERY})  # the paths NodeApp.at_once may answer


def schema_version(schema: strawberry.Schema) -> str:
    """What tells two nodes' schemas apart: the SDL's SHA-256, its first 12 digits."""
    return hashlib.sha256(schema.as_str().encode()).hexdigest()[:SCHEMA_DIGITS]


def create_app(project: Project, node_id: str, role: Role = ALONE) -> NodeApp:
    # the operations file first: a bad one stops the node before it opens anything
    def rows_of(store: str) -> int:
        return node.store_rows(store)

    operations = Operations(
        build_schema(project), project.settings, project.operations_file, rows_of, role.workers
    )
    node = GatewayNode(project, node_id, role, schema_version(operations.schema))

    def serve(stores: frozenset[str]) -> None:
        schema = build_schema(node.project, stores)
        operations.switch(schema)
        node.schema = schema_version(schema)

    node.when_served(serve)

    async def home(request: Request) -> Response:
        return RedirectResponse("/graphql")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        tracing.configure(node_id)  # in each process that serves (OTEL_TRACES_EXPORTER)
        await node.start()
        hub.start()
        tune_for_serving()
        yield
        await hub.stop()
        await node.stop()
        tracing.flush()

    hub = Hub(node, operations)
    node.metrics.watch_reading(hub.reading)

    async def graphql_ws(websocket: WebSocket) -> None:
        await websocket_protocol.serve(websocket, hub)

    endpoint = GraphQLEndpoint(node, operations, playground())
    pages = project.pages_dir
    app = Starlette(
        routes=[
            Route("/", home),
            WebSocketRoute("/graphql", graphql_ws),
            *http.ROUTES,
            Mount("/static", StaticFiles(directory=STATIC)),
            *([Mount("/pages", StaticFiles(directory=pages, html=True))] if pages else []),
        ],
        lifespan=lifespan,
        exception_handlers={405: http.method_not_allowed},
    )
    app.state.node = node
    origins = Origins(Direct(endpoint, app, node.lanes), project.settings.cors_origins)
    return NodeApp(origins, node, operations, origins, endpoint)
