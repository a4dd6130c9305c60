"""The schema: fixed metadata queries plus the typed fields of every declared store."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import lru_cache
from typing import Any

import graphql
import strawberry
from graphql import (
    ASTValidationRule,
    DocumentNode,
    GraphQLError,
    NoSchemaIntrospectionCustomRule,
    OperationDefinitionNode,
    OperationType,
    ValidationRule,
)
from strawberry.extensions import (
    AddValidationRules,
    MaxAliasesLimiter,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import create_type

from contracts.positions import encode_token
from contracts.project import Project
from contracts.settings import Settings
from resolvers import cluster
from resolvers.completion import PlainRecordExecutionContext
from resolvers.context import Context
from resolvers.scalars import SCALARS
from resolvers.stores import store_fields


class CachedParse(SchemaExtension):
    """Parses a document once (LRU of `size`), coding a syntax error GRAPHQL_PARSE_FAILED."""

    def __init__(self, parse: Callable[..., DocumentNode]) -> None:
        self.parse = parse

    def on_parse(self) -> Iterator[None]:
        context = self.execution_context
        try:
            context.graphql_document = self.parse(context.query, **context.parse_options)
        except GraphQLError as error:
            error.extensions = {**(error.extensions or {}), "code": "GRAPHQL_PARSE_FAILED"}
            raise
        yield


class PhaseCodes(SchemaExtension):
    """Codes the errors of the phases after parsing: a document that does not validate,
    variables that do not fit (graphql-core's errors have no code; GatewayErrors raised by
    resolvers carry their own)."""

    def on_validate(self) -> Iterator[None]:
        yield
        for error in self.execution_context.pre_execution_errors or ():
            error.extensions = {"code": "GRAPHQL_VALIDATION_FAILED", **(error.extensions or {})}

    def on_execute(self) -> Iterator[None]:
        yield
        result = self.execution_context.result
        if result is not None and result.data is None:  # refused before any field ran
            for error in result.errors or ():
                if error.path is None:
                    error.extensions = {**(error.extensions or {}), "code": "BAD_USER_INPUT"}


class ResponseExtensions(SchemaExtension):
    """Adds the response's consistency token and its routing trace to `extensions`."""

    def get_results(self) -> dict[str, Any]:
        context = self.execution_context.context
        return response_extensions(context) if isinstance(context, Context) else {}


def response_extensions(context: Context) -> dict[str, Any]:
    traces = context.batch.traces
    return {
        "consistencyToken": encode_token(context.queries.response_token()),
        "routing": {
            "rounds": [r for t in traces for r in t.rounds],
            "internalRequests": sum(t.calls() for t in traces),
            "millis": round(sum(t.millis for t in traces), 3),
        },
    }


def limit_rules(settings: Settings) -> list[type[ASTValidationRule]]:
    """The depth and alias limits, as validation rules."""
    return [
        *QueryDepthLimiter(max_depth=settings.max_query_depth).validation_rules,
        *MaxAliasesLimiter(max_alias_count=settings.max_keys_per_request).validation_rules,
    ]


def introspection_rules(settings: Settings) -> list[type[ASTValidationRule]]:
    """graphql-core's rule that refuses `__schema` and `__type`, when introspection is off."""
    return [] if settings.introspection else [NoSchemaIntrospectionCustomRule]


SUBSCRIPTION_DESCRIPTION = (
    "Every query field, pushed over graphql-transport-ws on /graphql: the first result at "
    "once, then a new one whenever a partition it reads switches version and the result "
    "changed (README: Subscriptions)."
)


class SubscriptionsOverWebSocket(ValidationRule):
    """Over HTTP, a subscription is refused (SUBSCRIPTION_OVER_HTTP): it would run once,
    which no subscriber wants (resolvers/websocket.py serves them)."""

    def enter_operation_definition(self, node: OperationDefinitionNode, *_: Any) -> None:
        if node.operation is OperationType.SUBSCRIPTION:
            message = "subscriptions are served over WebSocket (graphql-transport-ws) on /graphql"
            code = {"code": "SUBSCRIPTION_OVER_HTTP"}
            self.report_error(GraphQLError(message, node, extensions=code))


def build_schema(project: Project) -> strawberry.Schema:
    fields = [
        strawberry.field(cluster.stores, name="stores", description="The declared stores."),
        strawberry.field(cluster.cluster, name="cluster", description="The partition map."),
    ]
    for store in project.stores.values():
        fields.extend(store_fields(store, project.settings.default_page_size))
    query = create_type("Query", fields)
    # The same fields: a subscription runs as the query it mirrors (resolvers/live.py).
    subscription = create_type(
        "Subscription", [copy.copy(f) for f in fields], description=SUBSCRIPTION_DESCRIPTION
    )
    settings = project.settings
    # The limiters' rule classes are built once: the validation cache is keyed by them.
    rules = [*limit_rules(settings), *introspection_rules(settings), SubscriptionsOverWebSocket]
    cached = settings.document_cache_size
    parse = lru_cache(maxsize=cached)(graphql.parse)
    # Factories, not instances: strawberry shares an instance across concurrent requests.
    extensions: list[Any] = [
        PhaseCodes,
        lambda: CachedParse(parse),
        lambda: ValidationCache(maxsize=cached),
        lambda: AddValidationRules(rules),
        ResponseExtensions,
    ]
    return strawberry.Schema(
        query=query,
        subscription=subscription,
        extensions=extensions,
        execution_context_class=PlainRecordExecutionContext,
        config=StrawberryConfig(scalar_map=SCALARS),
    )


def sdl(project: Project) -> str:
    return build_schema(project).as_str() + "\n"
