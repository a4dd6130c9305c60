"""How an operation runs, chosen once when its document is prepared
(resolvers/execution/operations.py), as strawberry plugs an executor in at one hook.

General runs graphql-core's executor (with the fast completion of plain records,
resolvers/execution/completion.py). Compiled runs a document's OperationPlan
(resolvers/execution/plans.py; for root fields that each read one key, its KeyLookup:
resolvers/execution/key_lookup.py) and hands over only what the plan cannot word: a request
whose variables do not bind, before anything ran; or, after the root fields ran, their
results, which graphql-core then completes without running a resolver again. Either way a
request's routed batch runs once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, cast

import graphql
import strawberry
from graphql import DocumentNode, GraphQLResolveInfo, GraphQLSchema
from strawberry.execution import optimized_is_awaitable
from strawberry.types import ExecutionResult

from resolvers.execution.completion import PlainRecordExecutionContext
from resolvers.execution.key_lookup import KeyLookup
from resolvers.execution.plans import OperationPlan, Resolved
from resolvers.execution.results import response_extensions
from resolvers.schema.context import Context


class Executor(Protocol):
    async def run(self, context: Context, variables: dict[str, Any] | None) -> ExecutionResult: ...


@dataclass(frozen=True)
class General:
    schema: GraphQLSchema
    document: DocumentNode
    name: str | None

    async def run(
        self,
        context: Context,
        variables: dict[str, Any] | None,
        resolved: Mapping[str, Any] | None = None,
    ) -> ExecutionResult:
        """The result; with `resolved`, the root fields' results are those, not run again."""
        outcome = graphql.execute(
            self.schema,
            self.document,
            context_value=context,
            variable_values=variables,
            operation_name=self.name,
            middleware=None if resolved is None else [_resolved_roots(resolved)],
            executor_class=PlainRecordExecutionContext,
            is_awaitable=cast(Any, optimized_is_awaitable),  # strawberry's, typed as bool
        )
        done = await outcome if inspect.isawaitable(outcome) else outcome
        errors = done.errors
        if errors and done.data is None:  # refused before any field ran: the variables
            for error in errors:
                if error.path is None:
                    error.extensions = {**(error.extensions or {}), "code": "BAD_USER_INPUT"}
        return ExecutionResult(done.data, errors, response_extensions(context))


@dataclass(frozen=True)
class Compiled:
    plan: OperationPlan
    schema: strawberry.Schema
    general: General
    key: KeyLookup | None = None  # when each root field reads one key and nothing else

    async def run(self, context: Context, variables: dict[str, Any] | None) -> ExecutionResult:
        if self.key is not None:
            looked_up = await self.key.run(context, variables)
            if isinstance(looked_up, ExecutionResult):
                return looked_up
            if isinstance(looked_up, Resolved):
                return await self.general.run(context, variables, resolved=looked_up.results)
        outcome = await self.plan.run(self.schema, context, variables)
        if isinstance(outcome, ExecutionResult):
            return outcome
        if isinstance(outcome, Resolved):
            return await self.general.run(context, variables, resolved=outcome.results)
        return await self.general.run(context, variables)  # UNBOUND: nothing ran yet


def _resolved_roots(resolved: Mapping[str, Any]) -> Callable[..., Any]:
    """graphql-core middleware: a root field's value is its result in `resolved`."""

    def resolve(
        next_: Callable[..., Any], root: Any, info: GraphQLResolveInfo[Any], **args: Any
    ) -> Any:
        if info.path.prev is not None:
            return next_(root, info, **args)
        result = resolved[cast(str, info.path.key)]
        if isinstance(result, BaseException):
            raise result
        return result

    return resolve
