"""The GraphQL endpoint of a node: Strawberry's ASGI view with our context, orjson, and one
`extensions.code` on every error."""

from __future__ import annotations

import logging
from typing import Any, cast

import orjson
from graphql import GraphQLError
from strawberry.asgi import GraphQL
from strawberry.http import GraphQLHTTPResponse
from strawberry.types import ExecutionResult

from contracts.errors import GatewayError
from gateway.node import GatewayNode
from resolvers.context import Context
from resolvers.schema import build_schema

log = logging.getLogger(__name__)


def error_code(error: GraphQLError) -> str:
    """The code of a GraphQL error: ours, the phase's (resolvers/schema.py), or a bug's."""
    if isinstance(error.original_error, GatewayError):
        return error.original_error.code
    code = (error.extensions or {}).get("code")
    return code if isinstance(code, str) else "INTERNAL_SERVER_ERROR"


class GraphQLView(GraphQL[Context, None]):
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
