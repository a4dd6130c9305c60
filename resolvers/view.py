"""The GraphQL endpoint of a node: Strawberry's ASGI view with our context, orjson, and one
`extensions.code` on every error; a POSTed query a compiled plan covers (resolvers/plans.py)
skips the view's per-request machinery and is answered from its plan.

With [auth], the bearer token is verified once per request (gateway/auth.py) before either
path runs: a missing or invalid one is answered 401 with one coded GraphQL error and a
WWW-Authenticate challenge; the GraphiQL page itself is served to anyone."""

from __future__ import annotations

import time
from typing import Any, cast

import orjson
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from contracts.access import ANONYMOUS
from gateway.auth import Unauthenticated
from gateway.node import GatewayNode
from resolvers import results
from resolvers.context import Context
from resolvers.plans import PlanCache
from resolvers.schema import build_schema

_PLAIN_KEYS = {"query", "variables", "operationName"}
# What the request's scope carries for the metrics (gateway/metrics.py).
_OPERATION = "stategate.operation"
_OUTCOME = "stategate.outcome"
_PRINCIPAL = "stategate.principal"  # verified once, shared by the plan and the view


class GraphQLView(GraphQL[Context, None]):
    def __init__(self, node: GatewayNode, playground: str) -> None:
        schema = build_schema(node.project)
        super().__init__(schema)
        self.node = node
        self.plans = PlanCache(schema, node.project.settings)
        self.playground = playground  # the GraphiQL page a browser's GET /graphql gets

    async def render_graphql_ide(self, request: Request) -> Response:
        request.scope[_OUTCOME] = None  # a page, not a GraphQL request
        return HTMLResponse(self.playground)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        scope[_OUTCOME] = "refused"  # until a result is made
        if scope["method"] == "GET":
            scope[_OPERATION] = Request(scope).query_params.get("operationName")
        try:
            await self._answer(scope, receive, send)
        except Unauthenticated as refused:
            await unauthenticated(refused)(scope, receive, send)
        finally:
            outcome = scope[_OUTCOME]
            if outcome is not None:
                seconds = time.perf_counter() - started
                self.node.metrics.request(scope.get(_OPERATION), outcome, seconds)

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST" or not _json(scope):
            await super().__call__(scope, receive, send)
            return
        body = await _read(receive)
        response = await self._planned(Request(scope), body)
        if response is None:
            await super().__call__(scope, _replay(body, receive), send)
        else:
            await response(scope, receive, send)

    async def _planned(self, request: Request, body: bytes) -> Response | None:
        """The answer of a compiled plan, or None for the view to answer."""
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(data, dict) or set(data) - _PLAIN_KEYS:
            return None
        query, variables, name = (data.get(k) for k in ("query", "variables", "operationName"))
        request.scope[_OPERATION] = name if isinstance(name, str) else None
        if not (
            isinstance(query, str)
            and (variables is None or isinstance(variables, dict))
            and (name is None or isinstance(name, str))
        ):
            return None
        plan = self.plans.get(query, name)
        if plan is None:
            return None
        context = self._context(request)
        result = await plan.run(self.plans.schema, context, variables)
        if result is None:
            return None
        response = await self.process_result(request, result)
        return Response(self.encode_json(response), media_type="application/json")

    def encode_json(self, data: object) -> bytes:
        return orjson.dumps(data)

    async def get_context(self, request: Any, response: Any) -> Context:
        if self.should_render_graphql_ide(self.request_adapter_class(request)):
            return Context.create(self.node, None, ANONYMOUS)  # a page: nothing is read
        return self._context(request)

    def _context(self, request: Request) -> Context:
        """The request's context; its bearer token verified at most once (raises
        Unauthenticated)."""
        authorization = request.headers.get("authorization")
        principal = request.scope.get(_PRINCIPAL)
        if principal is None:
            principal = self.node.authenticator.authenticate(authorization)
            request.scope[_PRINCIPAL] = principal
        return Context.create(self.node, authorization, principal)

    async def process_result(self, request: Any, result: ExecutionResult) -> GraphQLHTTPResponse:
        request.scope[_OUTCOME] = results.outcome(result)
        return cast(GraphQLHTTPResponse, results.response(result))


def unauthenticated(refused: Unauthenticated) -> Response:
    """401 with the GraphQL error shape clients understand, and the Bearer challenge."""
    error = {"message": refused.message, "extensions": refused.extensions}
    return JSONResponse(
        {"errors": [error]}, status_code=401, headers={"WWW-Authenticate": refused.challenge}
    )


def _json(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-type":
            return bool(value.split(b";")[0].strip().lower() == b"application/json")
    return False


async def _read(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive that gives the body already read, then the connection's own messages."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
