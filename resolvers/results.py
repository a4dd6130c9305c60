"""One GraphQL operation run against the node, and its result in the response shape: the
compiled plan when one covers the document (resolvers/plans.py), else Strawberry's general
path; every error with one `extensions.code`."""

from __future__ import annotations

import logging
from typing import Any

import strawberry
from graphql import GraphQLError
from strawberry.types import ExecutionResult

from contracts.errors import GatewayError
from resolvers.context import Context
from resolvers.plans import PlanCache

log = logging.getLogger(__name__)


def error_code(error: GraphQLError) -> str:
    """The code of a GraphQL error: ours, the phase's (resolvers/schema.py), or a bug's."""
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
        log.error("unexpected error", exc_info=error.original_error)
    return formatted


def outcome(result: ExecutionResult) -> str:
    """ok, partial (data and errors) or error (no data), as the metrics count them."""
    if not result.errors:
        return "ok"
    return "error" if result.data is None else "partial"


def response(result: ExecutionResult) -> dict[str, Any]:
    """{"data", "errors"?, "extensions"?}, as GraphQL over HTTP answers it."""
    body: dict[str, Any] = {"data": result.data}
    if result.errors:
        body["errors"] = [coded(error) for error in result.errors]
    if result.extensions:
        body["extensions"] = result.extensions
    return body


async def run(
    schema: strawberry.Schema,
    plans: PlanCache,
    context: Context,
    query: str,
    variables: dict[str, Any] | None,
    operation_name: str | None,
) -> tuple[ExecutionResult, Context]:
    """Run a query operation: its plan, or the general path when no plan answers it. Returns
    the result and the context that made it (a fresh one when the plan gave up)."""
    plan = plans.get(query, operation_name)
    if plan is not None:
        result = await plan.run(schema, context, variables)
        if result is not None:
            return result, context
        context = context.again()
    result = await schema.execute(
        query, variable_values=variables, context_value=context, operation_name=operation_name
    )
    return result, context
