"""The schema: fixed metadata queries plus the typed fields of every declared store."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.extensions import (
    AddValidationRules,
    MaxAliasesLimiter,
    ParserCache,
    QueryDepthLimiter,
    SchemaExtension,
    ValidationCache,
)
from strawberry.schema.config import StrawberryConfig
from strawberry.tools import create_type

from gateway.config import Project
from gateway.positions import encode_token, merge
from resolvers import cluster
from resolvers.completion import PlainRecordExecutionContext
from resolvers.scalars import SCALARS
from resolvers.stores import store_fields


class ResponseExtensions(SchemaExtension):
    """Adds the response's consistency token and its routing trace to `extensions`."""

    def get_results(self) -> dict[str, Any]:
        context = self.execution_context.context
        if context is None or not hasattr(context, "batch"):
            return {}
        traces = context.batch.traces
        return {
            "consistencyToken": encode_token(merge(context.tokens)),
            "routing": {
                "rounds": [r for t in traces for r in t.rounds],
                "internalRequests": sum(t.calls() for t in traces),
                "millis": round(sum(t.millis for t in traces), 3),
            },
        }


def build_schema(project: Project) -> strawberry.Schema:
    fields = [
        strawberry.field(cluster.stores, name="stores", description="The declared stores."),
        strawberry.field(cluster.cluster, name="cluster", description="The partition map."),
    ]
    for store in project.stores.values():
        fields.extend(store_fields(project, store))
    query = create_type("Query", fields)
    limit = project.settings.max_keys_per_request
    # The limiters' rule classes are built once: the validation cache is keyed by them.
    rules = [
        *QueryDepthLimiter(max_depth=8).validation_rules,
        *MaxAliasesLimiter(max_alias_count=limit).validation_rules,
    ]
    # Factories, not instances: strawberry shares an instance across concurrent requests.
    extensions: list[Any] = [
        lambda: ParserCache(maxsize=256),
        lambda: ValidationCache(maxsize=256),
        lambda: AddValidationRules(rules),
        ResponseExtensions,
    ]
    return strawberry.Schema(
        query=query,
        extensions=extensions,
        execution_context_class=PlainRecordExecutionContext,
        config=StrawberryConfig(scalar_map=SCALARS),
    )


def sdl(project: Project) -> str:
    return build_schema(project).as_str() + "\n"
